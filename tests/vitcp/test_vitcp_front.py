"""The calls of a VI endpoint that never wait, shared by both adapters
(:class:`iwarp.vitcp.front.ViEndpointFront`), on in-memory cores."""

from __future__ import annotations

import pytest

from helpers import out
from iwarp.vitcp.config import ViRole, VitcpConfig
from iwarp.vitcp.connection import VitcpConnection
from iwarp.vitcp.endpoint import ViEndpointState
from iwarp.vitcp.errors import VitcpClosedError
from iwarp.vitcp.events import ConnectionRequested, RdmaWriteReceived
from iwarp.vitcp.front import ViEndpointFront


class Front(ViEndpointFront):
    """A front whose adapter hooks only count their calls."""

    def __init__(self, core: VitcpConnection) -> None:
        self._core = core
        self._state = ViEndpointState(core)
        self.outputs = 0
        self.reads = 0

    def _output(self) -> None:
        self.outputs += 1

    def _read_arrived(self) -> None:
        self.reads += 1


def connected() -> tuple[Front, Front]:
    a = Front(VitcpConnection(VitcpConfig(), ViRole.ACTIVE))
    b = Front(VitcpConnection(VitcpConfig(), ViRole.PASSIVE))
    a._core.connect(0.0, b"svc")
    b._core.tcp_accepted(0.0)
    a._core.tcp_established(0.0)
    (request,) = b._core.receive_data(out(a._core), 0.0)
    assert isinstance(request, ConnectionRequested)
    b._core.match()
    b._core.accept()
    a._state.handle(a._core.receive_data(out(b._core), 0.0))
    return a, b


def test_params_before_and_after_establishment() -> None:
    front = Front(VitcpConnection(VitcpConfig(), ViRole.ACTIVE))
    with pytest.raises(VitcpClosedError, match="not connected"):
        _ = front.params
    assert front.close_reason is None
    a, b = connected()
    assert a.params is a.connection.params and a.params == b.params


def test_post_receive_goes_to_the_core_then_the_adapter_output() -> None:
    a, b = connected()
    a.post_receive(2)
    assert a.outputs == 1
    b.keep_posted = 3
    assert b._state.keep_posted == 3 and b.keep_posted == 3


def test_pending_notices_reads_what_arrived_then_takes_every_notice() -> None:
    a, b = connected()
    region = b.register(bytearray(8))
    a._core.rdma_write(b"written", remote_address=region.address, memory_handle=region.handle)
    b._state.handle(b._core.receive_data(out(a._core), 0.0))
    (notice,) = b.pending_notices()
    assert isinstance(notice, RdmaWriteReceived) and b.reads == 1
    assert bytes(region.view[:7]) == b"written"
    assert b.pending_notices() == [] and b.reads == 2
