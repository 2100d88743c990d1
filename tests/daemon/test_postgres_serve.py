"""The real daemon as a child process on a PostgreSQL state (a real cluster): it judges
and alerts as on SQLite, and a kill -9 loses no point and sends nothing twice."""

from __future__ import annotations

import contextlib
import json
import random
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from tests.daemon.harness import DaemonProcess, free_port, write_config, writer
from tests.daemon.recorder import Recorder
from tests.daemon.test_lock import serve
from tests.daemon.test_serve import firing_lines


def pg_config(tmp_path: Path, url: str, notifiers: list[dict], **poll: object) -> Path:
    path = write_config(tmp_path, notifiers, **poll)
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, "state": url}, indent=2))
    return path


def test_kill9_on_a_postgres_state_loses_no_point_and_sends_no_alert_twice(
    tmp_path: Path, pg_url: str
) -> None:
    hook = Recorder()
    notifiers = [{"name": "hook", "kind": "webhook", "url": hook.url, "group_wait": 0.2}]
    # a restarted daemon is a new replica (host:pid): it takes the runs over once the
    # dead one's leases expire, after `lease` seconds
    config = pg_config(tmp_path, pg_url, notifiers, interval=0.1, jitter=0, lease=2)
    daemon = DaemonProcess(config).start()
    runs = tmp_path / "runs"
    kids = [
        writer(runs / f"r{i}.jsonl", "--steps", "40", "--period", "0.1", "--bad-at",
               str(8 + 10 * i), "--end")
        for i in range(2)
    ]  # fmt: skip
    rng = random.Random(3)
    try:
        for _ in range(3):
            time.sleep(rng.uniform(0.5, 1.2))
            daemon.kill9()
            daemon.start()
        for kid in kids:
            kid.wait(30)

        def stored() -> list[tuple[str, int, int, str]]:
            with psycopg.connect(pg_url) as conn:  # the state is in PostgreSQL, nowhere else
                rows = conn.execute("SELECT key, points, ended, status FROM gkd_runs ORDER BY key")
                return [(Path(k).stem, p, e, s) for k, p, e, s in rows.fetchall()]

        # every point read exactly once across 4 lives, each run judged whole
        assert daemon.wait(lambda: stored() == [(f"r{i}", 80, 1, "fail") for i in range(2)], 30), (
            stored(),
            daemon.tail(),
        )
        assert hook.wait(lambda: len(firing_lines(hook.bodies)) == 2)
        time.sleep(1.0)
        assert firing_lines(hook.bodies) == {(f"r{i}", "kl-small", "firing"): 1 for i in range(2)}
        assert not (tmp_path / "state").exists() and not list(tmp_path.rglob("postgresql:"))
    finally:
        for kid in kids:
            kid.kill()
        daemon.stop()
        hook.close()


class Proxy:
    """A TCP relay in front of the PostgreSQL server: `cut()` drops every connection and
    refuses new ones (the store is unreachable), `restore()` listens again."""

    def __init__(self, upstream_port: int):
        self.upstream = upstream_port
        self.port = free_port()
        self.socks: list[socket.socket] = []
        self.restore()

    def restore(self) -> None:
        self.open = True
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            if not self.open:
                client.close()
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            self.socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._relaying()
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _relaying(self) -> None:
        """Called before each chunk is relayed (a subclass may hold it)."""

    def cut(self) -> None:
        self.open = False
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.listener.close()
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self.socks = []


def test_readyz_says_not_ready_while_the_store_is_unreachable_and_polling_resumes(
    tmp_path: Path, pg_url: str
) -> None:
    base, db = pg_url.rsplit("/", 1)
    proxy = Proxy(int(base.rsplit(":", 1)[1]))
    url = f"{base.rsplit(':', 1)[0]}:{proxy.port}/{db}"
    config = pg_config(tmp_path, url, [], interval=0.2, jitter=0, lease=2)
    run = tmp_path / "runs" / "r.jsonl"
    run.write_text(json.dumps({"train/step": 0, "train/ppo_kl": 0.001, "train/loss": 1.0}) + "\n")
    daemon = DaemonProcess(config).start()
    try:
        assert daemon.wait(lambda: daemon.run("r")["points"] == 2), daemon.tail()
        proxy.cut()
        assert daemon.wait(lambda: daemon.get("/readyz").status_code == 503, 20), daemon.tail()
        assert daemon.get("/healthz").status_code == 200  # alive, only not ready
        with open(run, "a") as fh:  # written while the store is away
            fh.write(json.dumps({"train/step": 1, "train/ppo_kl": 0.5, "train/loss": 1.0}) + "\n")
        time.sleep(1.0)
        proxy.restore()
        assert daemon.wait(lambda: daemon.get("/readyz").status_code == 200, 20), daemon.tail()
        assert daemon.wait(lambda: daemon.run("r")["points"] == 4, 20), daemon.tail()
        assert daemon.run("r")["status"] == "fail"
    finally:
        daemon.stop()
        proxy.cut()


def test_check_config_on_a_postgres_state_creates_nothing(tmp_path: Path, pg_url: str) -> None:
    config = pg_config(tmp_path, pg_url, [])
    password = pg_url.replace("postgres@", "postgres:hunter2@")
    config.write_text(config.read_text().replace(pg_url, password))
    checked = serve(config, "--check-config")
    assert checked.returncode == 0, checked.stderr
    assert ":***@" in checked.stdout and "hunter2" not in checked.stdout
    assert "reachable, its tables will be created" in checked.stdout
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('gkd_meta')").fetchone() == (None,)
    (tmp_path / "runs" / "r.jsonl").write_text(
        json.dumps({"train/step": 0, "train/loss": 1}) + "\n"
    )
    daemon = DaemonProcess(config).start()
    try:
        assert daemon.wait(lambda: daemon.run("r")["points"] == 1), daemon.tail()
    finally:
        daemon.stop()
    checked = serve(config, "--check-config")
    assert checked.returncode == 0 and ": ok, 1 runs" in checked.stdout, checked.stdout


def _step(run: Path, n: int) -> None:
    with open(run, "a") as fh:
        fh.write(json.dumps({"train/step": n, "train/ppo_kl": 0.01, "train/loss": 1.0}) + "\n")


def _points(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT coalesce(sum(points), 0) FROM gkd_runs").fetchone()
    return int(row[0]) if row else 0


Unblock = Callable[[], None]


def _blocked_commits(
    tmp_path: Path, pg_url: str, block: Callable[[psycopg.Connection], Unblock], error: str
) -> None:
    """A replica (lease 2 s) polls one run; `block(conn)`, from another session, makes
    its commits wait on the server until the function it returns is called: the commit
    fails within two lease periods with `error` in the log, counted; once unblocked the
    run is polled again, whole; and a stop while a commit waits takes no longer."""
    config = pg_config(tmp_path, pg_url, [], interval=0.2, jitter=0, lease=2)
    run = tmp_path / "runs" / "r0.jsonl"
    _step(run, 0)
    daemon = DaemonProcess(config).start()
    try:
        assert daemon.wait(lambda: _points(pg_url) == 2, 20), daemon.tail()
        with psycopg.connect(pg_url) as other:
            unblock = block(other)
            _step(run, 1)
            assert daemon.wait(lambda: error in daemon.log.read_text(), 15), daemon.tail()
            unblock()
        assert daemon.wait(lambda: _points(pg_url) == 4, 20), daemon.tail()  # again, whole
        with psycopg.connect(pg_url) as other:
            block(other)
            _step(run, 2)
            time.sleep(0.6)  # a poll is waiting now
            began = time.monotonic()
            assert daemon.stop() == 0, daemon.tail()
            assert time.monotonic() - began < 10, daemon.tail()
    finally:
        daemon.stop()


def test_a_run_locked_by_another_session_fails_its_commit_and_never_holds_the_stop(
    tmp_path: Path, pg_url: str
) -> None:
    """A session outside gatekeeper (an operator's, a migration) holding a run's row made
    that run's commit wait for as long as it held it, and the daemon's stop with it (the
    scheduler waits for the polls in flight). A replica's statements wait at most a lease
    period for a lock (`lock_timeout`)."""

    def hold_every_run_row(conn: psycopg.Connection) -> Unblock:
        conn.execute("SELECT key FROM gkd_runs FOR UPDATE")
        return conn.rollback

    _blocked_commits(tmp_path, pg_url, hold_every_run_row, "lock timeout")


def test_a_commit_stalled_on_the_server_fails_within_two_leases_and_never_holds_the_run(
    tmp_path: Path, pg_url: str
) -> None:
    """A commit is past its fence: it holds the run's lease row, which takeover skips. A
    statement stalled on the server (here a trigger that sleeps 30 s while a flag is set,
    as an I/O stall would) kept the run from every replica, a worker and the stop for as
    long. A replica's statements run at most two lease periods (`statement_timeout`,
    above the lock wait's one); without it the first wait below times out."""

    def stall_run_writes(conn: psycopg.Connection) -> Unblock:
        conn.execute("CREATE TABLE IF NOT EXISTS gk_stall (stall boolean NOT NULL)")
        conn.execute(
            "CREATE OR REPLACE FUNCTION gk_stall() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN IF EXISTS (SELECT 1 FROM gk_stall WHERE stall) THEN "
            "PERFORM pg_sleep(30); END IF; RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE OR REPLACE TRIGGER gk_stall BEFORE INSERT OR UPDATE ON gkd_runs "
            "FOR EACH ROW EXECUTE FUNCTION gk_stall()"
        )
        conn.execute("INSERT INTO gk_stall VALUES (true)")
        conn.commit()

        def unblock() -> None:
            conn.execute("DELETE FROM gk_stall")
            conn.commit()

        return unblock

    _blocked_commits(tmp_path, pg_url, stall_run_writes, "statement timeout")
