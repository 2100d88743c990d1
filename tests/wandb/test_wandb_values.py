"""History value texts as the SDK writes them (`value_json`) to float64 points."""

from __future__ import annotations

import math

from gatekeeper.sources.wandb.axes import Columns, StepAxes
from gatekeeper.sources.wandb.decode import texts_to_floats


def test_plain_numbers_markers_and_booleans() -> None:
    values, mask = texts_to_floats(["1", "2.5", "-3e-9", "true", "false"])
    assert mask is None and values.tolist() == [1.0, 2.5, -3e-9, 1.0, 0.0]
    values, mask = texts_to_floats(["NaN", "Infinity", "-Infinity", "4"])
    assert mask is None and math.isnan(values[0]) and values[1:].tolist() == [
        math.inf, -math.inf, 4.0,
    ]


def test_text_media_and_null_are_not_points() -> None:
    texts = ["1", '"warmup"', "null", '{"_type": "image-file"}', "[1, 2]", "2"]
    values, mask = texts_to_floats(texts)
    assert mask is not None and mask.tolist() == [True, False, False, False, False, True]
    assert values[mask].tolist() == [1.0, 2.0]


def test_step_sync_fills_a_missing_step_metric_from_the_last_value() -> None:
    """A row without its step metric takes the last one seen, also across polls."""
    axes = StepAxes()
    axes.define("", "train/*", "train/step")
    first = Columns()
    first.steps = [0.0, 1.0]
    first.rows = {"train/step": [0], "train/loss": [0, 1]}
    first.vals = {"train/step": ["7"], "train/loss": ["0.5", "0.25"]}
    loss = first.finish(axes)["train/loss"]
    assert loss.steps.tolist() == [7, 7] and loss.step_key == "train/step"
    second = Columns(first.carry)
    second.steps = [2.0]
    second.rows = {"train/loss": [0]}
    second.vals = {"train/loss": ["0.125"]}
    assert second.finish(axes)["train/loss"].steps.tolist() == [7]
    orphan = Columns()
    orphan.steps = [0.0]
    orphan.rows = {"train/loss": [0]}
    orphan.vals = {"train/loss": ["1"]}
    assert len(orphan.finish(axes)["train/loss"]) == 0  # no step yet: counted, not placed
    assert orphan.unplaced == {"train/loss": 1}
