"""tools/fuzz in its short mode: every parser, a few seconds each.

Every target must survive its mutated inputs with only the errors its
parser documents; the long mode (``tools/fuzz --long``) runs a million
inputs per target outside the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Seconds of fuzzing per parser.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_every_parser_survives_the_short_fuzz(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "fuzz"),
            "--engine",
            "mutate",
            "--seconds",
            "3",
            "--json",
            "--out",
            str(tmp_path / "findings"),
            "--work",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    names = {r["target"] for r in results}
    assert names == {
        "mpa_responder",
        "mpa_initiator",
        "fpdu_decoder",
        "ooo_receiver",
        "rdmap_receive",
        "queue_pair",
        "vitcp_segment",
        "vitcp_connection",
        "capture",
        "kernels",
        "fast_path",
    }, proc.stderr
    for result in results:
        assert result["inputs"] > 100, result  # it really ran
        assert result["findings"] == [], result
    assert proc.returncode == 0, proc.stderr
