"""The asyncio calls' ``timeout=``: the same keyword, in seconds, and the
same :class:`~iwarp.errors.WaitTimeoutError` as :mod:`iwarp.sync`'s calls,
so one program's way of timing out works on both adapters."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from iwarp.errors import WaitTimeoutError

__all__ = ["within"]

T = TypeVar("T")


async def within(awaitable: Awaitable[T], timeout: float | None, what: str) -> T:
    """``await awaitable``, for at most ``timeout`` seconds (None: no limit).

    What the call waits for is cancelled when the time is up (a work
    request stays posted, its completion then goes to ``send_cq``).

    :raises WaitTimeoutError: the time ran out first.
    """
    if timeout is None:
        return await awaitable
    limit = asyncio.timeout(timeout)
    try:
        async with limit:
            return await awaitable
    except TimeoutError:
        if not limit.expired():
            raise  # a TimeoutError of the call's own (a TCP connect's, say)
        raise WaitTimeoutError(f"timed out waiting for {what}") from None
