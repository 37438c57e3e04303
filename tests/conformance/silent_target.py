"""A Responder that drops every fault silently: a test target written apart from iwarp.

It starts MPA (Rev 2, CRC on), answers the tool's hello with the advertisement of a buffer,
answers Read Requests that are valid (and every zero-length one), and drops everything else
without a word: no Terminate, no close. RFC 5040 wants a Terminate for most of what it
drops, so the error cases fail against it; the point is how fast: each wait for the
Terminate ends soon after the target answered the fence sent behind the broken message.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time

from iwarp._crc32c import crc32c
from iwarp.apps.rping import ADVERT
from iwarp.conformance import craft
from iwarp.ddp.wire import TAGGED_FLAG, UNTAGGED_HEADER_SIZE
from iwarp.errors import TerminateLayer
from iwarp.mpa.wire import CRC_FIELD, FRAME_HEADER_SIZE, EnhancedData, FrameFlags, pad_length
from iwarp.rdmap.wire import RdmapOpcode, ReadRequest, TerminateHeader, split_control

#: The one buffer it advertises.
STAG, TO, LENGTH = 0x4D_55_54_01, 0x7000_0000, 4096


def _fpdu(ulpdu: bytes) -> bytes:
    body = len(ulpdu).to_bytes(2, "big") + ulpdu + bytes(pad_length(len(ulpdu)))
    return body + CRC_FIELD.pack(crc32c(body))


def _recv_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


#: What it sends for an FPDU whose CRC fails when ``late_terminate`` is set: a Terminate
#: that does not report a CRC error (layer DDP), as a target that took the FPDU would.
WRONG_ANSWER = TerminateHeader(TerminateLayer.DDP, 0, 0)


def _serve(
    conn: socket.socket, startup_timeout: float | None, late_terminate: float | None
) -> None:
    memory = bytearray(LENGTH)
    msn = 1
    conn.settimeout(startup_timeout)  # RFC 5044 §7.1.2 rules 8 and 10, when given
    head = _recv_exactly(conn, FRAME_HEADER_SIZE)
    _recv_exactly(conn, int.from_bytes(head[18:20], "big"))
    conn.settimeout(None)
    enhanced = head[16] & FrameFlags.ENHANCED
    flags = FrameFlags.CRC | (FrameFlags.ENHANCED if enhanced else 0)
    conn.sendall(
        craft.reply(revision=2, flags=flags, enhanced=EnhancedData(16, 16) if enhanced else None)
    )
    while True:
        length = int.from_bytes(_recv_exactly(conn, 2), "big")
        rest = _recv_exactly(conn, length + pad_length(length) + 4)
        ulpdu = rest[:length]
        if (
            crc32c(length.to_bytes(2, "big") + rest[:-4])
            != CRC_FIELD.unpack_from(rest, len(rest) - 4)[0]
        ):
            if late_terminate is not None:
                time.sleep(late_terminate)
                conn.sendall(_fpdu(craft.terminate(WRONG_ANSWER).octets))
            continue  # a wrong CRC: dropped
        if len(ulpdu) < UNTAGGED_HEADER_SIZE or ulpdu[0] & TAGGED_FLAG or (ulpdu[0] & 3) != 1:
            continue  # tagged (Writes are not placed anywhere) or not DDP version 1
        version, opcode = split_control(ulpdu[1])
        qn = int.from_bytes(ulpdu[6:10], "big")  # after control, RDMAP control, RsvdULP
        payload = ulpdu[UNTAGGED_HEADER_SIZE:]
        if version != 1:
            continue
        if opcode == RdmapOpcode.SEND and qn == 0 and len(payload) == ADVERT.size and msn == 1:
            conn.sendall(_fpdu(craft.send(ADVERT.pack(TO, STAG, LENGTH), msn=msn).octets))
            msn += 1
        elif opcode == RdmapOpcode.RDMA_READ_REQUEST and qn == 1 and len(payload) == 28:
            req = ReadRequest.unpack_from(payload)
            start = req.src_to - TO
            if req.size and (req.src_stag != STAG or start < 0 or start + req.size > LENGTH):
                continue
            data = bytes(memory[start : start + req.size]) if req.size else b""
            conn.sendall(_fpdu(craft.read_response(req.sink_stag, req.sink_to, data).octets))


class SilentTarget:
    """The target on a free loopback port, one thread per connection, until :meth:`close`.

    ``startup_timeout``: seconds it waits for a whole Request before it closes the
    connection (a startup timer, as RFC 5044 §7.1.2 rules 8 and 10 ask); None: no timer.
    ``late_terminate``: instead of dropping an FPDU whose CRC fails, answer it that many
    seconds later with a Terminate that reports no CRC error (:data:`WRONG_ANSWER`), the
    way Linux siw in the qemu guest answered garbage and wrong CRCs, 0.3 s late.
    """

    def __init__(
        self, startup_timeout: float | None = None, *, late_terminate: float | None = None
    ) -> None:
        self.startup_timeout = startup_timeout
        self.late_terminate = late_terminate
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self._conns.append(conn)
                threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            _serve(conn, self.startup_timeout, self.late_terminate)
        with contextlib.suppress(OSError):
            conn.close()  # only a timer or the tool's own close end a connection

    def close(self) -> None:
        self.sock.close()
        for conn in self._conns:
            conn.close()


if __name__ == "__main__":  # a target to try by hand: prints its port, serves until killed
    # python silent_target.py [STARTUP_TIMEOUT]: with a startup timer of that many seconds
    target = SilentTarget(float(sys.argv[1]) if len(sys.argv) > 1 else None)
    print(target.port, flush=True)
    threading.Event().wait()
