"""A small TCP fault proxy for the chaos run (tc netem is not available on
every kernel, and network namespaces need privileges the harness should not
assume).

One FaultProxy listens on a stable loopback port and forwards every
connection to a target that can change (fencegate gets new ports when it
restarts). It runs an asyncio loop in its own thread; the nemesis calls its
methods from the harness thread.

Modes:
  ok         forward bytes as they come
  latency    deliver every chunk `ms` later, in order
  blackhole  accept and read, deliver nothing (a partition that drops
             packets); when the fault heals, every connection that lost
             bytes is reset, since its byte stream has a hole
  reset      reset every open connection, and every new one, while it lasts

A peer that closes while chunks are still delayed gets them delivered first
(the network does not take back what it already carries), then the close.
"""

import asyncio
import socket
import struct
import threading


def _abort(writer):
    """Closes with RST (SO_LINGER 0), as a reset connection does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class _Conn:
    def __init__(self, proxy, c_reader, c_writer):
        self.proxy = proxy
        self.c_reader, self.c_writer = c_reader, c_writer
        self.u_writer = None
        self.tainted = False
        self.closed = False

    def abort(self):
        if self.closed:
            return
        self.closed = True
        for w in (self.c_writer, self.u_writer):
            if w is not None:
                _abort(w)

    async def run(self):
        p = self.proxy
        if p.mode == "reset":
            return self.abort()
        try:
            u_reader, self.u_writer = await asyncio.wait_for(
                asyncio.open_connection(*p.target), timeout=5)
        except (OSError, asyncio.TimeoutError):
            p.counters["connect_failed"] += 1
            return self.abort()
        await asyncio.gather(self.pump(self.c_reader, self.u_writer),
                             self.pump(u_reader, self.c_writer))
        if not self.closed:
            self.closed = True
            for w in (self.c_writer, self.u_writer):
                w.close()

    async def pump(self, reader, writer):
        p = self.proxy
        queue = asyncio.Queue()

        async def deliver():
            while True:
                due, chunk = await queue.get()
                if chunk is None:
                    break
                wait = due - p.loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if self.closed:
                    return
                writer.write(chunk)
                try:
                    await writer.drain()
                except (OSError, ConnectionError):
                    return self.abort()
            try:
                if writer.can_write_eof():
                    writer.write_eof()
            except (OSError, RuntimeError):
                pass

        sender = asyncio.ensure_future(deliver())
        try:
            while not self.closed:
                try:
                    chunk = await reader.read(65536)
                except (OSError, ConnectionError):
                    chunk = b""
                if not chunk:
                    break
                if p.mode == "blackhole":
                    self.tainted = True
                    p.counters["bytes_dropped"] += len(chunk)
                    continue
                delay = p.latency_s if p.mode == "latency" else 0.0
                queue.put_nowait((p.loop.time() + delay, chunk))
        finally:
            queue.put_nowait((0, None))
            await sender
            if self.closed:
                return
            # One side closed: finish when both have, or reset on error.
            if reader.at_eof() is False:
                self.abort()


class FaultProxy:
    def __init__(self, name, target):
        self.name = name
        self.target = target
        self.mode = "ok"
        self.latency_s = 0.0
        self.conns = set()
        self.counters = {"connections": 0, "connect_failed": 0, "bytes_dropped": 0, "resets": 0}
        self.loop = asyncio.new_event_loop()
        self._server = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True,
                                        name=f"faultproxy-{name}")
        self._thread.start()
        ready.wait()
        self.port = self._server.sockets[0].getsockname()[1]

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)
        self._server = self.loop.run_until_complete(
            asyncio.start_server(self._accept, "127.0.0.1", 0, backlog=256))
        ready.set()
        self.loop.run_forever()

    async def _accept(self, reader, writer):
        self.counters["connections"] += 1
        conn = _Conn(self, reader, writer)
        self.conns.add(conn)
        try:
            await conn.run()
        except Exception:  # a proxy must not die of one connection
            conn.abort()
        finally:
            self.conns.discard(conn)

    def _call(self, fn):
        done = threading.Event()
        result = []

        def wrapper():
            try:
                result.append(fn())
            finally:
                done.set()

        self.loop.call_soon_threadsafe(wrapper)
        done.wait()
        return result[0] if result else None

    # ---- the nemesis' controls (called from other threads) ----

    def retarget(self, target):
        def do():
            self.target = target
        self._call(do)

    def set_mode(self, mode, latency_ms=0):
        assert mode in ("ok", "latency", "blackhole", "reset"), mode

        def do():
            healing_blackhole = self.mode == "blackhole" and mode != "blackhole"
            self.mode = mode
            self.latency_s = latency_ms / 1000.0
            if mode == "reset":
                victims = list(self.conns)
            elif healing_blackhole:
                victims = [c for c in self.conns if c.tainted]
            else:
                victims = []
            for c in victims:
                self.counters["resets"] += 1
                c.abort()
        self._call(do)

    def close(self):
        def do():
            self._server.close()
            for c in list(self.conns):
                c.abort()
        self._call(do)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
