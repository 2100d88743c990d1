"""MLflow runs logged through the real mlflow client (3.x) to a real tracking server
(`mlflow server`, sqlite backend, started by conftest.py), read over REST, from the server's
sqlite store directly, and from a file store (`mlruns/`)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gatekeeper.errors import SourceError, UsageError
from gatekeeper.sources import open_live_source, open_source
from gatekeeper.sources.mlflow import MlflowSource
from gatekeeper.sources.mlflow.source import parse_spec
from tests.helpers import REPO, gatekeeper, gatekeeper_in_process, write_policy
from tests.sources.conftest import MlflowServer, json_server

pytest.importorskip("mlflow")
WRITER = str(Path(__file__).with_name("mlflow_writer.py"))
RESUME = str(Path(__file__).with_name("mlflow_resume.py"))


def _log_run(client, experiment: str, losses: list[float], status: str | None = "FINISHED",
             **params: str) -> str:  # type: ignore[no-untyped-def]
    from mlflow.entities import Metric, Param

    try:
        exp = client.create_experiment(experiment)
    except Exception:
        exp = client.get_experiment_by_name(experiment).experiment_id
    run = client.create_run(exp, run_name="grpo-7b", tags={"team": "rl"})
    start = int(time.time() * 1000) - len(losses)  # one point a millisecond, up to now
    metrics = [Metric("train/loss", v, start + i, i) for i, v in enumerate(losses)]
    client.log_batch(run.info.run_id, metrics=metrics,
                     params=[Param(k, v) for k, v in params.items()])
    if status:
        client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def _policy(tmp: Path) -> Path:
    return write_policy(
        tmp / "ml.yaml",
        """
        version: 1
        name: ml
        rules:
          - id: loss-bounded
            metric: train/loss
            check: {max: 2.0}
        """,
    )


def _check(tmp: Path, source: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp / "verdict.json"
    proc = gatekeeper("check", source, "-p", str(_policy(tmp)), "--json", str(out), *extra)
    return proc, (json.loads(out.read_text()) if out.exists() else {})


def _result(verdict: dict) -> dict:
    return next(r for r in verdict["results"] if r["rule"] == "loss-bounded")


def test_source_forms() -> None:
    assert parse_spec("mlflow+http://127.0.0.1:5000/runs/abc") == ("http://127.0.0.1:5000", "abc")
    assert parse_spec("mlflow+sqlite:////x/mlflow.db/runs/abc") == ("sqlite:////x/mlflow.db", "abc")
    with pytest.raises(UsageError, match="Databricks"):
        parse_spec("mlflow+databricks://profile/runs/abc")
    with pytest.raises(UsageError, match="expected mlflow"):
        parse_spec("mlflow+http://127.0.0.1:5000/abc")


@pytest.mark.parametrize(("source", "error"), [
    ("mlflow+http://127.0.0.1:99999/runs/abc",
     "MLflow tracking URL 'http://127.0.0.1:99999': Port out of range 0-65535; fix the host "
     "or port"),
    ("mlflow+http://u:s3cret@[::1/runs/abc",
     "MLflow tracking URL 'http://[::1': Invalid IPv6 URL; fix the host or port"),
    ("mlflow+http://u:s3cret@127.0.0.1:5000/abc",
     "source 'mlflow+http://127.0.0.1:5000/abc': expected mlflow+http://HOST:PORT/runs/RUN_ID, "
     "mlflow+file:///PATH/mlruns/runs/RUN_ID or mlflow+sqlite:///PATH/mlflow.db/runs/RUN_ID"),
])
def test_a_malformed_server_url_is_exit_2_without_its_password(
    tmp_path: Path, source: str, error: str
) -> None:
    """A port past 65535 or a broken IPv6 host was exit 70 (a ValueError reading the
    port); a message quoting the source showed its user:password@."""
    proc, _ = _check(tmp_path, source)
    assert proc.returncode == 2 and proc.stderr.strip() == f"gatekeeper: error: {error}", (
        proc.stderr)


def test_server_run_healthy_passes_broken_fails_at_its_step(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    client = mlflow_server.client()
    good = _log_run(client, "verdicts", [1.0, 0.5, 0.25], lora_rank="8")
    bad = _log_run(client, "verdicts", [1.0, 0.5, 7.5, 0.2])
    proc, verdict = _check(tmp_path, f"mlflow+{mlflow_server.url}/runs/{good}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert verdict["run"]["state"] == "finished" and verdict["run"]["name"] == "grpo-7b"
    proc, verdict = _check(tmp_path, f"mlflow+{mlflow_server.url}/runs/{bad}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    res = _result(verdict)
    assert res["status"] == "fail" and res["step"] == 2 and res["value"] == 7.5
    run = open_source(f"mlflow+{mlflow_server.url}/runs/{good}").read()
    assert run.config == {"lora_rank": 8} and "team:rl" in run.tags


def test_nan_is_an_error_at_its_step_and_failed_status_is_the_run_state(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    rid = _log_run(mlflow_server.client(), "nan", [1.0, float("nan"), 0.2], status="FAILED")
    proc, verdict = _check(tmp_path, f"mlflow+{mlflow_server.url}/runs/{rid}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    res = _result(verdict)
    assert res["status"] == "error" and res["step"] == 1
    assert verdict["run"]["state"] == "failed"


def test_a_failed_or_still_running_run_cannot_pass_on_healthy_data(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    """MLflow records how a run ends: FAILED/KILLED are the run-state ERROR, and a RUNNING
    run judged as final is incomplete — each relaxable with --allow-state and a reason."""
    client = mlflow_server.client()
    for status, state in (("FAILED", "failed"), ("KILLED", "killed"), (None, "running")):
        rid = _log_run(client, f"state-{state}", [1.0, 0.5, 0.25], status=status)
        source = f"mlflow+{mlflow_server.url}/runs/{rid}"
        proc, verdict = _check(tmp_path, source)
        assert proc.returncode == 1, (state, proc.stdout + proc.stderr)
        assert _result(verdict)["status"] == "pass"
        ended = next(r for r in verdict["results"] if r["rule"] == "run-state")
        assert ended["status"] == "error" and state in ended["message"], ended
        proc, _ = _check(tmp_path, source, "--allow-state", f"{state}:known flaky node")
        assert proc.returncode == 0, (state, proc.stdout + proc.stderr)


def test_local_sqlite_store_and_file_store_read_the_same_run(
    mlflow_server: MlflowServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 file stores: opt-in

    rid = _log_run(mlflow_server.client(), "local", [1.0, 0.5, 0.25])
    run = open_source(f"mlflow+sqlite:///{mlflow_server.db}/runs/{rid}").read()
    assert run.series["train/loss"].values.tolist() == [1.0, 0.5, 0.25]
    store = f"file://{tmp_path / 'mlruns'}"
    frid = _log_run(MlflowClient(store), "files", [0.5, 9.0], status="KILLED")
    run = open_source(f"mlflow+{store}/runs/{frid}").read()
    assert run.series["train/loss"].steps.tolist() == [0, 1]
    assert run.state.value == "killed"


def test_poll_costs_one_request_per_metric_and_reads_only_new_points(
    mlflow_server: MlflowServer,
) -> None:
    client = mlflow_server.client()
    rid = _log_run(client, "polls", [1.0] * 7000, status=None)  # two history pages
    client.log_metric(rid, "train/kl", 0.0, step=0)
    src = open_live_source(f"mlflow+{mlflow_server.url}/runs/{rid}")
    assert isinstance(src, MlflowSource)
    first = src.poll()
    assert len(first.series["train/loss"]) == 7000 and first.points == 7001
    before = src.client.requests
    assert src.poll().points == 0
    # the run + the page each metric's cursor stands in: a point below a metric's highest
    # step does not move its latest value, so every metric is asked (mlflow 3.17.2)
    assert src.client.requests - before == 3
    client.log_metric(rid, "train/loss", 0.5, step=7000)
    before = src.client.requests
    poll = src.poll()
    assert poll.series["train/loss"].steps.tolist() == [7000] and poll.points == 1
    assert src.client.requests - before == 3
    client.set_terminated(rid, "FINISHED")
    assert src.poll().ended


def test_annotate_sets_gate_tags_and_the_verdict_artifact(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    client = mlflow_server.client()
    rid = _log_run(client, "annotate", [1.0, 9.0])
    proc, _ = _check(tmp_path, f"mlflow+{mlflow_server.url}/runs/{rid}", "--annotate")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    tags = client.get_run(rid).data.tags
    assert tags["gate"] == "fail" and tags["gatekeeper.status"] == "fail"
    assert json.loads(tags["gatekeeper.failing_rules"]) == ["ml/loss-bounded"]
    local = client.download_artifacts(rid, "gatekeeper-verdict.json", str(tmp_path))
    assert json.loads(Path(local).read_text())["status"] == "fail"


def test_run_stops_when_a_bad_point_is_logged(mlflow_server: MlflowServer, tmp_path: Path) -> None:
    client = mlflow_server.client()
    exp = client.create_experiment("live")
    rid = client.create_run(exp, run_name="live").info.run_id
    out = tmp_path / "v.json"
    proc = gatekeeper(
        "run", "-p", str(_policy(tmp_path)), "--source", f"mlflow+{mlflow_server.url}/runs/{rid}",
        "--json", str(out), "--interval", "0.2", "--progress-every", "1", "--grace", "5",
        "--", sys.executable, WRITER, mlflow_server.url, rid, "--steps", "300", "--delay", "0.05",
        "--bad-at", "5",
        timeout=240,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # the family's name and the source, not the kind's help text
    assert f"gatekeeper: following mlflow mlflow+{mlflow_server.url}/runs/{rid}\n" in proc.stdout
    stopped = json.loads(out.read_text())["stopped"]
    assert stopped["rule"] == "ml/loss-bounded" and stopped["step"] == 5
    history = client.get_metric_history(rid, "train/loss")
    assert len(history) < 300


def test_daemon_discovery_lists_running_runs_with_the_tags(mlflow_server: MlflowServer) -> None:
    from gatekeeper.sources.mlflow.discover import MlflowFilter

    client = mlflow_server.client()
    running = _log_run(client, "discover", [1.0], status=None)
    _log_run(client, "discover", [1.0])  # finished: not listed
    other = client.create_run(client.get_experiment_by_name("discover").experiment_id,
                              tags={"team": "vision"})
    found = MlflowFilter(
        tracking_uri=mlflow_server.url, experiments=["discover"], tags={"team": "rl"}
    ).runs()
    assert found == [f"mlflow+{mlflow_server.url}/runs/{running}"]
    assert other.info.run_id not in "".join(found)


def test_experiment_poll_costs_one_search_plus_one_request_per_metric(
    mlflow_server: MlflowServer,
) -> None:
    from gatekeeper.sources.mlflow.experiment import ExperimentPoller

    client = mlflow_server.client()
    ids = [_log_run(client, "fleet", [1.0, 0.5], status=None) for _ in range(12)]
    exp = client.get_experiment_by_name("fleet").experiment_id
    poller = ExperimentPoller(mlflow_server.url, [exp])
    first = poller.poll()
    assert len(first) == 12 and sum(p.points for p in first.values()) == 24
    before = poller.client.requests
    assert sum(p.points for p in poller.poll().values()) == 0
    assert poller.client.requests - before == 1 + 12  # one run search, a page per metric
    client.log_metric(ids[3], "train/loss", 9.0, step=1)  # at a step already logged
    before = poller.client.requests
    polls = poller.poll()
    assert poller.client.requests - before == 1 + 12
    changed = {k: p for k, p in polls.items() if p.points}
    assert list(changed) == [f"mlflow+{mlflow_server.url}/runs/{ids[3]}"]
    assert changed[list(changed)[0]].series["train/loss"].values.tolist() == [9.0]


def test_credentials_never_reach_a_message(monkeypatch: pytest.MonkeyPatch) -> None:
    from gatekeeper.errors import SourceError
    from tests.daemon.harness import free_port

    monkeypatch.setenv("GATEKEEPER_MLFLOW_RETRY_SECONDS", "1")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok-s3cr3t")
    src = open_source(f"mlflow+http://bob:pa55word@127.0.0.1:{free_port()}/runs/abc")
    with pytest.raises(SourceError) as err:
        src.read()
    text = str(err.value)
    assert "127.0.0.1" in text and "pa55word" not in text and "s3cr3t" not in text
    assert "bob" not in text


def test_daemon_watches_the_running_runs_of_an_experiment_until_they_end(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    from gatekeeper.daemon.config import load_config
    from gatekeeper.daemon.service import Daemon
    from tests.daemon.harness import free_port

    client = mlflow_server.client()
    rid = _log_run(client, "watched", [1.0, 0.5, 8.0], status=None)
    _policy(tmp_path)
    (tmp_path / "gk.yaml").write_text(json.dumps({
        "state": "state.db", "http": {"port": free_port()},
        "poll": {"interval": 0.3, "jitter": 0, "timeout": 20, "discovery_interval": 0.5},
        "targets": [{"mlflow": {"tracking_uri": mlflow_server.url, "experiments": ["watched"],
                                "tags": {"team": "rl"}}, "policies": ["ml.yaml"]}],
    }))
    daemon = Daemon(load_config(str(tmp_path / "gk.yaml")))
    key = f"mlflow+{mlflow_server.url}/runs/{rid}"
    daemon.start()
    watchers = lambda: {w.key: w for w in daemon.scheduler.snapshot()}  # noqa: E731
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            key not in watchers() or watchers()[key].status != "fail"
        ):
            time.sleep(0.2)
        assert watchers()[key].status == "fail" and watchers()[key].points == 3
        client.set_terminated(rid, "FINISHED")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not watchers()[key].ended:
            time.sleep(0.2)
        assert watchers()[key].ended
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def empty_sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sqlite store as mlflow's client creates it, no run in it yet: its schema
    migrations take ~3 s, so each test gets a byte copy (a store that existed before)."""
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("sqlite-store") / "mlflow.db"
    MlflowClient(f"sqlite:///{db}").search_experiments()
    return db


def _store(
    store: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> str:
    """The tracking URI of a fresh store of that kind (the server is the session's)."""
    import shutil

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    if store == "server":
        return str(request.getfixturevalue("mlflow_server").url)
    if store == "file":
        return f"file://{tmp_path / 'mlruns'}"
    db = shutil.copy(request.getfixturevalue("empty_sqlite_store"), tmp_path / "mlflow.db")
    return f"sqlite:///{db}"


@pytest.mark.parametrize("store", ["file", "sqlite", "server"])
def test_an_infinite_loss_is_non_finite_in_every_store_whole_and_live(
    store: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQL cannot hold an infinity: mlflow 3.17.2's SQL stores (sqlite, and a server with a
    SQL backend) keep +/-Inf as +/-1.7976931348623157e308 (`SqlAlchemyStore.
    sanitize_metric_value`); the file store keeps `inf`. Read what the store means: a loss
    logged as Inf is a non-finite ERROR in every store, by `check` and by `watch`."""
    from mlflow.tracking import MlflowClient

    inf = float("inf")
    uri = _store(store, tmp_path, request, monkeypatch)
    client = MlflowClient(uri)
    rid = _log_run(client, "infinite", [1.0, inf, 0.5, -inf])
    kept = [m.value for m in client.get_metric_history(rid, "train/loss")]
    clamp = 1.7976931348623157e308
    assert kept == ([1.0, inf, 0.5, -inf] if store == "file" else [1.0, clamp, 0.5, -clamp])
    source = f"mlflow+{uri}/runs/{rid}"
    assert open_source(source).read().series["train/loss"].values.tolist() == [
        1.0, inf, 0.5, -inf
    ]
    policy = write_policy(tmp_path / "finite.yaml", """
        version: 1
        name: ml
        rules:
          - id: loss-finite
            metric: train/loss
            check: {finite: true}
        """)
    for command in ("check", "watch"):
        out = tmp_path / f"{command}.json"
        live = ("--interval", "0.2") if command == "watch" else ()
        proc = gatekeeper(command, source, "-p", str(policy), "--json", str(out), *live)
        assert proc.returncode == 1, (command, proc.stdout + proc.stderr)
        res = next(r for r in json.loads(out.read_text())["results"] if r["rule"] == "loss-finite")
        assert res["status"] == "error" and res["step"] == 1, (command, res)


@pytest.fixture(scope="module")
def file_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """One run written to a file store by the real mlflow client: (store, experiment, run)."""
    import os

    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    root = tmp_path_factory.mktemp("filestore") / "mlruns"
    client = MlflowClient(f"file://{root}")
    rid = _log_run(client, "damaged", [1.0, 0.5, 0.25], lr="0.1")
    return root, client.get_run(rid).info.experiment_id, rid


def _damage(path: Path, how: str) -> None:
    import os

    if how == "fifo":
        path.unlink(missing_ok=True)
        os.mkfifo(path)
    elif how == "zero":
        path.unlink()
        path.symlink_to("/dev/zero")
    elif how == "empty":
        path.write_bytes(b"")
    else:
        text = path.read_bytes()
        path.write_bytes(
            text.replace(b"status: 3", b"status: -1") if how == "status" else text + how.encode(
                "latin-1"
            )
        )


# (damage, the file it is done to, the line named, words the one error line holds)
DAMAGE = [
    ("fractional step", "metrics/train/loss", "1003 0.2 1.5\n", 4, "TIMESTAMP VALUE STEP"),
    ("non-UTF-8 metric", "metrics/train/loss", "1003 0.2 \xff\n", 4, "not UTF-8"),
    ("step past int64", "metrics/train/loss", "1003 0.2 9223372036854775808\n", 4, "int64"),
    ("two fields too many", "metrics/train/loss", "1 2 3 4\n", 4, "TIMESTAMP VALUE STEP"),
    ("empty metric file", "metrics/train/loss", "empty", None, "holds no points"),
    ("FIFO metric file", "metrics/train/loss", "fifo", None, "is a FIFO"),
    ("metric linked to /dev/zero", "metrics/train/loss", "zero", None, "is a device"),
    ("bad meta.yaml", "meta.yaml", "status: [\n", None, "mlflow cannot read"),
    ("status -1", "meta.yaml", "status", None, "run status -1"),
    ("empty meta.yaml", "meta.yaml", "empty", None, "mlflow cannot read"),
    # YAML keeps the last of a repeated key: a string where mlflow's RunInfo needs an int
    ("end_time not a number", "meta.yaml", "end_time: soon\n", None, "mlflow cannot read"),
    ("non-UTF-8 param", "params/lr", "\xff", None, "utf-8"),
    ("FIFO tag", "tags/team", "fifo", None, "is a FIFO"),
]


@pytest.mark.parametrize(("damage", "rel", "how", "line", "words"), DAMAGE,
                         ids=[d[0] for d in DAMAGE])
def test_a_damaged_file_store_is_exit_2_naming_the_file_whole_and_live(
    file_store: tuple[Path, str, str], tmp_path: Path, damage: str, rel: str, how: str,
    line: int | None, words: str,
) -> None:
    """mlflow 3.17.2's FileStore opens every file with a plain open() and reads it whole;
    gatekeeper checks each file it will read (regular, bounded) and names the file (and
    the line) mlflow's reader fails on: exit 2, one line, never 70 or a hang. A file that
    could block a reader (a FIFO, a device) is read by a child process under a timeout;
    the rest through the CLI's entry in this process (each child pays mlflow's 2.4 s
    import; tests/fuzz/test_fuzz_mlflow.py mutates the same files at random)."""
    import shutil

    template, exp, rid = file_store
    root = tmp_path / "mlruns"
    shutil.copytree(template, root, symlinks=True)
    target = root / exp / rid / rel
    _damage(target, how)
    source = f"mlflow+file://{root}/runs/{rid}"
    could_block = how in ("fifo", "zero")
    for command in ("check", "watch"):
        live = ("--interval", "0.2") if command == "watch" else ()
        args = (command, source, "-p", str(_policy(tmp_path)), *live)
        proc = gatekeeper(*args, timeout=60) if could_block else gatekeeper_in_process(*args)
        assert proc.returncode == 2, (command, proc.stdout + proc.stderr)
        error = proc.stderr.strip().splitlines()[-1]
        where = f"{target}:{line}: " if line else f"{target}: "
        assert error.startswith(f"gatekeeper: error: {where}"), (command, error)
        assert words in error and "repair the file or remove it" in error, (command, error)


@pytest.mark.parametrize("sql", [
    "UPDATE runs SET start_time = 'soon'",
    "UPDATE latest_metrics SET step = 'a'",
    "UPDATE metrics SET timestamp = 't'",
])
def test_a_sqlite_store_holding_a_text_where_a_number_goes_is_exit_2_whole_and_live(
    sql: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mlflow 3.17.2's SQL store hands back what sqlite holds, and sqlite keeps a text in
    an INTEGER column: the conversion of the run (`to_proto`) or of its points failed with
    a TypeError, exit 70. It is the store's damage: exit 2, one line naming the store."""
    from mlflow.tracking import MlflowClient

    uri = _store("sqlite", tmp_path, request, monkeypatch)
    rid = _log_run(MlflowClient(uri), "typed", [1.0, 0.5, 0.25])
    with sqlite3.connect(uri.removeprefix("sqlite:///")) as con:
        con.execute(sql)
    source = f"mlflow+{uri}/runs/{rid}"
    for command in ("check", "watch"):
        live = ("--interval", "0.2") if command == "watch" else ()
        proc = gatekeeper_in_process(command, source, "-p", str(_policy(tmp_path)), *live)
        assert proc.returncode == 2, (command, proc.stdout + proc.stderr)
        (error,) = proc.stderr.strip().splitlines()
        assert error.startswith(f"gatekeeper: error: {uri}: ") and "wrong type" in error, error


GOOD_RUN = {"run": {"info": {"run_id": "r1", "status": "FINISHED", "start_time": 1},
                    "data": {"metrics": [{"key": "train/loss", "value": 0.5, "step": 0,
                                          "timestamp": 1}]}}}
ANSWERS = {  # a server that answers JSON, but not MLflow's: (runs/get, metrics/get-history)
    "run a string": ({"run": "x"}, None),
    "start_time a word": ({"run": {"info": {"run_id": "r1", "start_time": "soon"}}}, None),
    "a tag without key": ({"run": {"data": {"tags": [{"value": "1"}]}}}, None),
    "a step a word": (GOOD_RUN, {"metrics": [{"key": "train/loss", "step": "a", "value": 1}]}),
    "metrics a mapping": (GOOD_RUN, {"metrics": {"step": 1}}),
}


@pytest.mark.parametrize("answer", sorted(ANSWERS))
def test_a_server_answering_json_that_is_not_mlflows_is_exit_2(answer: str, tmp_path: Path) -> None:
    """Any URL may be named: a server whose JSON is not MLflow's shape (another service on
    the port, a proxy's page) was exit 70 (a KeyError or TypeError while decoding). It is
    exit 2, one line naming the server. mlflow 3.17.2's REST answers are the shapes read."""
    run_answer, history = ANSWERS[answer]
    with json_server(lambda path: history if "get-history" in path else run_answer) as base:
        proc = gatekeeper_in_process("check", f"mlflow+{base}/runs/r1", "-p",
                                     str(_policy(tmp_path)))  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (error,) = proc.stderr.strip().splitlines()
    assert error.startswith(f"gatekeeper: error: {base}: "), error
    assert "not what an MLflow tracking server sends" in error, error


def test_a_store_that_is_not_there_or_not_mlflow_is_exit_2_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    """mlflow's FileStore creates a missing root (and the default experiment) and a garbage
    sqlite file raises sqlalchemy's DatabaseError: a read must neither write nor exit 70."""
    missing = tmp_path / "no-such" / "mlruns"
    garbage = tmp_path / "mlflow.db"
    garbage.write_text("not a database\n")
    absent = tmp_path / "absent.db"  # mlflow created it, with its tables (seventeenth session)
    for source, words in (
        (f"mlflow+file://{missing}/runs/abc", "no MLflow file store"),
        (f"mlflow+sqlite:///{garbage}/runs/abc", "cannot open it as an MLflow store"),
        (f"mlflow+sqlite:///{absent}/runs/abc", f"no MLflow store at {absent} (no such file)"),
    ):
        proc, _ = _check(tmp_path, source)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
    assert not missing.parent.exists() and not absent.exists()
    # the store as the source, to follow the next run: what it holds cannot be told
    proc = gatekeeper("watch", f"mlflow+sqlite:///{garbage}", "-p", str(_policy(tmp_path)),
                      "--interval", "0.2", timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"gatekeeper: error: {garbage}: cannot tell which runs"), \
        proc.stderr
    assert proc.stderr.count("\n") == 1 and "not a database" in proc.stderr, proc.stderr


def _run_new(tmp: Path, source: str, uri: str, *writer: str) -> tuple[
    subprocess.CompletedProcess[str], dict, str
]:
    """`gatekeeper run --source STORE -- CMD`, CMD creating its run with the mlflow client."""
    out, ids = tmp / "v.json", tmp / "run_id"
    ids.unlink(missing_ok=True)
    proc = gatekeeper(
        "run", "-p", str(_policy(tmp)), "--source", source, "--json", str(out),
        "--interval", "0.2", "--progress-every", "1", "--grace", "5",
        "--", sys.executable, WRITER, uri, "new", "--id-file", str(ids), *writer,
        env={"MLFLOW_ALLOW_FILE_STORE": "true"}, timeout=240,
    )
    return proc, json.loads(out.read_text()), ids.read_text()


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_run_follows_the_run_cmd_creates_in_a_store_created_after_the_watch_began(
    kind: str, tmp_path: Path
) -> None:
    # the store does not exist when the watch begins: CMD's mlflow client creates it; a
    # file store named as a plain `mlruns/` folder, a sqlite one by its URI
    store = tmp_path / ("mlruns" if kind == "file" else "mlflow.db")
    uri = f"file://{store}" if kind == "file" else f"sqlite:///{store}"
    proc, verdict, rid = _run_new(
        tmp_path, str(store) if kind == "file" else f"mlflow+{uri}", uri, "--wait", "0.5",
        "--steps", "300", "--delay", "0.05", "--bad-at", "5",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"following mlflow run cmd-run (created after the watch began, experiment 0): " \
        f"mlflow+{uri}/runs/{rid}" in proc.stdout
    assert verdict["stopped"]["rule"] == "ml/loss-bounded" and verdict["stopped"]["step"] == 5
    assert verdict["run"]["source"] == f"mlflow+{uri}/runs/{rid}"

    # the store now holds that broken run: a healthy re-run follows its own run, not it;
    # a sqlite store as a writer killed inside a transaction leaves it, locked as the
    # re-run begins
    killed = _killed_inside_a_transaction(store, hold=3.0) if kind == "sqlite" else None
    proc, verdict, new = _run_new(
        tmp_path, f"mlflow+{uri}", uri, "--steps", "20", "--delay", "0.02"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 earlier run(s) there are not followed" in proc.stdout
    assert new != rid and f"/runs/{new}" in proc.stdout and verdict["status"] == "pass"
    if killed is not None:
        assert killed.wait(30) == -9  # it died holding the transaction, which was undone:
        with sqlite3.connect(store) as db:
            assert db.execute("SELECT name FROM sqlite_master WHERE name = 'gk_scratch'"
                              ).fetchone() is None


KILLED_WRITER = """
import os, signal, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA cache_size = 10")  # its pages spill into the file: the journal is hot
db.execute("BEGIN IMMEDIATE")
db.execute("CREATE TABLE gk_scratch (x)")
db.executemany("INSERT INTO gk_scratch VALUES (?)", (("x" * 200,) for _ in range(20000)))
print("inside", flush=True)
time.sleep(float(sys.argv[2]))
os.kill(os.getpid(), signal.SIGKILL)
"""


def _killed_inside_a_transaction(db: Path, hold: float) -> subprocess.Popen[str]:
    """A writer of the sqlite store that holds it locked for `hold` seconds, then is
    killed inside its transaction: the file is left with a hot journal, which a
    read-only connection cannot read ("attempt to write a readonly database") and a
    read-write one rolls back (SQLite 3.x; mlflow 3.17.2's SQL store leaves the same when
    the trainer is killed mid-commit, as `run` does to a failing one). Taken for an empty
    store, its runs all looked new and the earlier broken one was followed."""
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(db), str(hold)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "inside"
    return proc


def test_run_follows_the_new_run_on_a_tracking_server(
    mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    _log_run(mlflow_server.client(), "older", [9.0])  # an earlier broken run on the server
    proc, verdict, rid = _run_new(
        tmp_path, f"mlflow+{mlflow_server.url}", mlflow_server.url, "--steps", "300",
        "--delay", "0.05", "--bad-at", "5",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"mlflow+{mlflow_server.url}/runs/{rid}" in proc.stdout
    assert verdict["stopped"]["step"] == 5


def test_a_store_without_a_run_id_is_refused_by_check(tmp_path: Path) -> None:
    proc, _ = _check(tmp_path, f"mlflow+file://{tmp_path}/mlruns")
    assert proc.returncode == 2 and "runs/RUN_ID" in proc.stderr, proc.stderr


RESUMES = [("file", "env"), ("sqlite", "arg"), ("server", "env")]
FIRST_POLL = "] 70 points (train/loss step 69)"  # the progress line of the first poll


def _after_first_poll(args: list[str], env: dict[str, str], go: Path) -> tuple[int, str]:
    """`gatekeeper ARGS` in a child; `go` is created once it prints FIRST_POLL (the
    resuming trainer waits for that file): its exit code and output."""
    env = {k: v for k, v in env.items() if not k.startswith("GITHUB_")}  # as gatekeeper()
    proc = subprocess.Popen([sys.executable, "-m", "gatekeeper", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if FIRST_POLL in line:
                go.touch()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(240)
    finally:
        proc.kill()
    reader.join(10)
    said = "".join(lines)
    assert go.exists(), f"no first poll of the 70 steps:\n{said}"
    return code, said


@pytest.mark.parametrize(("store", "by"), RESUMES)
def test_a_resumed_run_logging_below_its_old_maximum_step_fails_live_as_it_does_whole(
    store: str, by: str, tmp_path: Path, request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """mlflow 3.17.2: a run killed at step 69 and resumed (`MLFLOW_RUN_ID`, or
    `mlflow.start_run(run_id=...)`) logs 5.0 at step 55. The run's latest `train/loss` stays
    step 69's (MLflow's latest is the highest step), so a poll that skips a metric whose
    latest did not move never reads step 55: `run` passed while `check` failed."""
    from mlflow.tracking import MlflowClient

    uri = _store(store, tmp_path, request, monkeypatch)
    rid = _log_run(MlflowClient(uri), "resumed", [1 / (i + 1) for i in range(70)], "KILLED")
    source = f"mlflow+{uri}/runs/{rid}"
    env = {"MLFLOW_TRACKING_URI": uri, "MLFLOW_ALLOW_FILE_STORE": "true"}
    if by == "env":
        env["MLFLOW_RUN_ID"] = rid
    out, go = tmp_path / "run.json", tmp_path / "go"
    # the resume waits until a poll has read steps 0..69, then logs step 55
    code, said = _after_first_poll(
        ["run", "-p", str(_policy(tmp_path)), "--source", source, "--json", str(out),
         "--interval", "0.2", "--", sys.executable, RESUME, "--go", str(go), "--by", by,
         *(("--run-id", rid) if by == "arg" else ())], {**os.environ, **env}, go,
    )  # fmt: skip
    assert code == 1, said
    live = _result(json.loads(out.read_text()))
    proc, whole = _check(tmp_path, source)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert live["status"] == _result(whole)["status"] == "fail"
    assert live["step"] == _result(whole)["step"] == 55


@pytest.mark.parametrize("store", ["file", "server"])
def test_watch_of_a_run_resumed_below_its_old_maximum_step_exits_1(
    store: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mlflow 3.17.2: `watch` follows a run left RUNNING at step 69 (its job died); the
    restarted job resumes it with MLFLOW_RUN_ID and logs 5.0 at step 55: exit 1 at 55."""
    from mlflow.tracking import MlflowClient

    uri = _store(store, tmp_path, request, monkeypatch)
    rid = _log_run(MlflowClient(uri), "resumed-w", [1 / (i + 1) for i in range(70)], None)
    out, go = tmp_path / "watch.json", tmp_path / "go"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "MLFLOW_RUN_ID": rid,
           "MLFLOW_ALLOW_FILE_STORE": "true"}
    # the restarted job starts with the watch and logs once the watch has read steps 0..69
    resume = subprocess.Popen([sys.executable, RESUME, "--go", str(go)], env=env)
    try:
        code, said = _after_first_poll(
            ["watch", f"mlflow+{uri}/runs/{rid}", "-p", str(_policy(tmp_path)), "--json",
             str(out), "--interval", "0.2"], env, go,
        )  # fmt: skip
        assert resume.wait(120) == 0
    finally:
        resume.kill()
    assert code == 1, said
    res = _result(json.loads(out.read_text()))
    assert res["status"] == "fail" and res["step"] == 55, res


@pytest.mark.parametrize("store", ["file", "sqlite", "server"])
def test_each_poll_reads_every_point_logged_since_the_last_in_any_step_or_time_order(
    store: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mlflow 3.17.2 keeps a file store's history as appended and a SQL store's (a server's)
    by (timestamp, step, value). A point at a later step comes in the next poll, read from
    the cursor (one history page per metric). A point below a step read already (a
    resumed run) is found from the cursor too, and `check` sorts it among those points,
    so that poll re-reads the run whole (`reset`; before the fourteenth session it was
    judged after them); so does a point logged with an older timestamp, which lands
    mid-history in a SQL store. Either way the points polled are the points `check`
    reads, in its order."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    uri = _store(store, tmp_path, request, monkeypatch)
    client = MlflowClient(uri)
    rid = _log_run(client, "orders", [1.0] * 70, status=None)
    src = open_live_source(f"mlflow+{uri}/runs/{rid}")
    assert isinstance(src, MlflowSource) and src.poll().points == 70
    client.log_metric(rid, "train/loss", 1.0, step=70)  # the next step: from the cursor
    before = src.client.requests
    poll = src.poll()
    assert poll.series["train/loss"].steps.tolist() == [70] and not poll.reset
    assert src.client.requests - before == 2  # the run + one history page
    client.log_metric(rid, "train/loss", 5.0, step=55)  # a resumed run: lower step, now
    poll = src.poll()
    assert poll.reset and poll.series["train/loss"].steps.tolist() == sorted([*range(71), 55])
    assert poll.series["train/loss"].values.tolist()[55:57] == [1.0, 5.0]  # as check: by step
    early = Metric("train/loss", 7.0, 1, 56)  # timestamp 1 ms after the epoch
    client.log_batch(rid, metrics=[early])
    poll = src.poll()
    expect = sorted([*range(71), 55, 56])
    assert poll.reset and poll.series["train/loss"].steps.tolist() == expect
    assert src.poll().points == 0
    assert src.read().series["train/loss"].steps.tolist() == expect


def test_a_poll_with_the_run_read_before_its_newest_points_stays_in_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The flaky "a point was logged with a timestamp older than points already read" on a
    healthy sqlite run: a poll reads the run (its latest points), the trainer logs more,
    then the poll reads the history, newer than the run it read. The next poll found its
    latest point among those already read and took it for a shifted history."""
    from mlflow.tracking import MlflowClient

    uri = _store("sqlite", tmp_path, request, monkeypatch)
    client = MlflowClient(uri)
    rid = _log_run(client, "race", [1.0] * 5, status=None)
    src = open_live_source(f"mlflow+{uri}/runs/{rid}")
    assert isinstance(src, MlflowSource)
    info = src.client.get_run(rid)  # the run as the poll read it...
    for step in range(5, 10):  # ...and the points logged before it read the history
        client.log_metric(rid, "train/loss", 1.0, step=step)
    assert src.poll_info(info).points == 10
    quiet = src.poll()
    assert quiet.points == 0 and not quiet.reset
    client.log_metric(rid, "train/loss", 9.0, step=10)
    assert src.poll().series["train/loss"].values.tolist() == [9.0]


def test_a_saved_cursor_of_the_older_layout_re_reads_the_run_once_as_a_reset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon upgraded over a version-1 cursor (each metric's latest point) re-reads
    the run whole, flagged as a reset, then polls on; a cursor of an unknown version is
    still refused (mlflow 3.17.2 file store)."""
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    store = f"file://{tmp_path / 'mlruns'}"
    client = MlflowClient(store)
    rid = _log_run(client, "upgrade", [1.0, 0.5, 0.25], status=None)
    src = open_live_source(f"mlflow+{store}/runs/{rid}")
    src.restore({"version": 1, "latest": {"train/loss": [2, 0.25]}})
    first = src.poll()
    assert first.reset and first.series["train/loss"].values.tolist() == [1.0, 0.5, 0.25]
    client.log_metric(rid, "train/loss", 9.0, step=3)  # after the highest step
    second = src.poll()
    assert not second.reset and second.series["train/loss"].values.tolist() == [9.0]
    fresh = open_live_source(f"mlflow+{store}/runs/{rid}")
    with pytest.raises(SourceError, match="saved cursor version 99"):
        fresh.restore({"version": 99})


ORDER_POLICY = """
version: 1
name: ml
rules:
  - {id: high, metric: "*", check: {max: 1.0}, for: 2}
  - {id: loss-spike, metric: loss, check: {spike: {window: 3, factor: 2}}}
  - {id: loss-last, metric: loss, steps: last, check: {min: 0.0}}
"""


@pytest.mark.parametrize("store", ["file", "sqlite"])
def test_random_runs_polled_as_logged_are_judged_as_check_judges_them(
    store: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mlflow 3.17.2's client logs random runs (steps that repeat and now and then go
    back, as a resume below the old maximum does; NaN; a second metric), polled after
    each batch of log calls, the cursor restored into a new source at random: the
    session fed the polls ends on `check`'s verdict. Before the fourteenth session a
    point below a step delivered was judged after it, while `check` sorts by step (17
    of 30 such runs differed in a file store, 22 of 40 in sqlite)."""
    import random

    from mlflow.tracking import MlflowClient

    from gatekeeper.policy.loader import load_policies
    from gatekeeper.session import JudgingSession, judge_whole

    policies = load_policies([str(write_policy(tmp_path / "order.yaml", ORDER_POLICY))])
    client = MlflowClient(_store(store, tmp_path, request, monkeypatch))
    experiment = client.create_experiment("order")
    for seed in range(12):
        r = random.Random(seed)
        rid = client.create_run(experiment).info.run_id
        spec = f"mlflow+{client.tracking_uri}/runs/{rid}"
        source, session = open_live_source(spec), JudgingSession(policies, live=True)
        step = ts = 0
        for _ in range(r.randint(3, 12)):
            for _ in range(r.randint(1, 4)):
                step = max(0, step + (r.choice([1, 1, 2, 0]) if r.random() > 0.12
                                      else -r.randint(1, 3)))
                ts += 1000
                value = r.choice([0.5, 1.5, 0.2, float("nan"), 0.9, 3.0, r.uniform(0, 1.2)])
                client.log_metric(rid, "loss", value, timestamp=ts, step=step)
                if r.random() < 0.4:
                    client.log_metric(rid, "kl", r.uniform(0, 1.2), timestamp=ts, step=step)
            if r.random() < 0.3:  # a restart: a new source from the cursor saved as JSON
                cursor = json.loads(json.dumps(source.cursor()))
                source = open_live_source(spec)
                source.restore(cursor)
            poll = source.poll()
            session.feed(poll.series, poll.run, reset=poll.reset)
        client.set_terminated(rid)
        poll = source.poll()
        session.feed(poll.series, poll.run, reset=poll.reset)
        polled = [(x.rule, x.status, x.message, x.step)
                  for x in session.verdict(final=True).results]
        checked = [(x.rule, x.status, x.message, x.step)
                   for x in judge_whole(policies, open_source(spec).read())[1].results]
        assert polled == checked, seed


def test_a_param_logged_late_that_changes_a_period_is_judged_live_as_check_judges_it(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mlflow 3.17.2 (a param may be logged at any time, once): `steps: {every: config.k,
    default: 2}` is judged live by the default on steps 0..9 (9.0 at step 4: FAIL); then
    the run logs param k=3 and steps 10..19. `check` selects every third step and passes;
    the live gate reads the run again from its start and says the same (it went on with
    the old period, and failed)."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    import gatekeeper
    from gatekeeper.live.gate import LiveGate
    from gatekeeper.policy.loader import load_policies

    uri = _store("file", tmp_path, request, monkeypatch)
    rid = _log_run(MlflowClient(uri), "late", [9.0 if i == 4 else 1.0 for i in range(10)], None)
    policy = write_policy(tmp_path / "p.yaml", "version: 1\nname: p\nrules:\n  - {id: r, "
                          "metric: train/loss, check: {max: 5}, steps: {every: config.k, "
                          "default: 2}}\n")
    source = f"mlflow+{uri}/runs/{rid}"
    gate = LiveGate(open_live_source(source), load_policies([str(policy)]), started=0.0)
    (first,) = gate.poll(1.0).verdict.results[:1]
    assert (first.status.value, first.step) == ("fail", 4)
    client, now = MlflowClient(uri), int(time.time() * 1000)
    client.log_param(rid, "k", "3")
    client.log_batch(rid, metrics=[Metric("train/loss", 1.0, now + i, i) for i in range(10, 20)])
    client.set_terminated(rid, "FINISHED")
    tick = gate.poll(2.0)
    (live,) = tick.verdict.results[:1]
    (whole,) = gatekeeper.check(source, [str(policy)]).results[:1]
    assert tick.ended and (live.status.value, live.message) == ("pass", whole.message)
    assert whole.judged == live.judged == 7  # steps 0, 3, .., 18
