"""JSONL sources: both record shapes, directories, non-finite values, and clear errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gatekeeper.errors import RecordError, SourceNotFound
from gatekeeper.model import RunState
from gatekeeper.sources import open_source
from tests.helpers import write_meta, write_record, write_rows


def read(path):
    return open_source(str(path)).read()


def test_record_form_keeps_non_finite_markers_and_sorts(tmp_path):
    p = write_record(
        tmp_path / "r.jsonl",
        {"train/ppo_kl": [(2, math.nan), (0, 1e-10), (1, math.inf)], "rollout/raw_reward": [(0, 0.5)]},
    )
    run = read(p)
    s = run.series["train/ppo_kl"]
    assert s.steps.tolist() == [0, 1, 2]
    assert s.values[0] == 1e-10 and math.isinf(s.values[1]) and math.isnan(s.values[2])
    assert s.step_key == "train/step"
    assert run.series["rollout/raw_reward"].step_key == "rollout/step"


def test_directory_of_process_files_is_merged_by_step(tmp_path):
    write_record(tmp_path / "run" / "11-aaa.jsonl", {"train/loss": [(0, 1.0), (2, 3.0)]})
    write_record(tmp_path / "run" / "12-bbb.jsonl", {"train/loss": [(1, 2.0)], "perf/t": [(0, 9.0)]})
    write_meta(tmp_path / "run", name="exp", tags=["e2e"], config={"lora_rank": 8}, state="finished")
    run = read(tmp_path / "run")
    assert run.series["train/loss"].steps.tolist() == [0, 1, 2]
    assert run.series["train/loss"].values.tolist() == [1.0, 2.0, 3.0]
    assert run.series["perf/t"].step_key == "rollout/step"  # miles logs perf/* on rollout/step
    assert (run.name, run.tags, run.config, run.state) == ("exp", ("e2e",), {"lora_rank": 8}, RunState.FINISHED)


def test_rows_put_each_namespace_on_its_own_axis(tmp_path):
    p = write_rows(
        tmp_path / "rows.jsonl",
        [
            {"train/step": 0, "train/loss": 0.5, "rollout/step": 10, "rollout/raw_reward": 0.4, "perf/t": 1},
            {"train/step": 1, "train/loss": float("nan")},  # Python's json writes a bare NaN
            {"step": 7, "loss": float("-inf"), "_step": 99},
            {"_step": 3, "eval/acc": 0.9},
        ],
    )
    run = read(p)
    assert run.series["train/loss"].steps.tolist() == [0, 1]
    assert math.isnan(run.series["train/loss"].values[1])
    assert run.series["rollout/raw_reward"].steps.tolist() == [10]
    assert run.series["perf/t"].steps.tolist() == [10]
    assert run.series["loss"].step_key == "step" and run.series["loss"].values[0] == -math.inf
    assert run.series["eval/acc"].step_key == "_step"
    assert not any(k.endswith("step") for k in run.series)


def test_many_rows_convert_in_bulk(tmp_path):
    rows = [{"step": i, "a": i * 0.5, "b": "NaN" if i == 500 else i} for i in range(2000)]
    run = read(write_rows(tmp_path / "rows.jsonl", rows))
    assert np.array_equal(run.series["a"].values, np.arange(2000) * 0.5)
    assert math.isnan(run.series["b"].values[500]) and run.series["b"].values[501] == 501


@pytest.mark.parametrize(
    "lines, line_no, words",
    [
        (['{"step": 0, "loss": 1}', '{"step": 1, "loss": oops}'], 2, "not valid JSON"),
        (['{"step": 0, "loss": "high"}'], 1, "expected a number"),
        (['{"metric": "train/x", "series": [[0, 1], [1]]}'], 1, "series point 1 of \"train/x\" is not [step, value]"),
        (['{"metric": "train/x", "series": [[0, "bad"]]}'], 1, "series point 0"),
        (['{"loss": 1}'], 1, "no step field for metric \"loss\""),
        (['{"step": 0.5, "loss": 1}'], 1, "whole number"),
        (['[1, 2]'], 1, "expected a JSON object"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, lines, line_no, words):
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordError) as err:
        read(p)
    assert f"{p}:{line_no}:" in str(err.value)
    assert words in str(err.value)


def test_truncated_last_line_is_not_judged_as_whole(tmp_path):
    p = tmp_path / "cut.jsonl"
    p.write_text('{"step": 0, "loss": 1}\n{"step": 1, "loss": 2}')  # valid JSON, no newline
    with pytest.raises(RecordError, match=r"cut.jsonl:2: last line is truncated"):
        read(p)


def test_end_marker_sets_state(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"step": 0, "loss": 1}\n{"event": "end", "state": "failed"}\n')
    assert read(p).state is RunState.FAILED


def test_missing_source_and_empty_directory(tmp_path):
    with pytest.raises(SourceNotFound, match="no such file"):
        read(tmp_path / "nope.jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceNotFound, match="no \\*.jsonl"):
        read(tmp_path / "empty")


def test_bad_sidecar_is_named(tmp_path):
    write_record(tmp_path / "d" / "a.jsonl", {"x": [(0, 1)]})
    (tmp_path / "d" / "run.json").write_text('{"tags": "e2e"}')
    with pytest.raises(RecordError, match='run.json: "tags" must be a list'):
        read(tmp_path / "d")
