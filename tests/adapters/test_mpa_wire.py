"""Both MPA adapters put the same octets on the wire: one scenario per mode,
run with every client kind against every server kind through a recording
loopback relay, gives one transcript per direction."""

from __future__ import annotations

import socket
import threading

import pytest

from adapters.mpa_sides import CALL_TIMEOUT, Stream, make_mpa
from iwarp.mpa.config import MpaConfig, Role
from iwarp.mpa.policy import Accept

KINDS = ("sync", "asyncio")
CONFIGS = {
    "rev0": MpaConfig(revision=0, markers=True),
    "rfc5044": MpaConfig(revision=1, markers=True),
    "rfc6581": MpaConfig(revision=2),
    "culley": MpaConfig(),
}
PAYLOADS = [bytes(range(256)) * n + bytes(n) for n in (0, 1, 7, 60)]


class Relay:
    """Accepts one connection, connects it to ``target`` and records what
    each direction carries."""

    def __init__(self, target: int) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(CALL_TIMEOUT)
        self.port = self._listener.getsockname()[1]
        self._target = target
        self._octets = (bytearray(), bytearray())
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with (
            self._listener,
            self._listener.accept()[0] as client,
            socket.create_connection(("127.0.0.1", self._target)) as server,
        ):
            for sock in (client, server):
                sock.settimeout(CALL_TIMEOUT)
            back = threading.Thread(target=_pump, args=(server, client, self._octets[1]))
            back.start()
            _pump(client, server, self._octets[0])
            back.join(CALL_TIMEOUT)

    def transcript(self) -> tuple[bytes, bytes]:
        """(client to server, server to client) once both closed."""
        self._thread.join(CALL_TIMEOUT)
        assert not self._thread.is_alive(), "the relay did not see both ends close"
        return bytes(self._octets[0]), bytes(self._octets[1])


def _pump(source: socket.socket, sink: socket.socket, record: bytearray) -> None:
    while data := source.recv(65536):
        record += data
        sink.sendall(data)
    sink.shutdown(socket.SHUT_WR)


def responder(mode: str, stream: Stream) -> None:
    assert stream.readuntil(b"\n") == b"HELLO\n"
    if mode == "culley":
        sock = stream.start_framed(send=False, receive=True)
        stream.write(b"framing from here\n")
        stream.start_framed(send=True, receive=False)
    else:
        stream.write(b"streaming reply\n")
        sock = stream.start_mpa(Role.RESPONDER, last_streaming=b"SWITCH\n", decide=accept)
    while (ulpdu := sock.receive()) is not None:
        sock.send(ulpdu[::-1])


def accept(request: object) -> Accept:
    return Accept(b"welcome")


def initiator(mode: str, stream: Stream) -> None:
    stream.write(b"HELLO\n")
    if mode == "culley":
        sock = stream.start_framed(send=True, receive=False)
        assert stream.readuntil(b"\n") == b"framing from here\n"
        stream.start_framed(send=False, receive=True)
    else:
        assert stream.readuntil(b"\n") == b"streaming reply\n"
        assert stream.readuntil(b"\n") == b"SWITCH\n"
        sock = stream.start_mpa(Role.INITIATOR, private_data=b"hello")
    for payload in PAYLOADS:
        sock.send(payload)
        assert sock.receive() == payload[::-1]
    stream.close()


@pytest.mark.parametrize("mode", list(CONFIGS))
def test_every_adapter_pair_sends_the_same_octets(mode: str) -> None:
    config = CONFIGS[mode]
    transcripts: dict[str, tuple[bytes, bytes]] = {}
    for client_kind in KINDS:
        for server_kind in KINDS:
            server = make_mpa(server_kind)
            client = server if client_kind == server_kind else make_mpa(client_kind)
            try:
                port = server.serve_stream(lambda s: responder(mode, s), config=config)
                relay = Relay(port)
                initiator(mode, client.open_stream(relay.port, config=config))
                transcripts[f"{client_kind}-to-{server_kind}"] = relay.transcript()
            finally:
                server.finish()
                if client is not server:
                    client.finish()
    first = transcripts["sync-to-sync"]
    assert len(first[0]) > sum(map(len, PAYLOADS)) and len(first[1]) > sum(map(len, PAYLOADS))
    assert all(t == first for t in transcripts.values()), {
        k: tuple(map(len, t)) for k, t in transcripts.items()
    }
