"""Lark/Feishu custom bot: an interactive card, signed when the bot has a secret.

The signature is HMAC-SHA256 keyed with `timestamp + "\\n" + secret` over an empty
message, base64-encoded, sent with the timestamp (seconds) in the body. Lark answers
HTTP 200 with a JSON `code` (0 is success). A bot may post 5 messages a second and 100 a
minute.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Sequence
from typing import Any

import httpx

from gatekeeper.notify.base import Limit, Notifier, SendError
from gatekeeper.notify.grouping import Group, group_blocks, group_text, headline, run_line

MAX_ELEMENTS = 40  # keep the card well inside Lark's size limit
MAX_TEXT = 3000
RATE_LIMITED = {9499, 11232}  # "too many requests" / "frequency limited"


def sign(timestamp: str, secret: str) -> str:
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


class LarkNotifier(Notifier):
    kind = "lark"
    limits = (Limit(5, 1.0), Limit(100, 60.0))

    def render(self, groups: Sequence[Group]) -> list[dict[str, Any]]:
        elements = group_blocks(
            groups,
            MAX_ELEMENTS // 2,
            lambda g: {"tag": "div", "text": {"tag": "lark_md", "content": self._text(g)}},
            {"tag": "hr"},
            lambda more: {"tag": "note", "elements": [{"tag": "plain_text", "content": more}]},
        )
        card = {
            "config": {"wide_screen_mode": True},
            "header": {
                "template": "red" if any(g.state == "firing" for g in groups) else "green",
                "title": {"tag": "plain_text", "content": headline(groups)},
            },
            "elements": elements,
        }
        return [{"msg_type": "interactive", "card": card}]

    def _text(self, group: Group) -> str:
        head = f"**{group.title}**"
        # no group.reason line: it is the grouping key, numbers masked as `#`; each run's
        # line below carries its own message with the real values
        lines = ["- " + run_line(a, "[{text}]({url})") for a in group.alerts]
        return group_text(head, lines, self.max_lines, MAX_TEXT)

    def post(self, body: dict[str, Any]) -> None:
        if self.secret:
            ts = str(int(time.time()))
            body = {"timestamp": ts, "sign": sign(ts, self.secret), **body}
        super().post(body)

    def check_response(self, resp: httpx.Response) -> None:
        super().check_response(resp)
        try:
            code = resp.json().get("code", resp.json().get("StatusCode", 0))
        except ValueError:
            raise SendError(f"{self.name}: answer is not JSON: {resp.text[:200]}") from None
        if code in RATE_LIMITED:
            raise SendError(f"{self.name}: rate limited (code {code})", retry_after=1.0)
        if code:
            msg = resp.json().get("msg", "")
            raise SendError(f"{self.name}: rejected, code {code}: {msg}", retryable=False)
