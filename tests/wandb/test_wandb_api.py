"""`wandb://` end to end: the real `wandb.Api` client (through wandb-core) against the
STAND-IN wandb server of standin_server.py (a real wandb server cannot run in a test),
serving a fixture made from a run the real SDK wrote offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gatekeeper.annotate import annotate
from gatekeeper.cli.main import main
from gatekeeper.errors import SourceError, SourceUnavailable
from gatekeeper.model import RunState
from gatekeeper.sources import open_source
from gatekeeper.sources.wandb.api import WandbApiSource
from gatekeeper.sources.wandb.local import WandbLocalSource
from gatekeeper.sources.wandb.log import LogReader
from gatekeeper.verdict import Verdict
from tests.wandb.standin_server import FixtureRun, StandinWandb

SPEC = "wandb://team/grpo/run1"


def fixture_from_offline_run(wandb_dir: Path) -> FixtureRun:
    """History rows and metric definitions as the SDK would have synced them to a server."""
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb.sdk.lib.proto_util import dict_from_proto_list, proto_encode_to_dict

    log = next(Path(os.path.realpath(wandb_dir / "latest-run")).glob("*.wandb"))
    rows: list[dict] = []
    metrics: list[dict] = []
    index: dict[str, int] = {}
    for raw in LogReader(str(log)).records():
        rec = pb.Record.FromString(raw)
        if rec.HasField("history"):
            rows.append(dict_from_proto_list(rec.history.item))
        elif rec.HasField("metric"):
            m = rec.metric
            if m.step_metric:  # the SDK stores the step metric as a 1-based index
                m.step_metric_index = index[m.step_metric] + 1
                m.ClearField("step_metric")
            if m.name:
                index[m.name] = len(metrics)
            metrics.append({str(k): v for k, v in proto_encode_to_dict(m).items()})
    config = {"lora_rank": {"value": 8, "desc": None},
              "_wandb": {"value": {"m": metrics}, "desc": None}}
    return FixtureRun("team", "grpo", "run1", name="grpo-qwen", tags=["ci"], config=config,
                      summary={"train/loss": 0.1, "keep/me": 1}, rows=rows)


@pytest.fixture
def standin(failed_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[StandinWandb]:
    with StandinWandb(fixture_from_offline_run(failed_run)) as server:
        monkeypatch.setenv("WANDB_BASE_URL", server.url)
        monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
        monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
        monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
        monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
        yield server


def test_api_read_equals_the_local_read_of_the_same_run(
    standin: StandinWandb, failed_run: Path
) -> None:
    remote = open_source(SPEC)
    assert isinstance(remote, WandbApiSource)
    run = remote.read()
    local = WandbLocalSource(str(failed_run)).read()
    assert run.name == "grpo-qwen" and run.tags == ("ci",) and run.config == {"lora_rank": 8}
    assert run.url and run.url.startswith(standin.url)
    assert set(run.series) == set(local.series)
    for metric, series in local.series.items():
        got = run.series[metric]
        assert got.step_key == series.step_key, metric
        np.testing.assert_array_equal(got.steps, series.steps)
        np.testing.assert_array_equal(got.values, series.values)  # NaN == NaN here


def test_polls_fetch_only_new_steps_and_end_on_a_final_state(standin: StandinWandb) -> None:
    rows = standin.run.rows
    standin.run.rows = rows[:100]
    source = WandbApiSource(SPEC, page_size=40)
    first = source.poll()
    assert first.series["train/loss"].steps.tolist() == list(range(100)) and not first.ended
    assert standin.history_rows_served == 100
    assert source.poll().points == 0 and standin.history_rows_served == 100  # nothing new
    standin.run.rows = rows
    standin.run.state = "failed"
    cursor = json.loads(json.dumps(source.cursor()))
    resumed = WandbApiSource(SPEC, page_size=40)
    resumed.restore(cursor)
    last = resumed.poll()
    assert last.series["train/loss"].steps.tolist() == list(range(100, len(rows)))
    assert last.ended and last.run.state is RunState.FAILED
    assert standin.history_rows_served == len(rows)  # every row sent exactly once
    assert all(lo >= 100 for lo, _ in standin.history_requests[-2:])


def test_429_with_retry_after_then_success(standin: StandinWandb) -> None:
    source = WandbApiSource(SPEC, timeout=5, retry_seconds=30)
    source.api()
    standin.fail_next(429, times=2, retry_after=1)
    run = source.read()
    assert len(run.series["train/loss"]) == len(standin.run.rows)
    assert standin.failures_served == 2  # both 429s were answered, then retried through


def test_a_hung_page_is_retried(standin: StandinWandb) -> None:
    source = WandbApiSource(SPEC, timeout=2, retry_seconds=30)
    standin.hang_next(6)
    run = source.read()
    assert len(run.series["train/loss"]) == len(standin.run.rows)
    assert standin.ops.count("history") >= 2


def test_persistent_5xx_is_a_source_error_in_bounded_time(
    standin: StandinWandb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = WandbApiSource(SPEC, timeout=1, retry_seconds=4)
    source.api()
    standin.fail_next(500, times=10_000)
    started = time.monotonic()
    with pytest.raises(SourceUnavailable, match="still failing after 4s of retries"):
        source.read()
    assert time.monotonic() - started < 30
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nname: p\nrules:\n  - id: r\n    metric: train/loss\n"
                      "    check: {max: 1}\n")
    monkeypatch.setenv("GATEKEEPER_WANDB_TIMEOUT", "1")
    monkeypatch.setenv("GATEKEEPER_WANDB_RETRY_SECONDS", "3")
    assert main(["check", SPEC, "-p", str(policy), "-q"]) == 2  # never a pass


def test_annotate_writes_tag_and_summary_keys_only(standin: StandinWandb) -> None:
    standin.run.tags = ["ci", "gate:pass"]
    standin.run.summary["added/after-load"] = 5  # someone else wrote since the gate read
    verdict = Verdict(run={"name": "grpo-qwen"}, results=[], final=True)
    verdict_fail = _failing(verdict)
    line = annotate(SPEC, verdict_fail, "https://ci.example/run/7")
    assert "gate:fail" in line
    assert standin.run.tags == ["ci", "gate:fail"]
    summary = standin.run.summary
    assert summary["keep/me"] == 1 and summary["added/after-load"] == 5
    assert summary["gatekeeper/status"] == "fail"
    assert summary["gatekeeper/failing_rules"] == ["p/r"]
    assert summary["gatekeeper/report"] == "https://ci.example/run/7"
    (mutation,) = standin.mutations
    assert "config" not in mutation and mutation["id"] == "storage-run1"
    assert standin.run.config["lora_rank"] == {"value": 8, "desc": None}


def _failing(verdict: Verdict) -> Verdict:
    from gatekeeper.verdict import Mode, RuleResult, Severity, Status

    result = RuleResult(policy="p", rule="r", status=Status.FAIL, severity=Severity.FAIL,
                        mode=Mode.ENFORCE, metric="train/loss", message="too high",
                        source="p.yaml:3")
    return Verdict(run=verdict.run, results=[result], final=True)


def test_refused_credentials_fail_at_once_with_a_hint(standin: StandinWandb) -> None:
    standin.fail_next(401, times=50)
    source = WandbApiSource(SPEC, timeout=3, retry_seconds=60)
    with pytest.raises(SourceError, match="WANDB_API_KEY") as info:
        source.read()
    assert not isinstance(info.value, SourceUnavailable)
    assert source.retry.attempts == 0  # not retried: no retry fixes a refused key


def test_check_cli_on_a_wandb_url_with_annotate(standin: StandinWandb, tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "version: 1\nname: api\nrules:\n"
        "  - id: kl-step0\n    metric: train/ppo_kl\n    steps: [0]\n"
        "    check: {abs_max: 1.0e-8}\n"
        "  - id: grad-finite\n    metric: train/grad_norm\n    check: {finite: true}\n"
    )
    out = tmp_path / "gate.json"
    assert main(["check", SPEC, "-p", str(policy), "-q", "--annotate", "--json", str(out)]) == 1
    results = {r["rule"]: r for r in json.loads(out.read_text())["results"]}
    assert results["kl-step0"]["status"] == "pass"
    assert results["grad-finite"]["status"] in ("fail", "error")  # NaN at train/step 5
    grad = results["grad-finite"]
    assert (grad["step"], grad["step_key"]) == (5, "train/step")
    assert "gate:fail" in standin.run.tags
    assert standin.run.summary["gatekeeper/report"] == str(out)


def test_a_step_axis_going_back_is_polled_as_check_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run of step_back_writer.py (the real SDK: `train/global_step` 0..20, then a
    resume from step 10 logging 10..15 again), served row by row: a poll whose rows bring
    a step below one delivered reads the run again whole, so the session ends on
    `check`'s verdict (before the fourteenth session the resumed points came after step
    20: `for: 2` passed live and failed in `check`)."""
    from gatekeeper.policy.loader import load_policies
    from gatekeeper.session import JudgingSession, judge_whole
    from tests.helpers import write_policy
    from tests.wandb.conftest import sdk_env

    root = tmp_path / "sdk"
    root.mkdir()
    writer = str(Path(__file__).with_name("step_back_writer.py"))
    proc = subprocess.run([sys.executable, writer], env=sdk_env(root), cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = ("version: 1\nname: p\nrules:\n"
            "  - {id: hi, metric: train/loss, check: {max: 1.0}, for: 2}\n")
    policies = load_policies([str(write_policy(tmp_path / "p.yaml", text))])
    fixture = fixture_from_offline_run(root / "wandb")
    rows = fixture.rows
    with StandinWandb(fixture) as server:
        monkeypatch.setenv("WANDB_BASE_URL", server.url)
        monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
        monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
        monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
        checked = judge_whole(policies, WandbApiSource(SPEC).read())[1].results[0]
        assert (checked.status.value, checked.step) == ("fail", 16)
        source, session = WandbApiSource(SPEC, page_size=4), JudgingSession(policies, live=True)
        resets = 0
        for upto in range(3, len(rows) + 3, 3):
            server.run.rows = rows[:upto]
            poll = source.poll()
            resets += poll.reset
            session.feed(poll.series, poll.run, reset=poll.reset)
        polled = session.verdict(final=True).results[0]
    assert (polled.status, polled.message) == (checked.status, checked.message)
    assert resets >= 1
