"""Running a tool against a broker from a command: the address and timeout to use, the event loop."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tierlog.cli.common import bootstrap, client_config, timeout_s

T = TypeVar("T")


def connection(args: argparse.Namespace) -> tuple[str, float]:
    """The broker address and timeout of a client command; kept on ``args`` so a failure can name them.
    The client settings (--command-config, -X) are checked here and kept as ``args.resolved_client_config``."""
    args.resolved_client_config = client_config(args)
    address, seconds = bootstrap(args), timeout_s(args)
    args.resolved_bootstrap, args.resolved_timeout = address, seconds
    return address, seconds


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


def with_admin(args: argparse.Namespace, fn: Callable[[Any], Awaitable[T]]) -> T:
    """``fn(admin)`` with an admin client for the command's broker, closed afterwards."""
    from tierlog.tools import clients

    address, seconds = connection(args)

    async def go() -> T:
        async with clients.admin(address, seconds, args.resolved_client_config) as admin:
            return await fn(admin)

    return run(go())
