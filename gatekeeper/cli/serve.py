"""`gatekeeper serve -c FILE`: run the daemon; `--check-config` validates and exits.

--check-config loads the config, every target's policies and every notifier's secrets
from the environment, and opens an existing state (a SQLite file, or a PostgreSQL store)
to check it, creating nothing and taking no lock, without polling, listening or sending
anything. Exit 0 when all is well, 2 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gatekeeper.daemon.config import DaemonConfig


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="watch runs as a daemon: metrics, state, chat alerts")
    p.add_argument(
        "-c",
        "--config",
        dest="daemon_config",
        required=True,
        metavar="FILE",
        help="daemon config (YAML); see docs/daemon.md",
    )
    p.add_argument(
        "--check-config",
        action="store_true",
        help="validate the config, policies, secrets and state file, then exit",
    )
    p.add_argument(
        "--reset-state",
        action="append",
        default=[],
        metavar="RUN",
        help="drop this run's judging state before starting; its points are re-read from "
        "the source and its alert history is kept (repeatable)",
    )
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    # start-up ends once the daemon is built (its policies, every stored run restored)
    p.set_defaults(func=cmd_serve, owns_startup=True)


def cmd_serve(args: argparse.Namespace) -> int:
    from gatekeeper.extras import require

    require("serve", "gatekeeper serve")  # before the daemon's modules import them
    from gatekeeper.daemon.config import load_config

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per job run
    config = load_config(args.daemon_config)
    if args.check_config:
        return _check(config)
    from gatekeeper.daemon.service import Daemon

    _room_for_connections(config.http.max_connections)
    _guard_secrets(config)
    _stacks_on_sigusr1()
    daemon = Daemon(config, reset_state=tuple(args.reset_state))
    _collector_for_a_daemon()
    daemon.serve()
    logging.shutdown()
    # A poll stuck in the kernel (a hung network filesystem) cannot be interrupted and
    # would block interpreter exit forever; everything is committed by now.
    os._exit(0)


# The cyclic collector's first threshold for the daemon: how many more container objects
# may be made than freed before a collection (Python's default is 700).
GC_THRESHOLD = 10_000


def _collector_for_a_daemon() -> None:
    """The built daemon is frozen for the cyclic collector (main's start-up: it lives
    until exit) and the collector's first threshold raised. A poll makes a few thousand
    objects and frees about as many, and the runs' state lives across polls and is
    freed by reference counts: at 700 the collector ran 5-13 times a second at 1,000
    runs, promoting what each poll in flight held, until a full pass over every run's
    objects (~0.5 s at 1,000 runs, the GIL held) — 7-15 % of the daemon's CPU, nothing
    ever collected (bench/RESULTS.md, issue 28). Cyclic garbage, were any made, is still
    collected, after 10,000 objects rather than 700."""
    import gc

    from gatekeeper.cli.main import startup_done

    startup_done()
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])


def _stacks_on_sigusr1() -> None:
    """`kill -USR1 PID` writes every thread's stack to stderr (the log) and the daemon
    goes on: where a daemon that stopped polling waits, without stopping it. Frames
    only (file, line, function), never a value: nothing secret reaches the log."""
    import faulthandler
    import signal
    import sys

    if hasattr(signal, "SIGUSR1"):  # not on Windows
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def _guard_secrets(config: DaemonConfig) -> None:
    """Register every secret the daemon will hold with the log filter (see logsafe)."""
    from gatekeeper.daemon.logsafe import install
    from gatekeeper.errors import ConfigError

    secrets: list[str | None] = [config.http.token()]
    for n in config.notifiers:
        try:
            secrets += [n.resolved_url(), n.resolved_secret()]
        except ConfigError:
            pass  # unset: the Daemon reports it, and there is nothing to hide
    install(secrets)


def _room_for_connections(max_connections: int) -> None:
    """Raise the soft open-files limit so `http.max_connections` sockets plus the state,
    sources and notifiers fit (many systems start at 1,024); never above the hard limit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def _check(config: DaemonConfig) -> int:
    from gatekeeper.daemon.discovery import describe
    from gatekeeper.daemon.service import load_targets
    from gatekeeper.notify import build_notifier

    targets = load_targets(config, lambda spec: None)  # type: ignore[arg-type,return-value]
    for target, (watched, list_runs) in zip(config.targets, targets, strict=True):
        # listing a wandb project is a network call: --check-config stays offline
        found = "" if target.wandb else f" ({len(list_runs())} now)"
        rules = sum(len(p.rules) for p in watched.policies)
        print(
            f"target {watched.target}: {describe(target)}{found}, "
            f"{len(watched.policies)} policies, {rules} rules, every {watched.interval:g}s"
        )
    for n in config.notifiers:
        build_notifier(n).close()  # resolves URL and secret from the environment
        print(f"notifier {n.name}: {n.kind}, alerts on {', '.join(n.statuses)}")
    print(_check_state(config.state))
    auth = "bearer token" if config.http.token_env else "no token (loopback only)"
    print(f"http {config.http.address}:{config.http.port}: {auth}")
    print(f"ok: {config.file}")
    return 0


def _check_state(state: str) -> str:
    """Open an existing state to check it, creating nothing."""
    from gatekeeper import dburl
    from gatekeeper.daemon.state import SqlState, StateStore

    url = dburl.parse(state)
    store: SqlState
    if url.engine == "postgresql":
        from gatekeeper.daemon.state_postgres import PostgresState

        store = PostgresState(url.url, create=False)
        if not store.exists:
            store.close()
            return f"state {url.shown}: reachable, its tables will be created"
    elif os.path.exists(url.path):
        store = StateStore(url.path)
    else:
        return f"state {url.shown}: will be created"
    try:
        return f"state {url.shown}: ok, {len(store.load_runs())} runs"
    finally:
        store.close()
