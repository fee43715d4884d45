#!/usr/bin/env python3
"""A TCP proxy that adds a fixed delay to every byte in both directions, as a slower
network would (this machine's kernel has no netem). Order and throughput are kept: each
chunk read is written when its own deadline comes, not after the previous one's delay.

  delay_proxy.py --listen HOST:PORT --to HOST:PORT [--delay-ms 1]

Runs until killed. Standard library only.
"""
import argparse
import asyncio
import time


async def pipe(reader, writer, delay):
    queue = asyncio.Queue()

    async def pump():
        while True:
            item = await queue.get()
            if item is None:
                break
            due, data = item
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    task = asyncio.create_task(pump())
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            queue.put_nowait((time.monotonic() + delay, data))
    finally:
        queue.put_nowait(None)
        await task


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--delay-ms", type=float, default=1.0)
    a = ap.parse_args()
    lhost, lport = a.listen.rsplit(":", 1)
    thost, tport = a.to.rsplit(":", 1)
    delay = a.delay_ms / 1000.0

    async def handle(creader, cwriter):
        try:
            sreader, swriter = await asyncio.open_connection(thost, int(tport))
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(pipe(creader, swriter, delay), pipe(sreader, cwriter, delay),
                             return_exceptions=True)

    server = await asyncio.start_server(handle, lhost, int(lport))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
