"""A TCP delay line: forwards each connection to a target with every byte arriving ``one_way_ms`` later in each
direction, pipelined (bytes keep flowing while earlier ones are in flight), so a request/response pays the round
trip and a long transfer keeps its rate. A new connection pays one more round trip before its first bytes
arrive, as a TCP handshake does. It emulates a distant store where ``tc netem`` is not available (kernels
without sch_netem); unlike netem it leaves TCP's window alone (each side sees a nearby peer).

    python -m tests.harness.delay_line --port P --target HOST:PORT --one-way-ms 10

Runs until killed; prints ``listening on 127.0.0.1:P`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio

CHUNK = 1 << 20


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


async def _serve(port: int, target: tuple[str, int], one_way: float) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*target)
        except OSError:
            client_w.close()
            return
        try:
            await asyncio.gather(_pipe(client_r, server_w, one_way, 2 * one_way), _pipe(server_r, client_w, one_way, 0))
        finally:
            for w in (client_w, server_w):
                w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, reuse_address=True)
    print(f"listening on 127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--target", required=True, help="host:port")
    ap.add_argument("--one-way-ms", type=float, required=True)
    args = ap.parse_args()
    host, port = args.target.rsplit(":", 1)
    asyncio.run(_serve(args.port, (host, int(port)), args.one_way_ms / 1000))


if __name__ == "__main__":
    main()
