"""`gatekeeper checks [KIND]`: the check kinds, each summed up in its first sentence, and
one kind's page: its whole documentation (the kind module's docstring) and an example
policy that uses it, which `gatekeeper validate` accepts as written."""

from __future__ import annotations

import re
import sys
import textwrap

# One rule per built-in kind, on a metric such a rule is written for. A plug-in kind has
# none here: its page says so and shows its documentation alone.
EXAMPLES = {
    "abs_lt": ("train/ppo_kl", "{abs_lt: 0.01}"),
    "abs_max": ("train/ppo_kl", "{abs_max: 0.1}"),
    "approx": ("train/lr", "{approx: {value: 1.0e-6, rel: 0.01}}"),
    "between": ("rollout/response_len", "{between: [16, 4096]}"),
    "finite": ("train/loss", "{finite: true}"),
    "flat": ("rollout/raw_reward", "{flat: {window: 50, min_std: 0.01}}"),
    "fraction": ("train/grad_norm", "{fraction: {above: 0.999, max: 0.2}}"),
    "gt": ("train/entropy_loss", "{gt: 0.0}"),
    "history": ("eval/aime", "{history: {rel_up: 0.2, rel_down: 0.2}}"),
    "isclose": ("train/grad_norm", "{isclose: {reference: replay, rel_tol: 0.03, abs_tol: 0.03}}"),
    "lt": ("train/mtp_loss", "{lt: 1.0}"),
    "max": ("train/pg_clipfrac", "{max: 0.5}"),
    "min": ("rollout/raw_reward", "{min: 0.0}"),
    "present_at": ("eval/gsm8k", '{present_at: {steps_of: "eval/*", unless: "eval/skipped_*"}}'),
    "reach": ("rollout/raw_reward", "{reach: {value: 0.75, by_step: 80, window: 5}}"),
    "rise": ("eval/aime", "{rise: {from_step: 0, by_step: 9, min: 0.06}}"),
    "spike": ("train/loss", "{spike: {window: 20, factor: 5}}"),
    "stale": ("train/loss", "{stale: {max_seconds: 600}}"),
    "strictly_between": ("train/log_probs", "{strictly_between: [-100, 0]}"),
    "trend": ("train/train_rollout_logprob_abs_diff", "{trend: {window: 50, max_slope: 1.0e-4}}"),
}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"(])")


def doc_of(cls: type) -> str:
    """The kind's documentation: its module's docstring (a plug-in's may have none)."""
    module_doc = getattr(sys.modules.get(cls.__module__), "__doc__", None)
    return textwrap.dedent(module_doc or cls.__doc__ or "").strip()


def first_sentence(doc: str) -> str:
    """The first paragraph's first sentence, whole, on one line."""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    if not paragraph:
        return "(no description)"
    return _SENTENCE_END.split(paragraph, 1)[0]


def example(kind: str) -> str | None:
    if kind not in EXAMPLES:
        return None
    metric, check = EXAMPLES[kind]
    return (
        f"version: 1\nname: {kind.replace('_', '-')}-example\nrules:\n"
        f"  - id: {metric.rsplit('/', 1)[-1].replace('_', '-')}-{kind.replace('_', '-')}\n"
        f"    metric: {metric}\n    check: {check}\n"
    )


def page(kind: str, cls: type, width: int = 88) -> str:
    """What `gatekeeper checks KIND` prints: the documentation's prose paragraphs wrapped
    to `width` (never inside a word; a terminal narrower than the source's lines would
    cut them anywhere), other paragraphs as written."""
    doc = "\n\n".join(_wrap(part, width) for part in (doc_of(cls) or "(no description)")
                       .split("\n\n"))
    text = f"{kind}\n\n{doc}\n\n"
    shown = example(kind)
    if shown is None:
        return text + "(no example ships with this kind: it comes from a plug-in)\n"
    return text + "Example policy (gatekeeper validate accepts it as written):\n\n" + shown


def _wrap(paragraph: str, width: int) -> str:
    """A prose paragraph refilled to `width`; an indented or list paragraph kept."""
    if any(line.startswith((" ", "\t", "-", "*", "|", ">")) for line in paragraph.splitlines()):
        return paragraph
    return textwrap.fill(" ".join(paragraph.split()), width, break_long_words=False,
                         break_on_hyphens=False)
