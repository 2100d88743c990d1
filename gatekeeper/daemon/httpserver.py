"""Waitress, serving one WSGI app, with its cost bounded whatever clients do.

Waitress holds every connection in one asyncore loop (an idle or trickling client costs
a socket, not a thread) and answers complete requests on a fixed set of `workers`
threads. Two of the old server's guarantees it does not give alone, so this module adds
them (measured in docs/daemon.md, asserted by tests/daemon/test_http.py):

- A request deadline. Waitress's `channel_timeout` counts inactivity, so a client that
  sends one byte a second is never cut. Here, whenever no answer is being computed for
  it, a connection is closed `request_timeout` after it opened or after its last answer
  was handed over: it must send a whole request in that time (and read its answer and
  send the next, on a kept-alive connection), or it is closed, stalled writes included.
- Room for probes. At waitress's `connection_limit` it stops accepting, so a flood of
  idle sockets would lock `/healthz` out until they time out. Here one connection over
  `max_connections` closes the oldest connection that has no answer running, and so does
  running out of file descriptors.

It also accepts a burst of connections per loop turn (waitress takes one, and a turn costs
O(connections)), and runs its own loop so `stop` ends it. What this leans on beyond
waitress's documented API (checked against waitress 3.0): `HTTPChannel.service` and
`.requests`, the server's `active_channels`, `accept`/`handle_accept`, and
`wasyncore.poll2`/`close_all`.
"""

from __future__ import annotations

import errno
import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from itertools import islice
from typing import Any

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.wasyncore import close_all, poll2

log = logging.getLogger("gatekeeper.http")

MAX_HEAD = 16 * 1024  # a larger request head is answered 431 (the API takes GETs only)
MAX_BODY = 64 * 1024  # GETs carry no body; a larger one is answered 413
_TICK = 0.25  # the loop wakes at least this often to enforce deadlines
_ACCEPT_BURST = 64  # connections accepted per loop turn

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


class _Channel(HTTPChannel):
    """A connection with a deadline, pushed back while an answer is computed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = time.monotonic() + self.adj.channel_timeout

    def service(self) -> None:  # on a worker thread
        # `requests` empties inside super().service(), before the answer is flushed
        self.deadline = math.inf
        try:
            super().service()
        finally:
            self.deadline = time.monotonic() + self.adj.channel_timeout


class _Server(TcpWSGIServer):
    channel_class = _Channel
    active_channels: dict[int, _Channel]
    max_connections = 0
    _emfile_logged = 0.0
    _accepted = False

    def handle_accept(self) -> None:
        # Waitress accepts one connection per loop turn, and a turn costs O(connections):
        # a flood of 1,000 would keep a probe in the backlog for a second. Take a burst.
        for _ in range(_ACCEPT_BURST):
            self._accepted = False
            super().handle_accept()
            if not self._accepted:
                break
            if len(self.active_channels) > self.max_connections:
                self.evict(1)

    def accept(self) -> tuple[socket.socket, Any] | None:
        try:
            pair: tuple[socket.socket, Any] | None = super().accept()
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            if not self.evict(1):
                time.sleep(0.1)  # nothing to close: do not spin on a listener still ready
            if time.monotonic() - self._emfile_logged > 60:
                self._emfile_logged = time.monotonic()
                log.warning("http: out of file descriptors, closing the oldest connections")
            return None
        self._accepted = pair is not None
        return pair

    def evict(self, count: int) -> int:
        """Close the `count` oldest connections with no answer running."""
        idle = list(islice((c for c in self.active_channels.values() if not c.requests), count))
        for channel in idle:
            channel.handle_close()
        return len(idle)

    def expire(self) -> None:
        now = time.monotonic()
        late = [c for c in self.active_channels.values() if c.deadline < now and not c.requests]
        for channel in late:
            channel.handle_close()  # not `will_close`: a stalled writer never polls writable


class _OncePerMinute(logging.Filter):
    """Waitress warns "Task queue depth is N" on every request that waits for a worker;
    one such line a minute says the same."""

    def __init__(self) -> None:
        super().__init__()
        self.last = -math.inf

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self.last < 60:
            return False
        self.last = now
        return True


logging.getLogger("waitress.queue").addFilter(_OncePerMinute())


class BoundedServer:
    """Serves `app` on address:port from a thread of its own (`start`, `stop`)."""

    def __init__(
        self,
        address: str,
        port: int,
        app: WsgiApp,
        *,
        workers: int,
        request_timeout: float,
        max_connections: int,
    ):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.listener = socket.create_server((address, port), family=family, backlog=1024)
        adj = Adjustments(
            sockets=[self.listener],
            threads=workers,
            channel_timeout=request_timeout,
            cleanup_interval=max(1, int(request_timeout)),
            # waitress's own stop-accepting limit stays above ours: we close the oldest
            connection_limit=max_connections + workers + 8,
            max_request_header_size=MAX_HEAD,
            max_request_body_size=MAX_BODY,
            asyncore_use_poll=True,  # select() fails beyond 1,024 file descriptors
            clear_untrusted_proxy_headers=False,
            ident="gatekeeper",
        )
        self._map: dict[int, Any] = {}
        self.server = _Server(
            app,
            self._map,
            _sock=self.listener,
            adj=adj,
            bind_socket=False,
            sockinfo=(family, socket.SOCK_STREAM, 0, self.listener.getsockname()),
        )
        self.server.max_connections = max_connections
        self.tick = min(_TICK, request_timeout / 4)
        self._stopping = threading.Event()
        # The loop closes the sockets (the trigger among them) once it sees `_stopping`;
        # `stop` pulls the trigger only while they are open: a closed trigger's number
        # may be another file's by then (EBADF, or a byte written into that file).
        self._closing = threading.Lock()
        self._closed = False
        self.thread = threading.Thread(target=self._loop, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stopping.set()
        with self._closing:
            if not self._closed:
                self.server.pull_trigger()  # the loop wakes, sees `_stopping` and closes
        if self.thread.is_alive():
            self.thread.join(5)
        else:
            self._close()

    def _loop(self) -> None:
        try:
            while not self._stopping.is_set():
                poll2(self.tick, self._map)
                self.server.expire()
        finally:
            self._close()

    def _close(self) -> None:
        with self._closing:
            if not self._closed:
                self._closed = True
                close_all(self._map)
        self.server.task_dispatcher.shutdown(timeout=2)
