"""The MPA startup matrix over real loopback TCP sockets.

Rev 0/1/2 on each side (with the RFC 5044 Appendix C profiles where they
differ) x M each way x C each way x accept/reject x private data of 0, 1
and the maximum octets; then Rev 2 IRD/ORD (0x3FFF included) and the
peer-to-peer flags. Every cell runs on one event loop, concurrently, and is
checked against an oracle written from the specs (not from the code): the
outcome, the parameters both sides report, and, when accepted, data
flowing both ways with markers and CRC as negotiated.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from iwarp.asyncio.mpa import Accept, ConnectionRejectedError, MpaSocket, Reject, connect, serve
from iwarp.errors import MpaError
from iwarp.mpa.config import MpaConfig, Rev0Profile
from iwarp.mpa.events import RequestReceived
from iwarp.mpa.wire import IRD_ORD_NONE, RtrFlags

NP, P = Rev0Profile.NON_PERMISSIVE, Rev0Profile.PERMISSIVE
MESSAGES = [b"a", bytes(range(256)) * 3, b"\x5a" * 2999, b""]


@dataclass(frozen=True)
class Side:
    rev: int
    profile: Rev0Profile
    markers: bool
    crc: bool

    def config(self, **extra: object) -> MpaConfig:
        return MpaConfig(
            revision=self.rev,
            rev0_profile=self.profile,
            markers=self.markers,
            crc=self.crc,
            **extra,  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class Cell:
    init: Side
    resp: Side
    accept: bool
    pd_size: str  # "0", "1" or "max"

    def private_data(self) -> bytes:
        # "max": 512 octets in the frame; RFC 6581 enhanced data takes 4 of them.
        n = (508 if self.init.rev == 2 else 512) if self.pd_size == "max" else int(self.pd_size)
        return bytes((7 * i + 1) & 0xFF for i in range(n))


def expected(cell: Cell) -> tuple[str, dict[str, object]]:
    """The outcome the specs define, from the Initiator's point of view.

    Returns (outcome, facts): outcome is "ok", "rejected" or "error N".
    """
    i, r = cell.init, cell.resp
    rdmac = (i.rev == 0) != (r.rev == 0)
    if i.rev == 2 and r.rev < 2:
        # RFC 6581 §10: an unenhanced Responder (Rev 1, or Rev 0) treats the
        # enhanced Request as improperly formatted and closes; the Initiator
        # sees the TCP connection close during startup.
        return "error 1", {"server": "error 4"}
    if i.rev == 0 and r.rev >= 1 and r.profile is NP:
        return "error 4", {"server": "error 4"}  # Appendix C.2.1
    if i.rev >= 1 and r.rev == 0 and i.profile is NP:
        # Appendix C.2.2: the Initiator closes after the Rev 0 Reply.
        return "error 4", {"server": "closed" if cell.accept else "rejected"}
    if not cell.accept:
        return "rejected", {"server": "rejected"}
    revision = 0 if (i.rev == 0 or r.rev == 0) else min(i.rev, r.rev)
    # RFC 5044 §7.1.1: the Responder's M asks us for markers and ours asks it.
    # Appendix C: the Rev 0 side's Reply/behaviour forces markers on, except
    # that a Rev 0 Initiator still gets markers only if its own M asked.
    return "ok", {
        "revision": revision,
        "ddp_version": 0 if revision == 0 else 1,
        "markers_send": rdmac or r.markers,
        "markers_receive": (rdmac and i.rev >= 1) or i.markers,
        "crc": rdmac or i.crc or r.crc,
        "enhanced": i.rev == 2 and r.rev == 2,
        "server": "ok",
    }


def cells() -> list[Cell]:
    out = []
    bools = (False, True)
    for rev_i, rev_r in itertools.product((0, 1, 2), repeat=2):
        mixed = (rev_i == 0) != (rev_r == 0)
        for prof in (NP, P) if mixed else (NP,):
            for mi, mr, ci, cr, accept in itertools.product(bools, bools, bools, bools, bools):
                for pd in ("0", "1", "max"):
                    init, resp = Side(rev_i, prof, mi, ci), Side(rev_r, prof, mr, cr)
                    out.append(Cell(init, resp, accept, pd))
    return out


async def echo(sock: MpaSocket) -> None:
    async for ulpdu in sock:
        sock.send(ulpdu)
        await sock.drain()


def decider(accept: bool) -> Callable[[RequestReceived], Accept | Reject]:
    def decide(request: RequestReceived) -> Accept | Reject:
        reply = request.private_data[::-1]
        return Accept(reply) if accept else Reject(reply)

    return decide


async def run_cell(cell: Cell, port: int) -> tuple[str, object]:
    pd = cell.private_data()
    try:
        sock = await connect("127.0.0.1", port, config=cell.init.config(), private_data=pd)
    except ConnectionRejectedError as exc:
        assert exc.event.by_peer
        assert exc.private_data == pd[::-1]
        return "rejected", None
    except MpaError as exc:
        return f"error {exc.code}", str(exc)
    params = sock.params
    assert params.peer_private_data == pd[::-1]
    for m in MESSAGES:
        sock.send(m)
    echoed = [await sock.receive() for _ in MESSAGES]
    assert echoed == MESSAGES, cell
    await sock.close()
    return "ok", params


async def run_matrix(all_cells: list[Cell]) -> list[tuple[Cell, str, object]]:
    server_results: dict[tuple[Side, bool], Counter[str]] = {}
    servers = {}
    for cell in all_cells:
        key = (cell.resp, cell.accept)
        if key in servers:
            continue
        results: Counter[str] = Counter()
        server_results[key] = results

        def on_failure(error: BaseException, peer: object, results: Counter[str] = results) -> None:
            if isinstance(error, ConnectionRejectedError):
                results["rejected"] += 1
            else:
                assert isinstance(error, MpaError)
                results[f"error {error.code}"] += 1

        async def handler(sock: MpaSocket, results: Counter[str] = results) -> None:
            count = 0
            async for ulpdu in sock:
                sock.send(ulpdu)
                count += 1
            results["ok" if count else "closed"] += 1

        servers[key] = await serve(
            handler,
            "127.0.0.1",
            0,
            config=cell.resp.config(),
            decide=decider(cell.accept),
            on_failure=on_failure,
        )
    sem = asyncio.Semaphore(200)

    async def one(cell: Cell) -> tuple[Cell, str, object]:
        port = servers[(cell.resp, cell.accept)].sockets[0].getsockname()[1]
        async with sem:
            outcome, detail = await run_cell(cell, port)
        return cell, outcome, detail

    try:
        outcomes = await asyncio.gather(*(one(c) for c in all_cells))
        # Server-side outcomes, per server, as a multiset.
        await asyncio.sleep(0.05)
        for _ in range(100):
            want: dict[tuple[Side, bool], Counter[str]] = {}
            for cell in all_cells:
                want.setdefault((cell.resp, cell.accept), Counter())[
                    str(expected(cell)[1]["server"])
                ] += 1
            if want == server_results:
                break
            await asyncio.sleep(0.05)
        assert want == server_results
    finally:
        for server in servers.values():
            server.close()
            await server.wait_closed()
    return outcomes


def test_startup_matrix_over_loopback() -> None:
    all_cells = cells()
    assert len(all_cells) == 9 * 32 * 3 + 4 * 32 * 3  # 4 mixed pairs run both profiles
    results = asyncio.run(asyncio.wait_for(run_matrix(all_cells), 50))
    for cell, outcome, detail in results:
        want, facts = expected(cell)
        assert outcome == want, (cell, detail)
        if outcome == "ok":
            for name, value in facts.items():
                if name != "server":
                    assert getattr(detail, name) == value, (cell, name)


# --- Rev 2: IRD/ORD and peer-to-peer --------------------------------------------


NONE = IRD_ORD_NONE
W, R_, S_ = RtrFlags.WRITE, RtrFlags.READ, RtrFlags.SEND


@pytest.mark.parametrize(
    ("init_ird_ord", "resp_ird_ord"),
    [((16, 16), (16, 16)), ((4, 8), (2, 32)), ((NONE, NONE), (5, 5)), ((1, 1), (NONE, NONE))],
)
@pytest.mark.parametrize(
    ("p2p", "offered", "supported", "rtr"),
    [
        (False, W | R_, W | R_, None),
        (True, W | R_, W | R_, W),
        (True, R_, W | R_, R_),
        (True, S_ | R_, S_, S_),
        (True, R_, W, "error 7"),
    ],
)
def test_rev2_ird_ord_and_rtr(
    init_ird_ord: tuple[int, int],
    resp_ird_ord: tuple[int, int],
    p2p: bool,
    offered: RtrFlags,
    supported: RtrFlags,
    rtr: RtrFlags | str | None,
) -> None:
    icfg = MpaConfig(ird=init_ird_ord[0], ord=init_ird_ord[1], peer_to_peer=p2p, rtr_types=offered)
    rcfg = MpaConfig(ird=resp_ird_ord[0], ord=resp_ird_ord[1], rtr_types=supported)

    async def main() -> None:
        seen: list[RequestReceived] = []

        def decide(request: RequestReceived) -> Accept:
            seen.append(request)
            return Accept()

        server = await serve(echo, "127.0.0.1", 0, config=rcfg, decide=decide)
        port = server.sockets[0].getsockname()[1]
        try:
            if rtr == "error 7":
                with pytest.raises(MpaError) as info:
                    await connect("127.0.0.1", port, config=icfg)
                assert info.value.code == 7
                return
            sock = await connect("127.0.0.1", port, config=icfg)
            p = sock.params
            (request,) = seen
            assert request.enhanced is not None
            assert (request.enhanced.ird, request.enhanced.ord) == init_ird_ord
            assert p.enhanced and p.rtr is rtr and p.peer_to_peer == (rtr is not None)
            assert p.peer_ird is not None and p.peer_ord is not None
            # RFC 6581 §9.1, with 0x3FFF meaning "leave it alone".
            if NONE not in (init_ird_ord[1], resp_ird_ord[0]):
                assert p.peer_ird <= resp_ird_ord[0]
                assert p.ord <= p.peer_ird
            else:
                assert p.peer_ird == NONE and p.ord == init_ird_ord[1]
            if NONE not in (init_ird_ord[0], resp_ird_ord[1]):
                assert p.peer_ord <= init_ird_ord[0]
            else:
                assert p.peer_ord == NONE
            if rtr is R_:
                assert p.ord >= 1
            sock.send(b"")  # the RTR (a zero-length ULPDU here) lifts the fence
            sock.send(b"payload")
            assert await sock.receive() == b""
            assert await sock.receive() == b"payload"
            await sock.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_fallback_to_rev1_after_an_unenhanced_responder_closes() -> None:
    """RFC 6581 §10: the Initiator MAY retry with the unenhanced protocol."""

    async def main() -> None:
        failures: list[BaseException] = []
        server = await serve(
            echo,
            "127.0.0.1",
            0,
            config=MpaConfig(revision=1),
            on_failure=lambda error, peer: failures.append(error),
        )
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(MpaError) as info:
                await connect("127.0.0.1", port)
            assert info.value.code == 1
            sock = await connect("127.0.0.1", port, fallback_to_rev1=True, private_data=b"pd")
            assert sock.params.revision == 1 and not sock.params.enhanced
            sock.send(b"after fallback")
            assert await sock.receive() == b"after fallback"
            await sock.close()
            assert [e.code for e in failures if isinstance(e, MpaError)] == [4, 4]
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_responder_holds_fpdus_until_the_first_fpdu_arrives() -> None:
    """RFC 5044 §7.1.2 rule 4 over real sockets: the Responder's early sends
    reach the wire only after the Initiator's first FPDU."""

    async def main() -> None:
        async def eager(sock: MpaSocket) -> None:
            sock.send(b"sent at once by the Responder")
            async for ulpdu in sock:
                sock.send(ulpdu)

        server = await serve(eager, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            sock = await connect("127.0.0.1", port)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(sock.receive(), 0.3)
            sock.send(b"first")
            assert await sock.receive() == b"sent at once by the Responder"
            assert await sock.receive() == b"first"
            await sock.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 10))
