"""One MPA behavioural suite for both adapters: every scenario runs with each
client kind (``iwarp.sync.mpa``, ``iwarp.asyncio.mpa``) against each server
kind over real loopback sockets, in each startup mode: Rev 0 (seed 000),
RFC 5044 (Rev 1), RFC 6581 (Rev 2, enhanced) and draft-culley-iwarp-mpa-02
(no Request/Reply). The mixed pairs are the two adapters talking to each
other."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from adapters.mpa_sides import AsyncioMpa, Socket, Stream, SyncMpa, make_mpa
from adapters.sides import PAIRS
from iwarp.errors import LocalProtocolError, MpaError
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.events import MpaParams, RequestReceived
from iwarp.mpa.policy import Accept, ConnectionRejectedError, Reject

Pair = tuple[SyncMpa | AsyncioMpa, SyncMpa | AsyncioMpa]

#: The Request/Reply modes and the config each end uses.
MODES = {
    "rev0": MpaConfig(revision=0, markers=True),
    "rfc5044": MpaConfig(revision=1, markers=True),
    "rfc6581": MpaConfig(revision=2),
}
SIZES = (0, 1, 1000, 30_000)


@pytest.fixture(params=PAIRS, ids=[f"{c}-to-{s}" for c, s in PAIRS])
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    """(client adapter, server adapter); the same object when the kinds agree."""
    client_kind, server_kind = request.param
    server = make_mpa(server_kind)
    client = server if client_kind == server_kind else make_mpa(client_kind)
    try:
        yield client, server
    finally:
        server.finish()
        if client is not server:
            client.finish()


def echo(sock: Socket) -> None:
    """Send each ULPDU back reversed until the peer closes."""
    while (ulpdu := sock.receive()) is not None:
        sock.send(ulpdu[::-1])


def exchange(sock: Socket) -> None:
    for size in SIZES:
        data = os.urandom(size)
        sock.send(data)
        assert sock.receive() == data[::-1]


def check_mode(params: MpaParams, mode: str) -> None:
    assert params.revision == MODES[mode].revision
    assert params.enhanced == (mode == "rfc6581")
    assert params.markers_send == params.markers_receive == MODES[mode].markers
    assert params.crc


@pytest.mark.parametrize("mode", list(MODES))
def test_connect_and_serve(pair: Pair, mode: str) -> None:
    client, server = pair
    config = MODES[mode]
    requests: list[bytes] = []

    def decide(request: RequestReceived) -> Accept:
        requests.append(request.private_data)
        return Accept(b"welcome")

    port = server.serve(echo, config=config, decide=decide)
    sock = client.connect(port, config=config, private_data=b"hello")
    check_mode(sock.params, mode)
    assert sock.params.peer_private_data == b"welcome"
    exchange(sock)
    sock.close()
    assert requests == [b"hello"]


@pytest.mark.parametrize("mode", list(MODES))
def test_delayed_startup_with_a_last_streaming_message(pair: Pair, mode: str) -> None:
    """Seed 000 §6.1.4: a streaming hello, the Responder's last streaming
    message, then the Initiator's Request on the same TCP connection."""
    client, server = pair
    config = MODES[mode]

    def responder(stream: Stream) -> None:
        assert stream.readuntil(b"\n") == b"HELLO upgrade to MPA?\n"
        stream.write(b"streaming reply\n")
        sock = stream.start_mpa(
            Role.RESPONDER, last_streaming=b"SWITCH\n", decide=lambda r: Accept(b"ok")
        )
        check_mode(sock.params, mode)
        echo(sock)

    port = server.serve_stream(responder, config=config)
    stream = client.open_stream(port, config=config)
    stream.write(b"HELLO upgrade to MPA?\n")
    assert stream.readuntil(b"\n") == b"streaming reply\n"
    assert stream.readexactly(7) == b"SWITCH\n"
    sock = stream.start_mpa(Role.INITIATOR, private_data=b"pd")
    check_mode(sock.params, mode)
    assert sock.params.peer_private_data == b"ok"
    exchange(sock)
    with pytest.raises(LocalProtocolError):
        stream.write(b"MPA owns the stream now")
    stream.close()


def test_octets_read_past_the_switch_are_given_back_to_mpa(pair: Pair) -> None:
    """The Initiator sends its Request right behind its streaming message;
    the Responder reads past the switch point and hands the rest back."""
    client, server = pair

    def responder(stream: Stream) -> None:
        data = b""
        while b"\n" not in data:
            data += stream.read()
        line, _, rest = data.partition(b"\n")
        assert line == b"HELLO"
        stream.unread(rest)
        echo(stream.start_mpa(Role.RESPONDER))

    port = server.serve_stream(responder)
    stream = client.open_stream(port)
    stream.write(b"HELLO\n")
    sock = stream.start_mpa(Role.INITIATOR)  # no wait: the Request may share a segment
    exchange(sock)
    stream.close()


def test_culley02_each_direction_frames_from_its_own_point(pair: Pair) -> None:
    """Seed 002 §8.1: no Request/Reply; markers and CRC on; each side frames
    its sending direction after its own streaming message."""
    client, server = pair

    def responder(stream: Stream) -> None:
        assert stream.readuntil(b"\n") == b"client frames from here\n"
        sock = stream.start_framed(send=False, receive=True)
        assert sock.receive() == b"framed from the client"
        stream.write(b"server frames from here\n")
        sock = stream.start_framed(send=True, receive=False)
        sock.send(b"framed from the server")
        echo(sock)

    port = server.serve_stream(responder)
    stream = client.open_stream(port)
    stream.write(b"client frames from here\n")
    sock = stream.start_framed(send=True, receive=False)
    params = sock.params
    assert params.markers_send and params.markers_receive and params.crc
    assert params.revision == 0 and not params.enhanced
    sock.send(b"framed from the client")
    assert stream.readuntil(b"\n") == b"server frames from here\n"
    sock = stream.start_framed(send=False, receive=True)
    assert sock.receive() == b"framed from the server"
    exchange(sock)
    stream.close()


def test_a_rejected_delayed_startup_raises_on_both_ends(pair: Pair) -> None:
    client, server = pair
    rejected: list[bytes] = []

    def responder(stream: Stream) -> None:
        stream.readuntil(b"\n")
        with pytest.raises(ConnectionRejectedError) as info:
            stream.start_mpa(Role.RESPONDER, decide=lambda r: Reject(b"not now"))
        rejected.append(info.value.private_data)

    port = server.serve_stream(responder)
    stream = client.open_stream(port)
    stream.write(b"upgrade?\n")
    with pytest.raises(ConnectionRejectedError) as info:
        stream.start_mpa(Role.INITIATOR)
    assert info.value.private_data == b"not now"
    with pytest.raises(LocalProtocolError):  # MPA starts once
        stream.start_mpa(Role.INITIATOR)
    stream.close()
    server.join()
    assert rejected == [b"not now"]


def test_the_stream_ending_before_a_read_completes(pair: Pair) -> None:
    client, server = pair
    port = server.serve_stream(lambda stream: stream.write(b"partial"))
    stream = client.open_stream(port)
    with pytest.raises(EOFError) as info:  # asyncio's or iwarp.sync's IncompleteReadError
        stream.readuntil(b"\n")
    assert getattr(info.value, "partial", None) == b"partial"
    assert stream.read() == b""
    stream.close()


def test_an_initiator_refusing_the_reply_goes_on_unframed(pair: Pair) -> None:
    """RFC 5044 §7.1.2 rule 3: MPA exits and TCP carries plain octets; the
    Responder, in full operation, reads them as the start of an FPDU."""
    client, server = pair
    failures: list[MpaError] = []

    def responder(sock: Socket) -> None:
        with pytest.raises(MpaError) as info:
            sock.receive()
        failures.append(info.value)

    config = MpaConfig(revision=1)
    port = server.serve(responder, config=config, decide=lambda r: Accept(b"nope"))
    sock = client.connect(port, config=config)
    assert sock.params.peer_private_data == b"nope"
    stream = sock.refuse_reply()
    with pytest.raises(LocalProtocolError):
        sock.send(b"MPA has exited")
    stream.write(b"no thanks, plain TCP\n")  # to MPA: the start of a 28271-octet FPDU
    stream.close()
    server.join()
    assert [f.code for f in failures] == [1]  # FIN in the middle of an FPDU
