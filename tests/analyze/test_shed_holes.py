"""A hole the analyzer gives up while shedding memory is noted once.

``_Connection.shed`` (past ``Limits.total`` octets held in all connections)
gives up the holes a direction waits on and notes each; the next segment
must not note the same holes again as given up by the reassembly limit.
"""

from __future__ import annotations

import io

import pytest
from analyze_traffic import drop_segments, payload, send, standard

from iwarp.analyze import analyzer
from iwarp.analyze.analyzer import Options, analyze_stream
from iwarp.analyze.capture import TcpPacket, read_tcp_packets
from iwarp.analyze.records import NoteRecord


def test_a_hole_given_up_by_shed_is_noted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    conv = standard(False, False)
    conv.i2r = [send(i, payload(200 + 13 * i, i)) for i in range(1, 12)]
    cap, seqs = conv.capture()
    data = drop_segments(cap.to_bytes(), port=50000, seqs={seqs["initiator"][3]})
    on_segment = analyzer._Connection.on_segment
    shed: list[int] = []

    def shedding(self: analyzer._Connection, d: analyzer._Direction, packet: TcpPacket) -> None:
        on_segment(self, d, packet)
        if not shed and d.reasm is not None and d.reasm.pending:
            # Memory ran short while this direction waits past the hole.
            shed.append(packet.frame)
            self.shed("memory is short")

    monkeypatch.setattr(analyzer._Connection, "on_segment", shedding)
    outputs = list(analyze_stream(read_tcp_packets(io.BytesIO(data)), Options()))
    assert shed  # the hole was waited on, and given up by shed
    notes = [o.message for o in outputs if isinstance(o, NoteRecord)]
    given_up = [m for m in notes if "gave up waiting" in m]
    assert len(given_up) == 1, given_up
    assert given_up[0].startswith("memory is short")
