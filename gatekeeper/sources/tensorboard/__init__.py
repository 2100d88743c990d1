"""TensorBoard event files: read and tail every scalar (`source.py`), list runs (`discover.py`)."""

from __future__ import annotations

from gatekeeper.sources.tensorboard.source import TensorBoardSource

__all__ = ["TensorBoardSource"]
