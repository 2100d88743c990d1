"""Slack incoming webhook: Block Kit, within 50 blocks and 3,000 characters a text.

Slack allows about one message a second per webhook and answers 429 with Retry-After.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gatekeeper.notify.base import Limit, Notifier
from gatekeeper.notify.grouping import Group, group_blocks, group_text, headline, run_line

MAX_BLOCKS = 50
MAX_TEXT = 3000
_EMOJI = {"fail": ":red_circle:", "error": ":warning:", "warn": ":large_yellow_circle:"}


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SlackNotifier(Notifier):
    kind = "slack"
    limits = (Limit(1, 1.0),)

    def render(self, groups: Sequence[Group]) -> list[dict[str, Any]]:
        header = {"type": "plain_text", "text": headline(groups)[:150]}
        # Two blocks per group (section + divider); keep room for the "+N more" context.
        blocks = [{"type": "header", "text": header}] + group_blocks(
            groups,
            (MAX_BLOCKS - 2) // 2,
            lambda g: {"type": "section", "text": {"type": "mrkdwn", "text": self._text(g)}},
            {"type": "divider"},
            lambda more: {"type": "context", "elements": [{"type": "mrkdwn", "text": more}]},
        )
        fallback = "; ".join(g.title for g in groups)[:MAX_TEXT]
        return [{"text": fallback, "blocks": blocks}]

    def _text(self, group: Group) -> str:
        icon = ":white_check_mark:" if group.state == "resolved" else _EMOJI.get(group.status, "")
        head = f"{icon} *{_escape(group.title)}*"
        # no group.reason line: it is the grouping key, numbers masked as `#`; each run's
        # line below carries its own message with the real values
        lines = [
            "• "
            + run_line(
                {**a, "run": _escape(str(a["run"])), "message": _escape(a["message"])},
                "<{url}|{text}>",
            )
            for a in group.alerts
        ]
        return group_text(head, lines, self.max_lines, MAX_TEXT)
