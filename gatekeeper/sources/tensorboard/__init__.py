"""TensorBoard event files (`events.out.tfevents.*`): every scalar read with C-checked
CRCs (`events.py`, `fastpath.py`), the points a restart discards dropped as TensorBoard drops
them (`restarts.py`), live tails by byte offset (`source.py`), log dirs listed for the
daemon (`discover.py`); a verdict is written next to the run as a JSON file.

Importing the package imports none of its modules: `source_for` answers the detection pass
(`sources.open_source`), `KIND` and `TensorBoardSource` are built when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gatekeeper.sources.base import (
    Annotator,
    Source,
    SourceFamily,
    filter_lists_itself,
    lazy_family,
)
from gatekeeper.sources.tensorboard.scheme import SCHEMES

if TYPE_CHECKING:
    from gatekeeper.sources.tensorboard.source import TensorBoardSource
    from gatekeeper.verdict import Verdict


# Declared, not bound: the module's __getattr__ builds it when first asked for.
KIND: SourceFamily


def source_for(spec: str) -> type[Source] | None:
    """The kind that reads `spec` (its scheme, an event file, a directory holding some),
    or None: the detection pass's question (`sources.open_source`)."""
    if "://" in spec and not spec.startswith((*SCHEMES, "file://")):
        return None  # another family's scheme: nothing of ours imported
    from gatekeeper.sources.tensorboard.source import TensorBoardSource

    return TensorBoardSource if TensorBoardSource.accepts(spec) else None


class TensorBoardAnnotator(Annotator):
    """`tensorboard://DIR` is a local run directory: the verdict file goes into it."""

    def accepts(self, spec: str) -> bool:
        return spec.startswith(SCHEMES)

    def annotate(self, spec: str, verdict: Verdict, report: str | None) -> str:
        from gatekeeper.sources.annotation import write_verdict_file
        from gatekeeper.sources.jsonl.annotate import verdict_path

        return write_verdict_file(verdict_path(spec.split("://", 1)[1]), verdict, report)


def _kind() -> SourceFamily:
    from gatekeeper.sources.tensorboard.source import TensorBoardSource

    return SourceFamily(
        name="tensorboard",
        examples=(TensorBoardSource.example, "runs/grpo-7b/ (a log dir of event files)"),
        sources=(TensorBoardSource,),
        annotator=TensorBoardAnnotator(),
        target_key="tensorboard",
        discovery=filter_lists_itself,
        extra="tensorboard",
    )


__getattr__ = lazy_family(
    globals(),
    _kind,
    {
        "TensorBoardSource": "gatekeeper.sources.tensorboard.source",
    },
)


__all__ = ["KIND", "SCHEMES", "TensorBoardSource", "source_for"]
