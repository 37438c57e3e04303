"""The calls of a VI that never wait and the policy it applies through its
driver (:class:`iwarp.vitcp.front.ViFront`), on in-memory cores and a
recording driver."""

from __future__ import annotations

import pytest

from helpers import RecordingDriver, out
from iwarp.vitcp import front as front_module
from iwarp.vitcp.config import ViRole, VitcpConfig
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.errors import VitcpClosedError
from iwarp.vitcp.events import ConnectionRequested, MessageReceived, RdmaWriteReceived
from iwarp.vitcp.front import ViFront


class Front(ViFront):
    """A front on a recording driver; the test moves the octets."""

    def __init__(self, core: VitcpConnection) -> None:
        super().__init__(core)
        self.recorder = RecordingDriver()
        self._driver = self.recorder


def connected() -> tuple[Front, Front]:
    a = Front(VitcpConnection(VitcpConfig(), ViRole.ACTIVE))
    b = Front(VitcpConnection(VitcpConfig(), ViRole.PASSIVE))
    a.core.connect(0.0, b"svc")
    b.core.tcp_accepted(0.0)
    a.core.tcp_established(0.0)
    (request,) = b.core.receive_data(out(a.core), 0.0)
    assert isinstance(request, ConnectionRequested)
    b.core.match()
    b.core.accept()
    a.handle(a.core.receive_data(out(b.core), 0.0))
    return a, b


def test_params_before_and_after_establishment() -> None:
    front = Front(VitcpConnection(VitcpConfig(), ViRole.ACTIVE))
    with pytest.raises(VitcpClosedError, match="not connected"):
        _ = front.params
    assert front.close_reason is None
    a, b = connected()
    assert a.params is a.connection.params and a.params == b.params


def test_post_receive_goes_to_the_core_then_the_driver() -> None:
    a, _ = connected()
    a.post_receive(2)
    assert a.recorder.calls == ["flush"]


def test_open_starts_establishment_in_the_core_role() -> None:
    active = Front(VitcpConnection(VitcpConfig(), ViRole.ACTIVE))
    active.core.connect(0.0, b"svc")
    assert active.open(0.0, 1460) is active.core
    request = out(active.core)  # the ConnectRequest
    passive = Front(VitcpConnection(VitcpConfig(discriminator=b"svc"), ViRole.PASSIVE))
    passive.open(0.0, 1460)
    seen: list[ConnectionRequested] = []
    passive.on_request = lambda front, request: seen.append(request)
    passive.dispatch(passive.core.receive_data(request, 0.0))
    assert len(seen) == 1 and passive.request is None  # handed over, once
    assert passive.recorder.woken == [None]


def test_reading_pauses_above_the_high_water_mark_and_resumes_below_a_quarter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(front_module, "RECEIVE_HIGH_WATER", 8)
    _, b = connected()
    b.dispatch([MessageReceived(1, b"12345", None), MessageReceived(2, b"6789", None)])
    assert not b.recorder.reading
    assert b.take_message().data == b"12345" and not b.recorder.reading  # 4 left
    assert b.take_message().data == b"6789" and b.recorder.reading


def test_pending_notices_reads_what_arrived_then_takes_every_notice() -> None:
    a, b = connected()
    region = b.register(bytearray(8))
    a.core.rdma_write(b"written", remote_address=region.address, memory_handle=region.handle)
    b.handle(b.core.receive_data(out(a.core), 0.0))
    (notice,) = b.pending_notices()
    assert isinstance(notice, RdmaWriteReceived)
    assert bytes(region.view[:7]) == b"written"
    assert b.pending_notices() == []
