"""docs/miles.md's walkthrough of miles' tests/e2e/megatron/test_qwen3_30B_A3B/test_baseline.py
(radixark/miles 31f1ca961a94cb860cec3b2dea34ec332bfa8f76): its command lines, read from the
doc and run as written, from a miles checkout holding a stand-in for that test
(fake_e2e.py: its registrations, its trainer command line under a setsid supervisor and
`/bin/sh -c`, CI records written as CiHistoryBackend writes them)."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, gatekeeper
from tests.miles.fake_e2e import GATED, SUITE, TEST_PATH, write_checkout

DOC = REPO / "docs" / "miles.md"
FAKE_MILES = str(Path(__file__).with_name("fake_miles.py"))


def documented() -> list[list[str]]:
    """The `gatekeeper ...` lines of the walkthrough's first bash block, as argv."""
    text = DOC.read_text()
    section = text[text.index("## Walkthrough:") :]
    section = section[: section.index("\n## ", 1)]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    lines = [ln for ln in block.group(1).splitlines() if ln.startswith("gatekeeper ")]
    return [shlex.split(ln.replace("$GK", str(REPO)))[1:] for ln in lines]


def bare_record_example() -> list[str]:
    """The Config section's `gatekeeper check RECORD_DIR ...` example, on out/records."""
    text = DOC.read_text()
    section = text[text.index("## Config") :]
    section = section[: section.index("\n## ", 1)]
    block = re.search(r"```bash\n(gatekeeper check RECORD_DIR .*?)```", section, re.S)
    assert block is not None and "num_steps_per_rollout=2" in block.group(1)
    argv = shlex.split(block.group(1).replace("\\\n", " "))[1:]
    return [{"RECORD_DIR": "out/records", "policies/miles": str(REPO / "policies" / "miles")}
            .get(a, a) for a in argv]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A miles checkout with the stand-in test, and `python3` on PATH as this Python."""
    root = tmp_path / "miles"
    write_checkout(root)
    shim = tmp_path / "bin" / "python3"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    shim.chmod(0o755)
    return root


def _env(checkout: Path, **knobs: str) -> dict[str, str]:
    import os

    path = f"{checkout.parent / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return {"PATH": path, "FAKE_MILES_STEP_DELAY": "0.02", **knobs}


def _out(proc) -> str:  # type: ignore[no-untyped-def]
    """What went wrong, without the report table."""
    lines = [ln for ln in proc.stdout.splitlines() if not ln.startswith(("│", "┃", "┏", "┡", "└"))]
    return "\n".join(lines)[:3000] + proc.stderr[-2000:]


def test_the_walkthrough_has_four_short_commands() -> None:
    cmds = documented()
    assert [c[0] for c in cmds] == ["run", "check", "check", "history"]
    flags = [a for a in cmds[0][: cmds[0].index("--")] if a.startswith("-")]
    assert flags == ["--miles", "--source", "-p"]  # at most three besides -p
    assert not any("--config" in c for c in cmds)


def test_the_documented_commands_gate_the_test_without_config_flags(checkout: Path) -> None:
    run, check, history, show = documented()
    env = _env(checkout)
    proc = gatekeeper(*run, cwd=checkout, env=env)
    assert proc.returncode == 0, _out(proc)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("gatekeeper: config"))
    for fact in ("from the trainer's command line", "train.py", "use_kl_loss=true",
                 "global_batch_size=32", "num_steps_per_rollout=null", "lora_rank=0",
                 f"suite={SUITE}", "ci_gate=[5 metrics]", "written to"):
        assert fact in line, line
    meta = json.loads((checkout / "out" / "records" / "run.json").read_text())
    assert meta["name"] == TEST_PATH and meta["config"]["ci_gate"] == list(GATED)
    assert meta["config"]["rollout_batch_size"] == 8

    proc = gatekeeper(*check, "--json", "v.json", cwd=checkout, env=env)
    assert proc.returncode == 0, _out(proc)
    results = {r["rule"]: r for r in json.loads((checkout / "v.json").read_text())["results"]}
    assert results["ppo-kl-rollout-start"]["status"] == "pass"
    assert "2 points" in results["ppo-kl-rollout-start"]["message"]  # train/step 0 and 2

    proc = gatekeeper(*history, cwd=checkout, env=env)
    assert proc.returncode == 0, _out(proc)
    assert "gate PASSED" in proc.stdout and "7 skip" in proc.stdout  # a cold start
    proc = gatekeeper(*show, cwd=checkout, env=env)
    assert proc.returncode == 0, _out(proc)
    assert "1 run(s)" in proc.stdout and "trusted" in proc.stdout
    assert f'"config.suite":"{SUITE}","config.test_path":"{TEST_PATH}"' in proc.stdout


def test_a_bad_rollout_start_stops_the_test(checkout: Path) -> None:
    run = documented()[0]
    bad = gatekeeper(*run, cwd=checkout, env=_env(
        checkout, FAKE_MILES_BAD_STEP="2", FAKE_MILES_NUM_ROLLOUT="60",
        FAKE_MILES_STEP_DELAY="0.1"))
    assert bad.returncode == 1, _out(bad)
    assert "miles-ci-consistency/ppo-kl-rollout-start failed" in bad.stdout
    assert "STEP 2" in bad.stdout and "STEP 100" not in bad.stdout  # long before the end


def test_a_mid_rollout_value_is_not_a_rollout_start(checkout: Path) -> None:
    """ppo_kl = 0.05 at train/step 1 (rollout 0's second step): miles asserts nothing
    there, nor does the pack; 1 step per rollout, the example docs/miles.md once gave,
    judges step 1 and fails the run."""
    run, check = documented()[:2]
    mid = gatekeeper(*run, cwd=checkout, env=_env(checkout, FAKE_MILES_BAD_STEP="1"))
    assert mid.returncode == 0, _out(mid)
    wrong = gatekeeper(*check, "--config", "num_steps_per_rollout=1", cwd=checkout,
                       env=_env(checkout))
    assert wrong.returncode == 1 and "at train/step 1 " in wrong.stdout, _out(wrong)
    # the bare-record example of docs/miles.md's Config section: 2 steps per rollout
    (checkout / "out" / "records" / "run.json").unlink()
    bare = gatekeeper(*bare_record_example(), cwd=checkout, env=_env(checkout))
    assert bare.returncode == 0, _out(bare)


def test_without_a_trainer_the_error_names_the_flags(tmp_path: Path) -> None:
    """A CMD whose records appear with no miles trainer among its processes: the pack's
    variants are an ERROR naming what to pass, never the default variant."""
    proc = gatekeeper(
        "run", "--miles", "--source", str(tmp_path / "records"),
        "-p", str(REPO / "policies" / "miles"), "--interval", "0.1",
        "--", sys.executable, FAKE_MILES, "6", "0.05", cwd=REPO,
    )
    assert proc.returncode == 1, _out(proc)
    assert "records appeared before a miles trainer" in proc.stdout
    assert "fake_miles.py: no one register_cuda_ci" in proc.stdout
    assert "--config num_steps_per_rollout=..." in proc.stdout
    assert not (tmp_path / "records" / "run.json").exists()


def test_config_flags_win_and_a_hand_written_sidecar_is_kept(checkout: Path) -> None:
    """`--config` wins over the trainer's command line (and the line says so); a run.json
    already in the directory keeps its name and other keys, the trainer's keys merged in."""
    records = checkout / "out" / "records"
    records.mkdir(parents=True)
    (records / "run.json").write_text('{"name": "qwen3-nightly", "config": {"owner": "rl"}}')
    run = documented()[0]
    at = run.index("--")
    proc = gatekeeper(*run[:at], "--config", "lora_rank=16", "--json", "v.json", *run[at:],
                      cwd=checkout, env=_env(checkout))
    assert proc.returncode == 0, _out(proc)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("gatekeeper: config"))
    assert "lora_rank=0" in line and "from --config (wins): lora_rank" in line
    results = {r["rule"]: r for r in json.loads((checkout / "v.json").read_text())["results"]}
    assert results["ppo-kl-rollout-start-lora"]["status"] == "pass"  # the LoRA variant
    assert results["ppo-kl-rollout-start"]["status"] == "skip"
    meta = json.loads((records / "run.json").read_text())
    assert meta["name"] == "qwen3-nightly" and meta["config"]["owner"] == "rl"
    assert meta["config"]["lora_rank"] == 0 and meta["config"]["suite"] == SUITE
