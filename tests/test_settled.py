"""``settled()`` (iwarp.contract): what a driver asks after each input, in
one call, must be exactly ``not has_data_to_send and not must_close and
get_timer() is None`` of the same core, in every state a core goes through:
startup (timers), full operation with output queued or not, the first-send
hold and the fence warning (timers of the endpoint), Terminates, FIN, loss,
closing. Checked on the three layers of the RDMA stack at once (the
endpoint, its RdmaConnection, its MpaConnection) after every step of random
scripts, and on VI/TCP through its life."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from iwarp.contract import Connection
from iwarp.errors import IwarpError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.rdma.endpoint import QueuePairEndpoint
from iwarp.rdmap.memory import Access, MemoryRegistry
from iwarp.rdmap.work import ReadWR, SendWR, Sge, WriteWR
from iwarp.vitcp.config import ViRole, VitcpConfig
from iwarp.vitcp.connection import VitcpConnection


def _asked(core: Connection[Any]) -> bool:
    return not core.has_data_to_send and not core.must_close and core.get_timer() is None


def _check(end: QueuePairEndpoint) -> None:
    for core in (end, end.conn, end.conn.mpa):
        assert core.settled() is _asked(core), type(core).__name__


Step = tuple[str, int, int]

steps = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "move",
                "move",
                "move",
                "piece",
                "flush",
                "send",
                "send_now",
                "write",
                "read",
                "time",
                "garbage",
                "fin",
                "lost",
                "close",
                "abort",
                "take",
            ]
        ),
        st.integers(0, 1),  # which end
        st.integers(0, 70_000),  # a size, a time step, a cut
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    script=steps,
    peer_to_peer=st.booleans(),
    markers=st.booleans(),
    hold=st.sampled_from([0.0, 0.5]),
    started=st.booleans(),
)
def test_settled_is_the_three_questions_asked_in_every_state(
    script: list[Step], peer_to_peer: bool, markers: bool, hold: float, started: bool
) -> None:
    registry = MemoryRegistry()
    config = MpaConfig(peer_to_peer=peer_to_peer, markers=markers)
    a = QueuePairEndpoint(
        Role.INITIATOR,
        registry.alloc_pd(),
        config,
        receive_buffers=2,
        receive_size=64,
        first_send_delay=hold,
    )
    b = QueuePairEndpoint(
        Role.RESPONDER, registry.alloc_pd(), config, receive_buffers=2, receive_size=64
    )
    ends = (a, b)
    target = b.pd.register(bytearray(256), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    source = a.pd.register(bytearray(256), Access.LOCAL_WRITE | Access.REMOTE_READ)
    now = 0.0
    held: list[bytes] = [b"", b""]  # octets in flight towards each end

    def flush(k: int) -> None:
        src = ends[k]
        data = b"".join(bytes(c) for c in src.data_to_send())
        src.take_events()
        held[1 - k] += data

    for _ in range(3 if started else 0):  # startup, checked on the way (else: the script's)
        for k in (0, 1):
            flush(k)
            _check(ends[k])
            if held[1 - k]:
                ends[1 - k].receive_data(held[1 - k], now)
                held[1 - k] = b""
            _check(ends[1 - k])
    for action, k, n in script:
        end = ends[k]
        try:
            if action == "move":
                flush(k)
                if held[1 - k]:
                    ends[1 - k].receive_data(held[1 - k], now)
                    held[1 - k] = b""
            elif action == "flush":
                flush(k)
            elif action == "piece" and held[k]:
                cut = n % (len(held[k]) + 1)
                end.receive_data(held[k][:cut], now)
                held[k] = held[k][cut:]
            elif action == "send":
                end.post_send(SendWR(bytes(n % 3000), end.next_wr_id()))
            elif action == "send_now":
                frame = end.send_now(bytes(n % 100))
                if frame is not None:
                    held[1 - k] += frame
            elif action == "write" and k == 0:
                a.post_send(WriteWR(Sge(source, 0, n % 256), target.stag, 0, a.next_wr_id()))
            elif action == "read" and k == 0:
                b_source = target
                a.post_send(ReadWR(Sge(source, 0, n % 256), b_source.stag, 0, a.next_wr_id()))
            elif action == "time":
                now += n / 100_000
                timer = end.get_timer()
                if timer is not None and now >= timer:
                    end.handle_timer(now)
            elif action == "garbage":
                end.receive_data(bytes([n % 256]) * (n % 40 + 1), now)
            elif action == "fin":
                end.receive_data(b"", now)
            elif action == "lost":
                end.connection_lost(now, "gone")
            elif action == "close":
                end.close()
            elif action == "abort":
                end.abort(IwarpError("the test"))
            elif action == "take":
                end.take_message()
                end.take_events()
        except IwarpError:
            pass  # refused misuse (posting after the end): the state is checked all the same
        _check(a)
        _check(b)


def test_settled_follows_vitcp_through_its_life() -> None:
    active = VitcpConnection(VitcpConfig(), ViRole.ACTIVE)
    passive = VitcpConnection(VitcpConfig(), ViRole.PASSIVE)
    seen = []
    for core in (active, passive):
        seen.append(core.settled())
        assert core.settled() is _asked(core)
    active.connect(0.0)
    active.tcp_established(0.0)
    passive.tcp_accepted(0.0)
    for _ in range(6):
        for src, dst in ((active, passive), (passive, active)):
            for core in (src, dst):
                seen.append(core.settled())
                assert core.settled() is _asked(core)
            data = b"".join(bytes(c) for c in src.data_to_send())
            if data:
                dst.receive_data(data, 0.0)
            if passive.state.name == "PENDING_ACCEPT":
                passive.match()
                passive.accept()
    active.close()
    seen.append(active.settled())
    assert active.settled() is _asked(active)
    passive.connection_lost(0.0)
    seen.append(passive.settled())
    assert passive.settled() is _asked(passive)
    assert True in seen and False in seen  # both answers were met
