"""A small HTTP/1.0 server whose cost is bounded, whatever clients do.

The stdlib `ThreadingHTTPServer` spends a thread per connection and never times out a
connection that sends nothing: 1,000 idle connections cost 1,000 threads. Here one
selector thread holds every connection until its request head is complete (an idle or
trickling client costs a socket, not a thread), and a fixed pool of workers answers
complete requests. Every connection must deliver its request within `request_timeout`
of being accepted and the answer must be written within another `request_timeout`;
beyond `max_connections` the oldest waiting connection is closed to make room, so a
flood of idle sockets never locks out the probes. One request per connection (HTTP/1.0).
"""

from __future__ import annotations

import errno
import io
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("gatekeeper.http")

MAX_HEAD = 16 * 1024  # a request head larger than this is refused (the API takes GETs only)
_ACCEPT_BURST = 64  # connections accepted per wake-up, so reads are not starved by a flood

# Answers one complete request: (socket, client address, request head bytes).
Answer = Callable[[socket.socket, Any, bytes], None]


@dataclass
class _Conn:
    sock: socket.socket
    addr: Any
    deadline: float
    head: bytearray = field(default_factory=bytearray)


class SocketWriter(io.BufferedIOBase):
    """A write-only file over a socket in blocking mode with a timeout (`sendall` treats
    the timeout as a total deadline for the whole write)."""

    def __init__(self, sock: socket.socket):
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, b: Any, /) -> int:
        self._sock.sendall(b)
        return len(b)


class BoundedServer:
    """Listens on address:port; `answer` runs on a worker for each complete request."""

    def __init__(
        self,
        address: str,
        port: int,
        answer: Answer,
        *,
        workers: int,
        request_timeout: float,
        max_connections: int,
    ):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.listener = socket.create_server((address, port), family=family, backlog=1024)
        self.listener.setblocking(False)
        self.answer = answer
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="http")
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "listen")
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._conns: dict[socket.socket, _Conn] = {}  # accept order = deadline order
        self._stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def waiting(self) -> int:
        """Connections whose request is not complete yet."""
        return len(self._conns)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake_w.send(b"x")
        self.thread.join(5)
        self.pool.shutdown(wait=False, cancel_futures=True)
        for conn in list(self._conns.values()):
            self._close(conn)
        self.selector.close()
        for s in (self.listener, self._wake_r, self._wake_w):
            s.close()

    # ---- the selector thread ------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping.is_set():
            first = next(iter(self._conns.values()), None)
            wait = 0.5 if first is None else max(0.0, min(0.5, first.deadline - time.monotonic()))
            for key, _ in self.selector.select(wait):
                if key.data == "listen":
                    self._accept()
                elif key.data == "wake":
                    self._wake_r.recv(64)
                else:
                    self._read(key.data)
            self._expire()

    def _accept(self) -> None:
        for _ in range(_ACCEPT_BURST):
            try:
                sock, addr = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # out of file descriptors: make room, try again later
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._conns:
                    log.warning("http: out of file descriptors, closing the oldest connection")
                    self._close(next(iter(self._conns.values())))
                else:
                    time.sleep(0.1)  # nothing to close: do not spin on a listener still ready
                return
            if len(self._conns) >= self.max_connections:
                self._close(next(iter(self._conns.values())))
            sock.setblocking(False)
            conn = _Conn(sock, addr, time.monotonic() + self.request_timeout)
            self._conns[sock] = conn
            self.selector.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:  # reset by the client: nothing to answer
            data = b""
        if not data or len(conn.head) + len(data) > MAX_HEAD:
            self._close(conn)
            return
        conn.head += data
        if b"\r\n\r\n" in conn.head or b"\n\n" in conn.head:
            self.selector.unregister(conn.sock)
            del self._conns[conn.sock]
            self.pool.submit(self._answer, conn)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._conns:
            conn = next(iter(self._conns.values()))
            if conn.deadline > now:
                return
            self._close(conn)

    def _close(self, conn: _Conn) -> None:
        if self._conns.pop(conn.sock, None) is not None:
            self.selector.unregister(conn.sock)
        conn.sock.close()

    # ---- a worker -----------------------------------------------------------------------
    def _answer(self, conn: _Conn) -> None:
        sock = conn.sock
        try:
            sock.setblocking(True)
            sock.settimeout(self.request_timeout)
            self.answer(sock, conn.addr, bytes(conn.head))
        except OSError as exc:  # the client went away or stopped reading: its loss, no traceback
            log.debug("http: client %s went away (%s)", conn.addr[0], type(exc).__name__)
        except Exception:
            log.exception("http: answering %s failed", conn.addr[0])
        finally:
            sock.close()
