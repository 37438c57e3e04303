"""``import iwarp`` gives the user-facing names; a whole exchange through them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import iwarp


def test_every_exported_name_resolves() -> None:
    for name in iwarp.__all__:
        assert getattr(iwarp, name) is not None, name


def test_import_is_cheap() -> None:
    code = "import sys, iwarp; print('asyncio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_serve_connect_send_write_read_through_the_top_level_names() -> None:
    async def main() -> None:
        pd = iwarp.ProtectionDomain()
        target = pd.register(bytearray(16), iwarp.Access.LOCAL_WRITE | iwarp.Access.REMOTE_WRITE)
        source = pd.register(b"served from here", iwarp.Access.REMOTE_READ)

        async def handler(qp: iwarp.QueuePair) -> None:
            # The Responder speaks after the Initiator's first message (RFC 5044
            # §7.1.2 rule 4) unless RFC 6581 peer-to-peer was negotiated.
            assert await qp.receive() == b"hello"
            await qp.send(target.stag.to_bytes(4, "big") + source.stag.to_bytes(4, "big"))
            await qp.receive()  # the client is done

        server = await iwarp.serve(handler, "127.0.0.1", 0, pd=pd)
        port = server.sockets[0].getsockname()[1]
        async with await iwarp.connect("127.0.0.1", port) as qp:
            await qp.send(b"hello")
            keys = await qp.receive()
            write_stag, read_stag = int.from_bytes(keys[:4], "big"), int.from_bytes(keys[4:], "big")
            assert await qp.rdma_write(b"written", write_stag, 0) == 7
            sink = qp.register(bytearray(16), iwarp.Access.LOCAL_WRITE)
            assert await qp.rdma_read(sink, read_stag, 0) == 16
            assert bytes(sink.view) == b"served from here"
            await qp.send(b"bye")
        assert bytes(target.view[:7]) == b"written"
        server.close()
        await server.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_dir_lists_the_lazy_names_before_they_load() -> None:
    code = (
        "import json, iwarp; print(json.dumps([sorted(set(iwarp.__all__) - set(dir(iwarp))), "
        "'QueuePair' in vars(iwarp)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    missing, loaded = json.loads(out.stdout)
    assert missing == [] and loaded is False
