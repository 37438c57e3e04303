"""The end of ``iwarp connect --op mpa``: a receipt, so no success is reported
for data the listener refused.

Bare MPA has no completion that reaches the peer: a ULPDU "completes" when
TCP takes it. So after its N messages ``connect`` sends a *receipt
request* (the 16 octets :data:`RECEIPT_REQUEST`, never a test message:
those are :func:`iwarp.cli._mpa_options.message`), and ``listen`` answers with a
*receipt*: :data:`RECEIPT_KEY` then BE64 messages, BE64 octets and the
SHA-256 of what this connection delivered. ``connect`` reports success
only when the receipt matches what it sent.

A listener that fails the connection with an MPA error it can still report
(CRC or marker error: the send direction still works, RFC 5044 §8) sends,
as an RDMAP stack would, a Terminate (RFC 5040 §4.8, layer LLP, type MPA,
the error's code) before closing; a listener running another ``--op``
answers the bare ULPDUs with its own Terminate. ``connect`` reads either
as the peer's error and exits non-zero.

Peers that are not ``iwarp connect`` never send the request, so ``listen``
sends them nothing but the Terminate of a failure.

``listen --op mpa`` offers receipts: its Reply's private data ends with the
16 octets :data:`RECEIPT_OFFER` (after any ``--private-data``; not when
``--no-receipt`` says so, nor when they would not fit the private data
limit). ``connect`` asks for a receipt only when the Reply offers one (or
without frames, ``--mpa-mode culley``: both ends are iwarp there). Without
a receipt (a foreign MPA peer, or ``connect --no-receipt``) it reports
success once the peer's TCP acknowledged every octet it sent, and says so
(``delivery``: ``tcp``, not ``receipt``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import struct
import termios
import time
from dataclasses import dataclass

from iwarp._typing import Buffer
from iwarp.apps.receipt import (
    COUNTS,
    RECEIPT_KEY,
    RECEIPT_OFFER,
    RECEIPT_REQUEST,
    RECEIPT_SIZE,
)
from iwarp.asyncio.mpa import MpaSocket
from iwarp.cli._mpa_options import Digest
from iwarp.ddp.wire import (
    LAST_FLAG,
    TAGGED_FLAG,
    UNTAGGED_HEADER,
    UNTAGGED_HEADER_SIZE,
    QueueNumber,
    pack_control,
)
from iwarp.errors import IwarpError, LocalProtocolError, MpaError, TerminateLayer
from iwarp.rdmap.terminate import terminate_name
from iwarp.rdmap.wire import RdmapOpcode, TerminateHeader, rdmap_control, split_control

__all__ = [
    "RECEIPT_KEY",
    "RECEIPT_OFFER",
    "RECEIPT_REQUEST",
    "Receipt",
    "ReceiptError",
    "Watcher",
    "describe_terminate",
    "offer_receipts",
    "peer_failure",
    "read_answer",
    "receipt",
    "split_offer",
    "terminate_for",
    "tcp_acknowledged",
]


@dataclass(frozen=True, slots=True)
class Receipt:
    """What the listener says it received on this connection."""

    messages: int
    octets: int
    sha256: str


def offer_receipts(private_data: bytes, room: int) -> bytes:
    """``private_data`` with :data:`RECEIPT_OFFER` after it, if the two fit
    in ``room`` octets; else ``private_data`` as it is (no offer)."""
    if len(private_data) + len(RECEIPT_OFFER) > room:
        return private_data
    return private_data + RECEIPT_OFFER


def split_offer(peer_private_data: bytes) -> tuple[bytes, bool]:
    """The peer's own private data, and whether it offers receipts."""
    if peer_private_data.endswith(RECEIPT_OFFER):
        return peer_private_data[: -len(RECEIPT_OFFER)], True
    return peer_private_data, False


def receipt(messages: int, octets: int, sha256_hex: str) -> bytes:
    """The listener's answer to :data:`RECEIPT_REQUEST`."""
    return RECEIPT_KEY + COUNTS.pack(messages, octets, bytes.fromhex(sha256_hex))


def terminate_for(error: MpaError) -> bytes:
    """The ULPDU of an RDMAP Terminate reporting ``error`` (RFC 5040 §4.8:
    untagged, queue 2, MSN 1, layer LLP, error type MPA, the MPA code)."""
    ddp = UNTAGGED_HEADER.pack(
        pack_control(tagged=False, last=True),
        rdmap_control(RdmapOpcode.TERMINATE),
        0,
        QueueNumber.TERMINATE,
        1,
        0,
    )
    return ddp + TerminateHeader(int(error.layer), error.etype, error.code).pack()


def read_answer(ulpdu: Buffer) -> Receipt | TerminateHeader | None:
    """The listener's receipt or Terminate in ``ulpdu``; None if it is neither."""
    data = bytes(ulpdu)
    if len(data) == RECEIPT_SIZE and data.startswith(RECEIPT_KEY):
        messages, octets, sha = COUNTS.unpack_from(data, len(RECEIPT_KEY))
        return Receipt(messages, octets, sha.hex())
    if len(data) <= UNTAGGED_HEADER_SIZE or data[0] & TAGGED_FLAG or not data[0] & LAST_FLAG:
        return None
    qn = UNTAGGED_HEADER.unpack_from(data, 0)[3]
    if qn != QueueNumber.TERMINATE or split_control(data[1])[1] != RdmapOpcode.TERMINATE:
        return None
    try:
        return TerminateHeader.unpack_from(data, UNTAGGED_HEADER_SIZE)
    except ValueError:
        return None


def describe_terminate(header: TerminateHeader) -> str:
    """A received Terminate as the peer's error, for the error record."""
    text = (
        f"the listener sent a Terminate: {terminate_name(header.layer, header.etype, header.code)}"
    )
    if header.layer != TerminateLayer.LLP:
        # It read our bare ULPDUs as DDP segments: it runs the RDMA stack.
        text += " (it runs --op send, write or read, we run --op mpa)"
    return text


class ReceiptError(LocalProtocolError):
    """The listener did not confirm what ``connect`` sent; ``record`` is the
    error record (with the Terminate's layer, type and code when it sent one)."""

    def __init__(self, message: str, record: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.record: dict[str, object] = record or {"type": "error", "code": None}
        self.record["message"] = message


def _terminated(header: TerminateHeader) -> ReceiptError:
    record: dict[str, object] = {
        "type": "error",
        "code": header.code,
        "terminate": "received",
        "layer": header.layer,
        "etype": header.etype,
        "terminate_name": terminate_name(header.layer, header.etype, header.code),
    }
    return ReceiptError(describe_terminate(header), record)


class Watcher:
    """Reads what the listener sends while ``connect --op mpa`` sends: nothing
    but the receipt at the end, or a Terminate that ends it early."""

    def __init__(self, sock: MpaSocket, *, receipt: bool = True) -> None:
        self.sock = sock
        #: Whether a receipt is coming: without one, ULPDUs other than a
        #: Terminate (a foreign peer's own data) and a close are no error.
        self.receipt = receipt
        self._task: asyncio.Task[bytes | None] | None = None

    async def __aenter__(self) -> Watcher:
        self._task = asyncio.ensure_future(self.sock.receive())
        return self

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        task = self._task
        if task is None:
            return
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, IwarpError):
                await task
        elif not task.cancelled() and task.exception() is None and exc_type is not None:
            # We failed (e.g. a reset) after the listener's Terminate came
            # in: the Terminate is the cause to report.
            self._answer(task.result())

    async def check(self) -> None:
        """Let the loop read before the next send; stop at a Terminate.

        (Reading before each send matters: once the listener's close has
        answered our octets with a reset, a send fails and the transport
        is gone with the Terminate still unread.)

        :raises ReceiptError: the listener sent something: it failed.
        """
        # Two turns of the loop: in the first our task resumes before the
        # reader callbacks the poll scheduled, in the second they have run.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        task = self._task
        if task is not None and task.done() and task.exception() is None:
            ulpdu = task.result()
            if self.receipt:
                self._answer(ulpdu)
            elif ulpdu is not None:
                found = read_answer(ulpdu)
                if isinstance(found, TerminateHeader):
                    raise _terminated(found)
                self._task = asyncio.ensure_future(self.sock.receive())  # not ours: read on

    async def until_closed(self, timeout: float) -> bool:
        """Without a receipt coming: end our direction (FIN) and read until
        the peer closes as well.

        :returns: True once the peer closed; False after ``timeout`` s.
        :raises ReceiptError: the peer sent a Terminate first, or reset the
            connection (its ULP aborted: it did not take the messages).
        """
        _shut_write(self.sock.get_extra_info("socket"))
        try:
            async with asyncio.timeout(timeout):
                while (task := self._task) is not None:
                    ulpdu = await asyncio.shield(task)
                    if ulpdu is None:
                        return True
                    found = read_answer(ulpdu)
                    if isinstance(found, TerminateHeader):
                        raise _terminated(found)
                    self._task = asyncio.ensure_future(self.sock.receive())
        except TimeoutError:
            return False
        except IwarpError as exc:
            raise ReceiptError(
                f"the peer's TCP took every octet, then the connection failed ({exc}): "
                "its ULP did not take the messages (does it run --op mpa?)"
            ) from exc
        return True

    def _answer(self, ulpdu: bytes | None) -> Receipt:
        if ulpdu is None:
            raise ReceiptError(
                "the listener closed without a receipt (is it iwarp listen --op mpa?)"
            )
        found = read_answer(ulpdu)
        if isinstance(found, TerminateHeader):
            raise _terminated(found)
        if found is None:
            raise ReceiptError(
                f"the listener answered with a {len(ulpdu)}-octet ULPDU, not a receipt"
            )
        return found

    async def confirm(self, digest: Digest, timeout: float) -> None:
        """Ask for the receipt and check it against ``digest`` (what we sent).

        :raises ReceiptError: the listener sent a Terminate, closed without
            a receipt, or received something else than we sent.
        :raises IwarpError: the connection failed.
        """
        task = self._task
        assert task is not None
        if not task.done():
            self.sock.send(RECEIPT_REQUEST)
            await self.sock.drain()
        try:
            async with asyncio.timeout(timeout):
                answer = await asyncio.shield(task)
        except TimeoutError:
            raise ReceiptError(f"no receipt from the listener within {timeout:g} s") from None
        found = self._answer(answer)
        ours = digest.summary()
        if (found.messages, found.octets, found.sha256) != (
            ours["messages"],
            ours["octets"],
            ours["sha256"],
        ):
            raise ReceiptError(
                f"the listener received {found.messages} messages ({found.octets} octets, "
                f"sha256 {found.sha256}), we sent {ours['messages']} "
                f"({ours['octets']} octets, sha256 {ours['sha256']})"
            )


def _unacknowledged(fd: int) -> int | None:
    """Octets in socket ``fd``'s send queue: not sent, or not yet
    acknowledged by the peer's TCP (Linux SIOCOUTQ); None where that cannot
    be read."""
    request = getattr(termios, "TIOCOUTQ", None)
    if request is None or fd < 0:
        return None
    try:
        buffer = fcntl.ioctl(fd, request, b"\0\0\0\0")
    except OSError:
        return None
    return int(struct.unpack("i", buffer)[0])


async def tcp_acknowledged(sock: MpaSocket, timeout: float) -> bool:
    """Wait until the peer's TCP acknowledged every octet we sent.

    :returns: True once acknowledged; False where the send queue cannot be
        read (the octets were handed to TCP, which is all that is known).
    :raises ReceiptError: octets still unacknowledged after ``timeout`` s.
    """
    await sock.drain()
    raw = sock.get_extra_info("socket")
    fileno = getattr(raw, "fileno", None)
    fd = fileno() if callable(fileno) else -1
    if not isinstance(fd, int) or _unacknowledged(fd) is None:
        return False
    deadline = time.monotonic() + timeout
    while (left := _unacknowledged(fd)) is not None and left > 0:
        if time.monotonic() >= deadline:
            raise ReceiptError(
                f"the peer's TCP has not acknowledged the last {left} octets within {timeout:g} s"
            )
        await asyncio.sleep(0.005)
    return True


async def peer_failure(sock: MpaSocket, wait: float = 1.0) -> ReceiptError | None:
    """After a failed send: the Terminate the listener sent before it closed
    (ULPDUs that arrived before the failure are still readable), if any."""
    try:
        async with asyncio.timeout(wait):
            while (ulpdu := await sock.receive()) is not None:
                found = read_answer(ulpdu)
                if isinstance(found, TerminateHeader):
                    return _terminated(found)
    except (IwarpError, TimeoutError):
        pass
    return None


def _shut_write(raw: object) -> None:
    """Send our FIN on the connection's socket, through its descriptor: the
    transport's socket object may not offer ``shutdown`` (uvloop's does not)."""
    fileno = getattr(raw, "fileno", None)
    fd = fileno() if callable(fileno) else -1
    if not isinstance(fd, int) or fd < 0:
        return
    borrowed = socket.socket(fileno=fd)
    try:
        with contextlib.suppress(OSError):
            borrowed.shutdown(socket.SHUT_WR)
    finally:
        borrowed.detach()  # the descriptor stays the transport's
