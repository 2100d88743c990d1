"""Replicas of `gatekeeper serve` on one PostgreSQL state, as child processes: the
scenario of issue 28's "Done when", one implementation for the CI test
(tests/daemon/test_replicas.py, a few hundred runs) and the bench that repeats it
(bench/bench_replicas.py).

What it does, on N JSONL runs written step by step:

1. start the replicas together; wait until every run is listed by exactly one (in
   `/api/runs`, and in the `/metrics` of that replica alone, which names itself in
   `gatekeeper_replica_info`);
2. one new step everywhere, a bad point on one run: it alerts once;
3. `kill -9` one replica, then one new step everywhere with a bad point on one of the
   killed replica's runs: the others poll its runs again (takeover time measured), the
   bad point alerts once;
4. stop every replica and start them again: no verdict lost; one more step everywhere
   is counted once and nothing is sent twice.

What "polled by exactly one replica" is checked against, besides `/api/runs`: a
trigger that the scenario puts on `gkd_runs` records every committed poll with the
replica whose connection committed it (`gatekeeper.replica`, set per connection by
the daemon) and the points before and after. Each phase writes one step per run, so
each run must have exactly one commit per phase, by the replica that held it, each
adding points (none re-counted from a stale cursor), and the stored points must equal
what was written.

Nothing here asserts: every check that fails is a line in `ScenarioResult.failures`,
so the bench can count and the test can show them all.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from gatekeeper.daemon.state_postgres import PostgresState
from tests.daemon.harness import POLICY, DaemonProcess, free_port
from tests.daemon.recorder import Recorder
from tests.helpers import wait_until

RULE = "kl-small"
BAD, GOOD = 0.5, 0.001
METRICS = 2  # points per step: train/ppo_kl and train/loss

# Every committed poll, with the committing replica: the scenario's own audit table.
AUDIT = """
CREATE TABLE scenario_commits (
    id BIGSERIAL PRIMARY KEY, run TEXT NOT NULL, replica TEXT,
    at DOUBLE PRECISION NOT NULL, old_points BIGINT, new_points BIGINT NOT NULL);
CREATE FUNCTION scenario_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO scenario_commits (run, replica, at, old_points, new_points) VALUES (
        NEW.key, current_setting('gatekeeper.replica', true),
        extract(epoch from clock_timestamp()),
        CASE WHEN TG_OP = 'UPDATE' THEN OLD.points END, NEW.points);
    RETURN NEW;
END $$;
CREATE TRIGGER scenario_audit AFTER INSERT OR UPDATE OF points ON gkd_runs
    FOR EACH ROW EXECUTE FUNCTION scenario_audit();
"""


class Abort(Exception):
    """A phase did not complete in its time: the scenario stops there."""


@dataclass
class ScenarioResult:
    runs: int
    lease: float
    takeover_s: float | None = None  # kill -9 -> last of the victim's runs committed again
    taken_over: int = 0  # the victim's runs
    alerts: dict[str, int] = field(default_factory=dict)  # "run/rule/state" -> times received
    expected: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0  # alerts received more than once
    lost_verdicts: list[str] = field(default_factory=list)  # after the restart of all
    double_polls: list[str] = field(default_factory=list)  # from the commit audit
    refused_commits: int = 0  # commits the lease fence refused on live replicas (not errors)
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def alerted_once(self) -> bool:
        return bool(self.expected) and self.alerts == self.expected

    def summary(self) -> str:
        took = "n/a" if self.takeover_s is None else f"{self.takeover_s:.2f}s"
        return (
            f"{'ok' if self.ok else 'FAILED'}: {self.runs} runs, takeover of "
            f"{self.taken_over} runs {took} (lease {self.lease:g}s), alerts exactly once "
            f"{self.alerted_once}, lost {len(self.lost_verdicts)}, dup {self.duplicates}, "
            f"double polls {len(self.double_polls)}, refused commits {self.refused_commits}; "
            + " ".join(f"{k} {v:.1f}s" for k, v in self.phases.items())
        )

    def report(self) -> str:
        return "\n".join([self.summary(), *self.failures])


def run_scenario(
    tmp: Path,
    pg_url: str,
    *,
    runs: int = 300,
    lease: float = 4.0,
    replicas: int = 3,
    checkpoint: float = 0.0,
) -> ScenarioResult:
    """Play the scenario in `tmp` on the empty database `pg_url`; never raises for a
    failed check (see ScenarioResult.failures). Daemon logs stay in tmp/replica*/.
    `checkpoint`: the replicas' poll.checkpoint (bench_replicas.py --checkpoint)."""
    sc = Scenario(tmp, pg_url, runs, lease, replicas, checkpoint)
    try:
        sc.play()
    except Abort as exc:
        sc.result.failures.append(f"aborted: {exc}")
    finally:
        sc.close()
    return sc.result


class Scenario:
    def __init__(
        self, tmp: Path, pg_url: str, runs: int, lease: float, replicas: int, checkpoint: float
    ):
        self.tmp, self.url, self.lease = tmp, pg_url, lease
        self.result = ScenarioResult(runs, lease)
        self.hook = Recorder()
        (tmp / "runs").mkdir()
        (tmp / "kl.yaml").write_text(POLICY)
        self.paths = [tmp / "runs" / f"run{i:03d}.jsonl" for i in range(runs)]
        self.names = [p.stem for p in self.paths]
        self.steps = 0
        self.fleet = [
            DaemonProcess(
                replica_config(tmp, i, pg_url, self.hook.url, lease, checkpoint),
                {"GATEKEEPER_REPLICA": f"rep-{i}"},
            )
            for i in range(replicas)
        ]
        self.marks: dict[str, int] = {}  # phase boundary -> last audit id then
        self._clock = time.monotonic()

    # ---- the phases ---------------------------------------------------------------------
    def play(self) -> None:
        install_audit(self.url)
        self.write_step({})  # step 0, before any replica starts
        self.start(self.fleet)
        self.complete("first poll")
        first = self.settle(self.fleet, "balance")
        self.mark("balanced")
        self.write_step({self.names[1]: BAD})
        self.complete("steady")
        self.expect_alert(self.names[1])
        self.mark("killed")
        victim, survivors = self.fleet[1], [r for i, r in enumerate(self.fleet) if i != 1]
        theirs = sorted(n for n, r in first.items() if r == "rep-1")
        bad = next((n for n in theirs if n != self.names[1]), None)
        if bad is None:
            raise Abort(f"the replica to kill holds no run but {self.names[1]}: {theirs}")
        victim.kill9()
        killed = server_now(self.url)
        self.write_step({bad: BAD})  # written during the takeover
        self.complete("takeover", 4 * self.lease + 30)
        self.takeover(theirs, killed)
        relisted = self.settle(survivors, "relist")
        self.expect_alert(bad)
        kept = sorted(n for n in self.names if n not in theirs and relisted[n] != first[n])
        if kept:
            self.result.failures.append(f"takeover: runs of a live replica moved: {kept[:5]}")
        self.restart(first, relisted)

    def restart(self, first: dict[str, str], moved: dict[str, str]) -> None:
        refused = sum(r.metric('gatekeeper_poll_errors_total{kind="lease"}') for r in self.fleet
                      if r.proc is not None and r.proc.poll() is None)  # fmt: skip
        self.result.refused_commits = int(refused)
        before = verdicts(self.url)
        self.mark("stopped")
        self.stop()
        self.start(self.fleet)
        last = self.settle(self.fleet, "restart")
        self.lost(before)
        self.mark("restarted")
        self.write_step({})
        self.complete("after restart")
        time.sleep(1.5)  # room for a duplicate to arrive
        self.alerts()
        self.audit(first, moved, last)

    # ---- steps --------------------------------------------------------------------------
    def write_step(self, values: dict[str, float]) -> None:
        for name, path in zip(self.names, self.paths, strict=True):
            line = {"train/step": self.steps, "train/ppo_kl": values.get(name, GOOD),
                    "train/loss": 1.0}  # fmt: skip
            with open(path, "a") as fh:
                fh.write(json.dumps(line) + "\n")
        self.steps += 1

    def start(self, fleet: list[DaemonProcess]) -> None:
        for r in fleet:
            r.start(wait=False)
        for r in fleet:
            if not r.wait(lambda r=r: r.get("/readyz").status_code == 200, 60):
                raise Abort(f"{r.env['GATEKEEPER_REPLICA']} not ready in 60s:\n{r.tail()}")

    def settle(self, fleet: list[DaemonProcess], phase: str) -> dict[str, str]:
        """Wait until every run is listed by exactly one of `fleet`, each replica within
        its share + 1 (so none hands runs back later); who lists which."""
        found: dict[str, list[str]] = {}
        share = -(-len(self.names) // len(fleet))

        def once() -> bool:
            found.clear()
            found.update(listed(fleet))
            counts = Counter(v[0] for v in found.values())
            return (
                len(found) == len(self.names)
                and all(len(v) == 1 for v in found.values())
                and len(counts) == len(fleet)
                and max(counts.values()) <= share + 1
                and exported(fleet, found) == found
            )

        self.need(once, 60, phase, lambda: f"listed {len(found)} runs, twice or more: "
                  f"{sorted(n for n, v in found.items() if len(v) > 1)[:5]}, or /metrics "
                  "of a replica that does not hold them")  # fmt: skip
        return {n: v[0] for n, v in found.items()}

    def complete(self, phase: str, timeout: float = 60) -> None:
        """Wait until the store holds every run with every point written, once."""
        want = METRICS * self.steps
        points: dict[str, int] = {}

        def done() -> bool:
            points.clear()
            points.update(stored_points(self.url))
            return len(points) == len(self.names) and all(p >= want for p in points.values())

        self.need(done, timeout, phase, lambda: f"points per run {Counter(points.values())}, "
                  f"want {want} for {len(self.names)} runs")  # fmt: skip
        over = sorted(n for n, p in points.items() if p != want)
        if over:
            self.result.failures.append(f"{phase}: points counted twice on {over[:5]}")

    def expect_alert(self, run: str) -> None:
        key = f"{run}/{RULE}/firing"
        self.result.expected[key] = 1
        want = sum(self.result.expected.values())
        self.need(lambda: sum(firing(self.hook).values()) >= want, 30, f"alert on {run}",
                  lambda: f"received {dict(firing(self.hook))}")  # fmt: skip

    def takeover(self, theirs: list[str], killed: float) -> None:
        first = first_commits_after(self.url, self.marks["killed"])
        late = [n for n in theirs if n not in first]
        if late or not theirs:
            self.result.failures.append(f"takeover: no commit after the kill for {late[:5]}")
            return
        self.result.taken_over = len(theirs)
        took = max(first[n] for n in theirs) - killed
        self.result.takeover_s = took
        if took > 2 * self.lease:
            self.result.failures.append(
                f"takeover: {took:.2f}s after the kill, over 2 lease periods ({self.lease:g}s)"
            )

    # ---- checks -------------------------------------------------------------------------
    def lost(self, before: dict[str, tuple[str, str]]) -> None:
        """Every run's committed verdict as before the stop, and shown so by a replica."""
        after = verdicts(self.url)
        shown = {run["name"]: run["status"] for r in self.fleet for run in api_runs(r)}
        lost = sorted(n for n in self.names if after.get(n) != before.get(n) or n not in shown
                      or shown[n] != before.get(n, ("", ""))[0])  # fmt: skip
        self.result.lost_verdicts = lost
        if lost:
            self.result.failures.append(f"restart: verdict lost or changed on {lost[:5]}")

    def alerts(self) -> None:
        got = {k: v for k, v in firing(self.hook).items()}
        self.result.alerts = got
        self.result.duplicates = sum(max(0, c - 1) for c in got.values())
        if got != self.result.expected:
            self.result.failures.append(f"alerts {got}, expected {self.result.expected}")

    def audit(self, first: dict[str, str], moved: dict[str, str], last: dict[str, str]) -> None:
        """One commit per run per phase, by the replica that held it, each adding points;
        none between the stop and the relisting (no new data then)."""
        rows = commits(self.url)
        m = self.marks
        phases = [
            ("steady", m["balanced"], m["killed"], first),
            ("takeover", m["killed"], m["stopped"], moved),
            ("restart", m["stopped"], m["restarted"], {}),
            ("after restart", m["restarted"], 1 << 62, last),
        ]
        bad: list[str] = []
        for name, lo, hi, holders in phases:
            for run in self.names:
                got = [(rep, old, new) for i, r, rep, old, new in rows if r == run and lo < i <= hi]
                bad += check_phase(name, run, got, holders.get(run))
        self.result.double_polls = bad
        self.result.failures += bad[:10]

    # ---- plumbing -----------------------------------------------------------------------
    def need(self, pred: Callable[[], bool], timeout: float, phase: str,
             why: Callable[[], str]) -> None:  # fmt: skip
        ok = wait_until(pred, timeout, every=0.25)
        now = time.monotonic()
        self.result.phases[phase] = now - self._clock
        self._clock = now
        if not ok:
            tails = "\n".join(r.tail()[-1500:] for r in self.fleet)
            raise Abort(f"{phase}: not done in {timeout:g}s: {why()}\n{tails}")

    def mark(self, boundary: str) -> None:
        with psycopg.connect(self.url) as conn:
            row = conn.execute("SELECT coalesce(max(id), 0) FROM scenario_commits").fetchone()
        self.marks[boundary] = int(row[0]) if row else 0

    def stop(self, phase: str = "stop") -> None:
        t0 = time.monotonic()
        hung = stop_all(self.fleet)
        self.result.phases[phase] = time.monotonic() - t0
        self._clock = time.monotonic()
        for name in hung:
            tail = next(r.tail(12000) for r in self.fleet if r.env["GATEKEEPER_REPLICA"] == name)
            self.result.failures.append(
                f"{name} not stopped 15s after SIGTERM (aborted; its threads):\n{tail}"
            )

    def close(self) -> None:
        for r in self.fleet:
            if r.proc is not None and r.proc.poll() is None:
                r.proc.send_signal(signal.SIGCONT)
        self.stop("final stop")
        self.hook.close()


def check_phase(
    phase: str, run: str, got: list[tuple[str, int | None, int]], holder: str | None
) -> list[str]:
    """What is wrong with one run's commits in one phase (see Scenario.audit)."""
    out = []
    if phase == "restart":
        return [f"{phase}: {run} committed {len(got)} times with no new data"] if got else []
    if len(got) != 1:
        out.append(f"{phase}: {run} committed {len(got)} times for one new step, by "
                   f"{[g[0] for g in got]}")  # fmt: skip
    if any(old is not None and new <= old for _, old, new in got):
        out.append(f"{phase}: {run} committed without new points (a stale cursor): {got}")
    wrong = {rep for rep, _, _ in got} - {holder}
    if wrong:
        out.append(f"{phase}: {run} committed by {sorted(wrong)}, listed by {holder}")
    return out


# ---- the fleet ---------------------------------------------------------------------------
def replica_config(
    tmp: Path, i: int, url: str, hook: str, lease: float, checkpoint: float = 0.0
) -> Path:
    home = tmp / f"replica{i}"
    home.mkdir(exist_ok=True)
    config = {
        "state": url,
        "http": {"port": free_port()},
        "poll": {"interval": 1.0, "jitter": 0.1, "timeout": 5, "discovery_interval": 1.0,
                 "lease": lease, "checkpoint": checkpoint},
        "targets": [{"glob": str(tmp / "runs" / "*.jsonl"), "policies": [str(tmp / "kl.yaml")]}],
        "notifiers": [{"name": "hook", "kind": "webhook", "url": hook, "group_wait": 0.2}],
    }  # fmt: skip
    path = home / "gatekeeper.yaml"
    path.write_text(json.dumps(config, indent=2))
    return path


def stop_all(fleet: list[DaemonProcess]) -> list[str]:
    """SIGTERM every live replica at once, then wait for each (a clean stop); the
    names of those not stopped 15 s after it (aborted then, see DaemonProcess.abort)."""
    live = [r for r in fleet if r.proc is not None and r.proc.poll() is None]
    for r in live:
        assert r.proc is not None
        r.proc.send_signal(signal.SIGTERM)
    hung = []
    for r in live:
        try:
            r.stop()
        except subprocess.TimeoutExpired:
            hung.append(r.env["GATEKEEPER_REPLICA"])
    return hung


def api_runs(r: DaemonProcess) -> list[dict[str, Any]]:
    if r.proc is None or r.proc.poll() is not None:
        return []
    for _ in range(3):  # a loaded machine may time one request out
        answer = r.api("/api/runs")
        if answer is not None:
            return list(answer["runs"])
    raise Abort(f"/api/runs of {r.env['GATEKEEPER_REPLICA']} did not answer\n{r.tail()}")


def listed(fleet: list[DaemonProcess]) -> dict[str, list[str]]:
    """run name -> the replicas listing it as polled (not ended) in /api/runs."""
    out: dict[str, list[str]] = {}
    for r in fleet:
        for run in api_runs(r):
            if not run["ended"]:  # an ended run is listed by every replica, held by none
                out.setdefault(run["name"], []).append(run["replica"])
    return out


def exported(fleet: list[DaemonProcess], runs: Iterable[str]) -> dict[str, list[str]]:
    """run name (of `runs`) -> the replicas whose /metrics export it, each named by its
    own `gatekeeper_replica_info` (as Prometheus would see them: one scrape per replica)."""
    out: dict[str, list[str]] = {}
    wanted = set(runs)
    for r in fleet:
        if r.proc is None or r.proc.poll() is not None:
            continue
        text = r.get("/metrics").text
        names = re.findall(r'^gatekeeper_replica_info\{replica="([^"]*)"\} 1\.0$', text, re.M)
        if names != [r.env["GATEKEEPER_REPLICA"]]:
            return {}  # not answered, or not saying which replica it is
        for run in re.findall(r'^gatekeeper_run_status\{run="([^"]*)"\} ', text, re.M):
            if run in wanted:
                out.setdefault(run, []).append(names[0])
    return out


def firing(hook: Recorder) -> Counter[str]:
    with hook.lock:
        bodies = list(hook.bodies)
    return Counter(
        f"{a['run']}/{a['rule']}/{a['state']}" for b in bodies for g in b["groups"]
        for a in g["alerts"]
    )  # fmt: skip


# ---- the store ---------------------------------------------------------------------------
def install_audit(url: str) -> None:
    """Create the daemon's tables (as the first replica would) and the audit trigger."""
    PostgresState(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(AUDIT)


def server_now(url: str) -> float:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT extract(epoch from clock_timestamp())").fetchone()
    assert row is not None
    return float(row[0])


def stored_points(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT key, points FROM gkd_runs").fetchall()
    return {Path(k).stem: int(p) for k, p in rows}


def verdicts(url: str) -> dict[str, tuple[str, str]]:
    """run -> (status, verdict JSON) as committed."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT key, status, verdict FROM gkd_runs").fetchall()
    return {Path(k).stem: (str(s), str(v)) for k, s, v in rows}


def commits(url: str) -> list[tuple[int, str, str, int | None, int]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT id, run, replica, old_points, new_points FROM scenario_commits ORDER BY id"
        ).fetchall()
    return [(int(i), Path(r).stem, str(rep), o, int(n)) for i, r, rep, o, n in rows]


def first_commits_after(url: str, mark: int) -> dict[str, float]:
    """run -> server time of its first commit after audit id `mark`."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT run, min(at) FROM scenario_commits WHERE id > %s GROUP BY run", (mark,)
        ).fetchall()
    return {Path(r).stem: float(t) for r, t in rows}
