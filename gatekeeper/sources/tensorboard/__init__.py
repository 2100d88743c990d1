"""TensorBoard event files (`events.out.tfevents.*`): every scalar read with C-checked
CRCs (`events.py`, `fastpath.py`), the points a restart discards dropped as TensorBoard drops
them (`restarts.py`), live tails by byte offset (`source.py`), log dirs listed for the
daemon (`discover.py`); a verdict is written next to the run as a JSON file."""

from __future__ import annotations

from gatekeeper.sources.annotation import write_verdict_file
from gatekeeper.sources.base import Annotator, SourceFamily, filter_lists_itself
from gatekeeper.sources.jsonl.annotate import verdict_path
from gatekeeper.sources.tensorboard.source import TensorBoardSource
from gatekeeper.verdict import Verdict

_SCHEMES = ("tensorboard://", "tb://")


class TensorBoardAnnotator(Annotator):
    """`tensorboard://DIR` is a local run directory: the verdict file goes into it."""

    def accepts(self, spec: str) -> bool:
        return spec.startswith(_SCHEMES)

    def annotate(self, spec: str, verdict: Verdict, report: str | None) -> str:
        return write_verdict_file(verdict_path(spec.split("://", 1)[1]), verdict, report)



KIND = SourceFamily(
    name="tensorboard",
    examples=(TensorBoardSource.example, "runs/grpo-7b/ (a log dir of event files)"),
    sources=(TensorBoardSource,),
    annotator=TensorBoardAnnotator(),
    target_key="tensorboard",
    discovery=filter_lists_itself,
)

__all__ = ["KIND", "TensorBoardSource"]
