"""`gatekeeper run --miles`: the run's config from what miles itself runs, written once
into the record directory's sidecar (`run.json`, `{"name", "config"}`) so the live gate
and a later `gatekeeper check RECORD_DIR` read the same values.

Two places say it, as miles knows it:
- the trainer's command line: the process among CMD's descendants (Ray's setsid workers
  included) that runs a miles train script with `--rollout-batch-size` (miles_argv.py);
- the test file CMD runs: its `register_cuda_ci(suite=...)` and `register_ci_gate(...)`
  calls (gatekeeper/history/miles.py reads them), giving the history identity
  (`test_path`, `backend`, `suite`) and `ci_gate`.

Until the trainer is found and its first record is there, nothing is judged (the
pack's variants need its config): the first of the trainer appearing, a record file
changing, or CMD exiting settles the config.
A record only changes once the trainer runs, so a trainer that is a descendant is seen
by then; a key found nowhere is left out, and the pack's `requires_config` ERROR names
the flag to pass. `--config` still wins over anything found here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import orjson

from gatekeeper.errors import ConfigError
from gatekeeper.live.miles_argv import TRAIN_SCRIPTS, TrainerArgs, read_trainer, trainer_args
from gatekeeper.live.process import ChildGroup
from gatekeeper.sources.jsonl.metadata import read_sidecar

SIDECAR = "run.json"


@dataclass
class Found:
    """Config keys with where each came from, and what could not be read."""

    config: dict[str, Any] = field(default_factory=dict)
    origin: list[str] = field(default_factory=list)  # one phrase per place read
    notes: list[str] = field(default_factory=list)


def _show(value: Any) -> str:
    if isinstance(value, list):
        return f"[{len(value)} metrics]"
    return orjson.dumps(value).decode() if not isinstance(value, str) else value


def read_test_file(cmd: list[str], cwd: str) -> Found:
    """The history identity and `ci_gate` of the miles test file CMD runs (the first
    `*.py` argument that is a file under `cwd`, as miles' harness runs tests from its
    checkout), or a note saying why there is none."""
    from gatekeeper.history.miles import cuda_registration

    found = Found()
    paths = (os.path.join(cwd, t) for t in cmd if t.endswith(".py"))
    script = next((p for p in paths if os.path.isfile(p)), None)
    if script is None or os.path.basename(script) in TRAIN_SCRIPTS:
        return found
    test_path = os.path.relpath(script, cwd).replace(os.sep, "/")
    reg = cuda_registration(script)
    if test_path.startswith("../") or reg is None:  # the gate runs for CUDA tests only
        found.notes.append(f"{test_path}: no one register_cuda_ci(suite=...) in a test under "
                           "the working directory: no history identity or ci_gate read")
        return found
    home, hardware = reg
    found.config.update(test_path=test_path, backend="cuda")
    if hardware is None or len(set(hardware)) == 1:  # it cannot have run on another stage
        found.config["suite"] = home
    else:
        found.notes.append(f"suite not read: {test_path} may run on {sorted(set(hardware))}; "
                           "pass the stage that ran it, --config suite=STAGE")
    _read_gates(script, test_path, found)
    shown = " ".join(f"{k}={_show(v)}" for k, v in found.config.items())
    found.origin.append(f"from {test_path}: {shown}")
    return found


def _read_gates(script: str, test_path: str, found: Found) -> None:
    """`ci_gate`: the metrics the file declares with `register_ci_gate` (none: [])."""
    from gatekeeper.history.miles import declared_gates

    try:
        declared = declared_gates(script)
    except ConfigError as exc:
        found.notes.append(f"ci_gate not read: {exc}")
        return
    if any(written for _, written in declared):
        found.notes.append(f"ci_gate not read: {test_path} gives register_ci_gate its own "
                           "steps/constraint")
        return
    found.config["ci_gate"] = [metric for metric, _ in declared]


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:  # gone, or not ours to read
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def find_trainer(child: ChildGroup) -> tuple[int, TrainerArgs] | None:
    """The miles trainer among CMD and its descendants, the earliest started first."""
    child.track()
    known = child.descendants.known
    for pid in [child.pid, *sorted(child.descendants.alive(), key=lambda p: known[p])]:
        hit = trainer_args(_cmdline(pid))
        if hit is not None:
            return pid, read_trainer(*hit)
    return None


def _trainer_found(pid: int, trainer: TrainerArgs) -> Found:
    found = Found(config=dict(trainer.config))
    shown = " ".join(f"{k}={_show(v)}" for k, v in trainer.config.items())
    found.origin.append(
        f"from the trainer's command line (pid {pid}, {os.path.basename(trainer.script)}): "
        f"{shown}"
    )
    found.notes += [f"{k} not read: {why}" for k, why in trainer.unread.items()]
    return found


def _record_files(directory: str) -> dict[str, tuple[int, int]]:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return {}
    out = {}
    for e in entries:
        if e.name.endswith(".jsonl") and e.is_file():
            st = e.stat()
            out[e.name] = (st.st_size, st.st_mtime_ns)
    return out


class MilesConfig:
    """Holds the live gate until the trainer's config is known, then writes the sidecar
    and says, in one line, which config came from where."""

    def __init__(
        self, record_dir: str, cmd: list[str], given: Collection[str], say: Callable[[str], None]
    ):
        self.record_dir, self.given, self.say = record_dir, sorted(given), say
        self.test = read_test_file(cmd, os.getcwd())
        self.before = _record_files(record_dir)  # an earlier run's files are not a start
        self.settled = False  # the config is written (or known not to be found)
        self.released = False  # the gate judges from now on
        self.waiting_said = False

    def hold(self, child: ChildGroup) -> bool:
        """True while the gate should wait (call once per poll): until the trainer's
        config is settled and the first record is there (before it there is nothing to
        judge, and the variants' keys would read as missing)."""
        if self.released:
            return False
        changed = _record_files(self.record_dir) != self.before  # before looking: no race
        if not self.settled:
            self._look(child, changed)
        if self.settled and (changed or child.exited()):
            self.released = True
            return False
        if not self.waiting_said:
            self.say("gatekeeper: waiting for the miles trainer among CMD's processes (to "
                     "read its config) and its first record; nothing is judged before")
            self.waiting_said = True
        return True

    def _look(self, child: ChildGroup, changed: bool) -> None:
        if not child.descendants.available:
            self._settle(None, "no /proc here: CMD's processes cannot be read")
            return
        trainer = find_trainer(child)
        if trainer is not None:
            self._settle(trainer, None)
        elif changed:
            self._settle(None, "records appeared before a miles trainer (a train.py with "
                         "--rollout-batch-size) was seen among CMD's processes")
        elif child.exited():
            self._settle(None, "CMD exited before a miles trainer was seen")

    def _settle(self, trainer: tuple[int, TrainerArgs] | None, why: str | None) -> None:
        self.settled = True
        if trainer is not None:
            found = _trainer_found(*trainer)
        else:
            found = Found(origin=[f"not read from a miles trainer ({why})"])
        config = {**self.test.config, **found.config}
        parts = [*found.origin, *self.test.origin]
        if self.given:
            parts.append(f"from --config (wins): {', '.join(self.given)}")
        parts += found.notes + self.test.notes
        if config:
            parts.append(f"written to {self._write(config)}")
        self.say("gatekeeper: config " + "; ".join(parts))

    def _write(self, config: dict[str, Any]) -> str:
        """Merge into the directory's sidecar, atomically: keys found here replace an
        earlier run's, a name or other keys written by hand are kept, a run state is
        dropped (it was an earlier run's)."""
        path = os.path.join(self.record_dir, SIDECAR)
        meta = read_sidecar(path) if os.path.exists(path) else {}
        meta.pop("state", None)  # a state is the run's to report, not an earlier one's
        meta["config"] = {**meta.get("config", {}), **config}
        if not meta.get("name") and config.get("test_path"):
            meta["name"] = config["test_path"]
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(meta, option=orjson.OPT_INDENT_2))
        os.replace(tmp, path)
        return path
