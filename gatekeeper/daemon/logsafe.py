"""Keep secrets (webhook URLs, signing secrets, the HTTP token) out of the daemon's log.

Two layers: httpx and httpcore, which log every request URL at INFO and DEBUG, are held
at WARNING; and a filter on every root handler replaces any registered secret (and the
secret part of a URL: its path and query) in the final text of every record, traceback
included, whatever logger or level wrote it. Uncaught exceptions in threads go through
logging too, so their tracebacks are filtered as well.
"""

from __future__ import annotations

import logging
import threading
from urllib.parse import urlsplit

REDACTED = "[redacted]"
_QUIET = ("httpx", "httpcore", "hpack")
_MIN_PART = 6  # shorter fragments ("/", "/hook") would redact ordinary words


class Redactor(logging.Filter):
    """Replaces registered secret strings in every record it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: list[str] = []

    def add(self, secret: str | None) -> None:
        if not secret:
            return
        parts = {secret}
        if "://" in secret:
            url = urlsplit(secret)
            parts.add(secret.split("://", 1)[1])
            tail = url.path + (f"?{url.query}" if url.query else "")
            if len(tail) >= _MIN_PART:
                parts.add(tail)
            if url.password:
                parts.add(url.password)
        # Longest first, so a URL is replaced whole before its path would be.
        self.secrets = sorted(set(self.secrets) | parts, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        record.msg, record.args = self.redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


def install(secrets: list[str | None]) -> Redactor:
    """Filter every root handler; quiet the HTTP client loggers; log thread crashes."""
    redactor = Redactor()
    for secret in secrets:
        redactor.add(secret)
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.addFilter(redactor)

    def excepthook(args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread else "?"
        logging.getLogger("gatekeeper").error(
            "uncaught error in thread %s",
            name,
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),  # type: ignore[arg-type]
        )

    threading.excepthook = excepthook
    return redactor
