"""A total deadline per HTTP request, which httpx does not have.

httpx's timeouts are per operation: a receiver that trickles one byte every second keeps
a request alive for as long as it likes under `timeout=2`. Here every socket operation
of a request (connect, TLS handshake, each write and read) gets at most the time left
until the request's deadline, and none starts after it: a request never outlives
`deadline` (plus one scheduling slice). The network backend of httpcore is wrapped; the
deadline is per thread, set around one request with `within(seconds)`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

_local = threading.local()
_WRITE_CHUNK = 16 * 1024  # writes are split so each piece is clamped to the time left


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Every request this thread makes inside the block ends within `seconds`."""
    _local.deadline = time.monotonic() + seconds
    try:
        yield
    finally:
        _local.deadline = None


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    deadline: float | None = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("request deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream):
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for i in range(0, len(buffer), _WRITE_CHUNK):
            self._inner.write(buffer[i : i + _WRITE_CHUNK], _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with every operation clamped to the thread's deadline."""

    def __init__(self, inner: httpcore.NetworkBackend):
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_tcp(host, port, left, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def client(timeout: float) -> httpx.Client:
    """An httpx client whose requests, made inside `within(...)`, respect the deadline,
    directly or through a proxy from the environment.

    The wrapped backend is installed on httpcore's pools (`_network_backend`, present in
    httpcore 1.x for direct and proxied pools); a layout change fails here, loudly."""
    c = httpx.Client(timeout=timeout)  # as httpx builds it: proxies from the environment
    for transport in (c._transport, *c._mounts.values()):
        if isinstance(transport, httpx.HTTPTransport):
            _wrap(transport)
    return c


def _wrap(transport: httpx.HTTPTransport) -> None:
    pool = transport._pool
    if not isinstance(getattr(pool, "_network_backend", None), httpcore.NetworkBackend):
        raise RuntimeError("httpcore changed: cannot install the request deadline")
    if not isinstance(pool._network_backend, DeadlineBackend):
        pool._network_backend = DeadlineBackend(pool._network_backend)
