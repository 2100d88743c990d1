"""The drift scenario end to end through the real CLI, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os

from tests.helpers import gatekeeper, write_policy, write_record

POLICY = """
version: 1
name: drift
rules:
  - id: kl-step0
    metric: train/ppo_kl
    steps: [0]
    check: {history: {rel_up: 0.2, rel_down: 0.2}}
  - id: loss-last
    metric: train/loss
    steps: last
    check: {history: {rel_up: 0.5, rel_down: 0.5}}
"""


def run_file(tmp_path, i: int, kl0: float):
    pts = {"train/ppo_kl": [(0, kl0), (1, 0.5)], "train/loss": [(0, 3.0), (1 + i, 2.0)]}
    return str(write_record(tmp_path / f"run{i}.jsonl", pts))


def check(tmp_path, url: str, i: int, kl0: float, *extra: str):
    pol = str(tmp_path / "drift.yaml")
    return gatekeeper(
        "check",
        run_file(tmp_path, i, kl0),
        "-p",
        pol,
        "--history",
        url,
        "--config",
        "test_path=tests/e2e/test_grpo.py",
        "--series-key",
        "config.test_path",
        "--json",
        str(tmp_path / f"v{i}.json"),
        *extra,
    )


def test_five_trusted_runs_then_a_drift(tmp_path, store_url):
    write_policy(tmp_path / "drift.yaml", POLICY)
    values = [1.0, 1.0, 1.0, 1.0, 1.15]  # run 5 is within 20% of ref 1.0, so trusted
    for i, v in enumerate(values, 1):
        out = check(
            tmp_path, store_url, i, v, "--record", "--run-id", f"run{i}", "--commit", f"c{i}"
        )
        # the cold start judges nothing (exit 5, docs/cli.md's exit codes) and still seeds
        assert out.returncode == (5 if i == 1 else 0), out.stdout + out.stderr
        assert "as trusted" in out.stdout
    first = json.loads((tmp_path / "v1.json").read_text())
    assert [r["status"] for r in first["results"]] == ["skip", "skip"]  # cold start seeds

    drift = check(tmp_path, store_url, 6, 2.0, "--record", "--run-id", "run6")
    assert drift.returncode == 1 and "UNTRUSTED" in drift.stdout
    verdict = json.loads((tmp_path / "v6.json").read_text())
    kl = verdict["results"][0]
    assert kl["status"] == "fail" and kl["value"] == 2.0 and "mean of 5 trusted" in kl["message"]
    assert verdict["results"][1]["status"] == "pass"  # last loss keys on -1 across lengths
    assert verdict["run"]["history"]["trusted"] is False

    # ref = mean(1, 1, 1, 1, 1.15) = 1.03: 1.21 is inside; the untrusted 2.0 is not counted
    assert check(tmp_path, store_url, 7, 1.21).returncode == 0
    marked = gatekeeper("history", "mark-untrusted", "--history", store_url, "--commit", "c5")
    assert marked.returncode == 0 and "1 run(s) marked untrusted" in marked.stdout
    # run 5 no longer counts: ref = 1.0, the corridor ends at 1.2
    after = check(tmp_path, store_url, 7, 1.21)
    assert after.returncode == 1
    assert (
        "mean of 4 trusted"
        in json.loads((tmp_path / "v7.json").read_text())["results"][0]["message"]
    )

    shown = gatekeeper("history", "show", "--history", store_url)
    lines = shown.stdout.splitlines()
    assert shown.returncode == 0 and "7 run(s)" not in shown.stdout and "6 run(s)" in lines[0]
    assert (
        "run6  untrusted" in lines[1]
        and "run5  untrusted" in lines[2]
        and "run4  trusted" in lines[3]
    )


def test_history_record_and_usage_errors(tmp_path):
    write_policy(tmp_path / "drift.yaml", POLICY)
    url = str(tmp_path / "h.db")
    rec = gatekeeper(
        "history",
        "record",
        run_file(tmp_path, 1, 1.0),
        "-p",
        str(tmp_path / "drift.yaml"),
        "--history",
        url,
        "--run-id",
        "a",
        "-q",
    )
    assert rec.returncode == 0 and "recorded run a as trusted, 2 value(s)" in rec.stdout
    nothing = gatekeeper("history", "mark-untrusted", "--history", url)
    assert nothing.returncode == 2 and "exactly one of --run-id or --commit" in nothing.stderr
    missing = gatekeeper(
        "check",
        run_file(tmp_path, 1, 1.0),
        "-p",
        str(tmp_path / "drift.yaml"),
        "--history",
        url,
        "--series-key",
        "config.suite",
    )
    assert missing.returncode == 2 and "series key 'config.suite' is not set" in missing.stderr
    no_store = gatekeeper(
        "check",
        run_file(tmp_path, 1, 1.0),
        "-p",
        str(tmp_path / "drift.yaml"),
        "--record",
        env={"GATEKEEPER_HISTORY": ""},
    )
    assert no_store.returncode == 2 and "no history store" in no_store.stderr


def test_a_store_url_of_another_scheme_or_with_a_host_is_exit_2(tmp_path):
    """`--history` goes through the URL parser the daemon's `state:` uses. Before,
    `sqlite://h.db` was the file /h.db (the root folder: created as root) and `mysql://x`
    a SQLite path `mysql:/x` under the working directory."""
    write_policy(tmp_path / "drift.yaml", POLICY)
    cases = {
        "sqlite://h.db": "history store 'sqlite://h.db': a SQLite URL names no host; use "
                         "sqlite:///ABS/PATH.db, sqlite:rel/path.db or a path",
        "mysql://u:s3cret@db/x": "history store mysql://u:***@db/x: unknown store scheme "
                                 "'mysql'; use postgresql://USER@HOST:PORT/DB, "
                                 "sqlite:///ABS/PATH.db or a file path",
    }
    before = set(os.listdir("/"))
    for url, error in cases.items():
        proc = gatekeeper("check", run_file(tmp_path, 1, 1.0), "-p", str(tmp_path / "drift.yaml"),
                          "--history", url, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.strip() == f"gatekeeper: error: {error}", (
            proc.stderr)
    assert set(os.listdir("/")) == before and not (tmp_path / "mysql:").exists()


def test_a_series_key_that_names_nothing_is_refused_as_such(tmp_path):
    """`--series-key ''` or `config.` was looked up on the run and reported as "not set"
    with the hint `--config =VALUE`; a 5,000-character key was echoed whole."""
    write_policy(tmp_path / "drift.yaml", POLICY)
    for key, shown in (("", '""'), ("config.", '"config."'), ("config." + "k" * 300,
                                                              '"config.' + "k" * 49 + "...")):
        proc = gatekeeper("check", run_file(tmp_path, 1, 1.0), "-p", str(tmp_path / "drift.yaml"),
                          "--history", str(tmp_path / "h.db"), "--series-key", key)
        assert proc.returncode == 2 and proc.stderr.strip() == (
            f"gatekeeper: error: --series-key {shown}: expected run metadata that tells runs "
            "apart, like config.test_path or name"), proc.stderr


def test_judging_against_a_store_not_there_yet_creates_nothing(tmp_path):
    """`check --history new.db` without `--record` read an empty store it created first
    (a typo'd path left a file behind); now nothing is read or created, the history rules
    say there is no trusted history yet, and `--record` creates the store."""
    write_policy(tmp_path / "drift.yaml", POLICY)
    store = tmp_path / "not-yet.db"
    first = check(tmp_path, str(store), 1, 1.0)
    assert first.returncode == 5, first.stdout + first.stderr  # every gating rule skipped
    assert f"history: no store at {store} yet (nothing read, nothing created; --record " \
           "makes it); not recorded" in first.stdout
    assert "no trusted history yet" in first.stdout and not store.exists()
    recorded = check(tmp_path, str(store), 2, 1.0, "--record")
    assert recorded.returncode == 5 and store.exists(), recorded.stdout + recorded.stderr
