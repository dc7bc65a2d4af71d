"""A TCP delay line: forwards each connection to a target with every byte arriving ``one_way_ms`` later in each
direction, pipelined (bytes keep flowing while earlier ones are in flight), so a request/response pays the round
trip and a long transfer keeps its rate. A new connection pays one more round trip before its first bytes
arrive, as a TCP handshake does. It emulates a distant store where ``tc netem`` is not available (kernels
without sch_netem); unlike netem it leaves TCP's window alone (each side sees a nearby peer).

    python -m tests.harness.delay_line --port P --target HOST:PORT --one-way-ms 10

Runs until killed; prints ``listening on HOST:P`` once it accepts connections.

``--transparent`` (with ``--listen HOST``) has no fixed target: each connection goes where it was addressed
before an nftables ``dnat`` in the caller's namespace sent it here (``SO_ORIGINAL_DST``), and the delay line's
own connections carry the socket mark ``--mark``, which that rule leaves alone. tests/harness/netns.py's
``Topology.delay`` puts one in every namespace so that all TCP between namespaces pays the delay.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import struct

CHUNK = 1 << 20
CONNECT_TIMEOUT_S = 10
SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h: where a dnat'ed connection was addressed


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float, first_extra: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    async def feed() -> None:
        extra = first_extra
        try:
            while data := await reader.read(CHUNK):
                queue.put_nowait((loop.time() + delay + extra, data))
                extra = 0.0
        except OSError:
            pass
        queue.put_nowait((loop.time() + delay, b""))

    feeder = asyncio.create_task(feed())
    try:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                break
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        feeder.cancel()


async def _connect(target: tuple[str, int], mark: int | None):
    if mark is None:
        return await asyncio.open_connection(*target)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)  # passes the dnat rule untouched
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, target)
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


def _original_destination(writer: asyncio.StreamWriter) -> tuple[str, int]:
    raw = writer.get_extra_info("socket").getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, = struct.unpack_from("!H", raw, 2)
    return socket.inet_ntoa(raw[4:8]), port


async def _serve(host: str, port: int, target: tuple[str, int] | None, one_way: float, mark: int | None) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:  # a destination that does not answer: given up on as a client's connection setup timeout would
            server_r, server_w = await asyncio.wait_for(_connect(target or _original_destination(client_w), mark),
                                                        CONNECT_TIMEOUT_S)
        except (TimeoutError, OSError):
            client_w.close()
            return
        try:
            await asyncio.gather(_pipe(client_r, server_w, one_way, 2 * one_way), _pipe(server_r, client_w, one_way, 0))
        finally:
            for w in (client_w, server_w):
                w.close()

    server = await asyncio.start_server(handle, host, port, reuse_address=True, backlog=1024)
    print(f"listening on {host}:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--listen", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    ap.add_argument("--target", help="host:port (not with --transparent)")
    ap.add_argument("--transparent", action="store_true", help="forward to each connection's original address")
    ap.add_argument("--mark", type=lambda v: int(v, 0), default=None, help="socket mark of outgoing connections")
    ap.add_argument("--one-way-ms", type=float, required=True)
    args = ap.parse_args()
    if args.transparent == bool(args.target):
        ap.error("give either --target or --transparent")
    target = None
    if args.target:
        host, port = args.target.rsplit(":", 1)
        target = (host, int(port))
    asyncio.run(_serve(args.listen, args.port, target, args.one_way_ms / 1000, args.mark))


if __name__ == "__main__":
    main()
