"""``iwarp proxy`` between iwarp's own peers on 127.0.0.1: clean forwarding
and what each end does after a fault, on the asyncio adapter (``iwarp
listen`` / ``iwarp connect``) and the blocking one (``iwarp.sync``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import pytest

from clitools import by_type, connect, listen
from iwarp.errors import IwarpError
from iwarp.proxy.server import ProxyOptions, ProxyServer
from iwarp.proxy.spec import parse_fault
from iwarp.sync import rdma

T = 10.0


class Proxy:
    """A ProxyServer on a loop of its own thread; summaries collected."""

    def __init__(self, target: int, faults: list[str], *, quiet: bool = False) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.summaries: list[dict[str, object]] = []
        self.ended = threading.Event()
        options = ProxyOptions(
            target=("127.0.0.1", target),
            faults=[parse_fault(f) for f in faults],
            idle_timeout=30,
            fpdu_records=not quiet,  # quiet: clean FPDUs counted in place
        )

        async def start() -> tuple[ProxyServer, int]:
            server = ProxyServer(options, on_summary=self._summary)
            _, port = await server.start("127.0.0.1", 0)
            return server, port

        self.server, self.port = asyncio.run_coroutine_threadsafe(start(), self.loop).result(T)

    def _summary(self, summary: dict[str, object]) -> None:
        self.summaries.append(summary)
        self.ended.set()

    def summary(self) -> dict[str, object]:
        assert self.ended.wait(T), "the proxied connection did not end"
        return self.summaries[0]

    def close(self) -> None:
        done: Future[None] = asyncio.run_coroutine_threadsafe(self.server.close(), self.loop)
        done.result(T)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(T)
        self.loop.close()


@contextmanager
def proxy(target: int, *faults: str, quiet: bool = False) -> Iterator[Proxy]:
    running = Proxy(target, list(faults), quiet=quiet)
    try:
        yield running
    finally:
        running.close()


def faults_of(summary: dict[str, object]) -> list[str]:
    applied = summary["faults"]
    assert isinstance(applied, list)
    return [str(f["action"]) for f in applied]


# -- the asyncio adapter: iwarp listen / iwarp connect ------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "op"),
    [([], "send"), (["--markers"], "write"), (["--mpa-rev", "1", "--markers"], "read")],
)
def test_clean_forwarding_changes_nothing(flags: list[str], op: str) -> None:
    with listen("--connections", "1", "--op", op, *flags) as listener, proxy(listener.port) as px:
        status, lines = connect(px.port, "--count", "5", "--size", "3000", "--op", op, *flags)
        assert status == 0, lines
        _, heard = listener.finish()
        summary = px.summary()
    sent = by_type(lines, "summary")[0]
    received = by_type(heard, "summary")[0]
    assert sent["sha256"] == received["sha256"]
    assert summary["errors"] == 0 and summary["faults"] == []
    assert summary["fpdus_to_responder"] and summary["fpdus_to_initiator"]
    assert summary["initiator_after"] == "close"


@pytest.mark.slow
@pytest.mark.parametrize("markers", [[], ["--markers"]])
def test_resegment_1_changes_nothing(markers: list[str]) -> None:
    with (
        listen("--connections", "1", *markers) as listener,
        proxy(
            listener.port, "to=responder; every; resegment 1", "to=initiator; every; resegment 7"
        ) as px,
    ):
        status, lines = connect(px.port, "--count", "3", "--size", "1000", *markers)
        assert status == 0, lines
        _, heard = listener.finish()
        summary = px.summary()
    assert by_type(lines, "summary")[0]["sha256"] == by_type(heard, "summary")[0]["sha256"]
    assert set(faults_of(summary)) == {"resegment"} and summary["errors"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("markers", [[], ["--markers"]])
def test_corrupt_crc_draws_the_crc_terminate(markers: list[str]) -> None:
    with (
        listen("--connections", "1", *markers) as listener,
        proxy(listener.port, "to=responder; nth=2; corrupt-crc") as px,
    ):
        status, lines = connect(px.port, "--count", "3", *markers)
        listener.finish()
        summary = px.summary()
    assert status == 1
    assert faults_of(summary) == ["corrupt-crc"]
    # iwarp listen resets after its Terminate; a reset that overtakes the
    # proxy's read of the Terminate drops it (TCP's race, not the proxy's).
    # The proxy reads what came before a reset (iwarp listen closes right
    # behind its Terminate): the Terminate is never lost to it.
    after = str(summary["responder_after"])
    assert after.startswith("terminate 2/0/2 "), after
    (error,) = by_type(lines, "error")
    assert (error["layer"], error["etype"], error["code"]) == (2, 0, 2)


@pytest.mark.slow
def test_rewrite_stag_draws_the_invalid_stag_terminate() -> None:
    with (
        listen("--connections", "1", "--op", "write") as listener,
        proxy(listener.port, "to=responder; opcode == rdma_write; rewrite stag=0x7777") as px,
    ):
        status, lines = connect(px.port, "--count", "2", "--op", "write")
        listener.finish()
        summary = px.summary()
    assert status == 1
    after = str(summary["responder_after"])
    # RFC 5041 §7.2: tagged buffer error (type 1), invalid STag (code 0).
    assert after.startswith("terminate 1/1/0 "), after
    # The proxy passes the Terminate on before the listener's reset (read
    # from the leg before the reset is passed on): iwarp connect reports it.
    (error,) = by_type(lines, "error")
    assert (error["layer"], error["etype"], error["code"]) == (1, 1, 0)


@pytest.mark.slow
def test_injected_terminate_reaches_the_initiator() -> None:
    with (
        listen("--connections", "1") as listener,
        proxy(listener.port, "to=initiator; terminate rdmap/1/0") as px,
    ):
        status, lines = connect(px.port, "--count", "2")
        listener.finish()
        summary = px.summary()
    assert status == 1
    (error,) = by_type(lines, "error")
    assert (error["layer"], error["etype"], error["code"]) == (0, 1, 0)
    assert faults_of(summary) == ["terminate"]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["fin", "rst"])
def test_fin_and_rst_end_the_connection(how: str) -> None:
    with (
        listen("--connections", "1") as listener,
        proxy(listener.port, f"to=responder; nth=1; {how}") as px,
    ):
        status, _ = connect(px.port, "--count", "2")
        listener.finish()
        summary = px.summary()
    assert status == 1
    assert faults_of(summary) == [how]


# -- the blocking adapter: iwarp.sync ---------------------------------------------------


def sync_echo(listener: rdma.Listener, count: int, failures: list[BaseException]) -> None:
    try:
        with listener.accept(timeout=T) as qp:
            for _ in range(count):
                qp.send(qp.receive(timeout=T), timeout=T)
    except (IwarpError, OSError) as exc:
        failures.append(exc)


@pytest.mark.parametrize("markers", [False, True])
def test_sync_peers_through_the_proxy(markers: bool) -> None:
    from iwarp.mpa.config import MpaConfig

    config = MpaConfig(markers=markers)
    listener = rdma.listen("127.0.0.1", 0, config=config)
    failures: list[BaseException] = []
    server = threading.Thread(target=sync_echo, args=(listener, 4, failures))
    server.start()
    try:
        with proxy(listener.port, "to=responder; nth=2; duplicate") as px:
            with rdma.connect("127.0.0.1", px.port, config=config, timeout=T) as qp:
                qp.send(b"one", timeout=T)
                assert qp.receive(timeout=T) == b"one"
                with pytest.raises(IwarpError):
                    qp.send(b"two", timeout=T)
                    qp.receive(timeout=T)
                    qp.send(b"three", timeout=T)
                    qp.receive(timeout=T)
            summary = px.summary()
    finally:
        server.join(T)
        listener.close()
    assert faults_of(summary) == ["duplicate"]
    assert failures  # the Responder saw the duplicate and ended the connection
    assert summary["responder_after"] != "silence"


@pytest.mark.parametrize("markers", [False, True])
def test_a_quiet_proxy_counts_what_a_recording_one_decodes(markers: bool) -> None:
    """Large messages through a proxy that counts clean FPDUs in place
    (``--quiet``) and one that records each: the same echo, and the same
    FPDUs, octets and errors (none) in both summaries."""
    from iwarp.mpa.config import MpaConfig

    config = MpaConfig(markers=markers)
    messages = [bytes([i]) * (30_000 + 4099 * i) for i in range(8)]
    summaries = []
    for quiet in (True, False):
        listener = rdma.listen("127.0.0.1", 0, config=config)
        failures: list[BaseException] = []
        server = threading.Thread(target=sync_echo, args=(listener, len(messages), failures))
        server.start()
        try:
            with proxy(listener.port, quiet=quiet) as px:
                with rdma.connect("127.0.0.1", px.port, config=config, timeout=T) as qp:
                    for message in messages:
                        qp.send(message, timeout=T)
                        assert qp.receive(timeout=T) == message
                summaries.append(px.summary())
        finally:
            server.join(T)
            listener.close()
        assert not failures
    counted, decoded = summaries
    keys = ("fpdus_to_responder", "fpdus_to_initiator", "octets_to_responder", "errors")
    assert [counted[k] for k in keys] == [decoded[k] for k in keys]
    assert counted["errors"] == 0 and int(str(counted["fpdus_to_responder"])) > len(messages)
