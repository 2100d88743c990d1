"""The `.wandb` history reader against the SDK's own decoding of the same records
(`proto_util.dict_from_proto_list`, json.loads per value), on runs the real SDK wrote
offline (wandb 0.31, wandb-core). The runs hold what the reader's batched conversion must
keep: NaN and ±Inf points, `None` logged as null, nested dicts, define_metric step axes,
and a resumed run's two segments.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gatekeeper.sources.wandb import decode as wandb_decode
from gatekeeper.sources.wandb.axes import NESTED
from gatekeeper.sources.wandb.log import LogReader
from tests.wandb.test_real_runs import train

pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")
proto_util = pytest.importorskip("wandb.sdk.lib.proto_util")


@pytest.fixture(scope="module")
def runs(miles_run: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """`.wandb` files: miles' axes with NaN/Inf and a nested dict (conftest), HF/TRL with a
    reward logged as None from step 7, and a run resumed with the same id (2 segments)."""
    hf = tmp_path_factory.mktemp("hf-null")
    assert train(hf, "hf", "400", "--null-after", "7").returncode == 0
    resumed = tmp_path_factory.mktemp("resumed")
    assert train(resumed, "hf", "30", "--resume-id", "ref01").returncode == 0
    time.sleep(1.1)  # the directory name carries the start time, to the second
    assert train(resumed, "hf", "60", "--start", "30", "--resume-id", "ref01").returncode == 0
    files = [p for root in (miles_run, hf / "wandb", resumed / "wandb")
             for p in sorted(root.glob("*run-*/*.wandb"))]
    assert len(files) == 4
    return files


def _flat(row: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            out.update(_flat(value, (*prefix, key)))
        else:
            out[NESTED.join((*prefix, key))] = value
    return out


def sdk_columns(path: Path) -> tuple[list[float], dict[str, tuple[list[int], list[float]]]]:
    """Steps and per-key (rows, values) as the SDK decodes the history records."""
    steps: list[float] = []
    cols: dict[str, tuple[list[int], list[float]]] = {}
    for raw in LogReader(str(path)).records():
        rec = pb.Record.FromString(raw)
        if rec.WhichOneof("record_type") != "history":
            continue
        row = _flat(proto_util.dict_from_proto_list(rec.history.item))
        for key, value in row.items():
            if key.startswith("_"):
                continue
            rows, values = cols.setdefault(key, ([], []))
            rows.append(len(steps))
            values.append(math.nan if value is None else float(value))
        steps.append(float(rec.history.step.num))
    return steps, cols


def test_the_reader_decodes_every_point_as_the_sdk_does(runs: list[Path]) -> None:
    for path in runs:
        part = wandb_decode.decode(str(path), 0)
        steps, cols = sdk_columns(path)
        assert part.steps == steps, path
        assert sorted(part.keys) == sorted(cols), path
        for key, (rows, values, mask) in part.keys.items():
            want_rows, want_values = cols[key]
            assert mask is None or mask.all(), (path, key)
            np.testing.assert_array_equal(rows, want_rows, err_msg=f"{path} {key}")
            np.testing.assert_array_equal(values, want_values, err_msg=f"{path} {key}")
    miles = wandb_decode.decode(str(runs[0]), 0).keys
    assert miles[NESTED.join(("sys", "gpu", "mem"))][1][:3].tolist() == [0.0, 1.0, 2.0]
    grad = miles["train/grad_norm"][1]
    assert math.isnan(grad[5]) and grad[6] == math.inf
    null = wandb_decode.decode(str(runs[1]), 0).keys["rewards/broken"][1]
    assert null[:7].tolist() == [1.0] * 7 and np.isnan(null[7:]).all() and len(null) == 400
