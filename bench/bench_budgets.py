"""Issue 25's user-visible budgets, before vs after, on installed gatekeepers.

    python bench/bench_budgets.py --env before=/work/benchenv-before/bin/python \
        --env after=/work/benchenv-after/bin/python [--runs 5] [--out bench/RESULTS-run.md]

Each --env names the python of a venv where gatekeeper is installed the way the images
install it (`pip install .`, not editable; its console script `gatekeeper` beside that
python), with the wandb SDK in it. The inputs are generated once in a scratch directory:

  small      1,000 steps x 10 metrics JSONL rows, 20 threshold rules (bench_startup.py)
  rows       100,000 steps x 50 metrics JSONL rows, 50 rules (bench_check.py's run and policy)
  wandb      a 20,000-step x 50-metric offline run (1M points), written by the real wandb
             SDK in the first env's python (bench_wandb.py's generator), 48 `max` rules
  threshold  50 rules of max/min/abs_max/between on the `rows` run
  anomaly    50 rules of spike/trend/flat/fraction on the same metrics of the same run
  live       `gatekeeper watch --interval 1` on a JSONL file; a violating row is appended
             at a random phase of the poll cycle; latency = the append to the watch's exit
             (two trials per run)

Every figure is a whole child process of the env's console script (what a user waits
for). Rounds are interleaved (each round runs every figure in every env, the env order
alternating round by round), so load from the shared machine hits the envs alike. The
budget is judged on the median; the best (the floor a quiet machine reaches), the median
CPU time of the child and the machine's 1-minute load average while the figure ran are
printed beside it. The anomaly figure is the ratio of the anomaly policy's median
`check` to the threshold policy's, each env on its own.

Build each env from a clean export, as the images do (a build/ left in a checkout carries
deleted modules into the wheel), e.g. for the new main:
    git -C /work/main archive HEAD | tar -x -C /tmp/gk-src   (mkdir it first)
    python3 -m venv /work/benchenv-after && /work/benchenv-after/bin/pip install '/tmp/gk-src[all]'
(an extra named `all` where the tree has one; else the extras holding wandb, tensorboard, mlflow).

Uses only the standard library and numpy (for bench_check.py's generator); gatekeeper
and wandb are run in the envs, never imported here. Progress goes to stderr, the
markdown table to stdout (and --out).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_check  # noqa: E402  (the 100k x 50 rows run and its policy)
import bench_startup  # noqa: E402  (the small run and its 20-rule policy)

WANDB_STEPS = 20_000  # x 50 metrics = 1M points
LIVE_ROWS = 20
LIVE_PER_RUN = 2  # live trials per run: a median of 5 phases is a coarse one
BUDGETS = {  # figure -> (budget, unit); judged on the median
    "--version": (0.1, "s"),
    "small check": (0.5, "s"),
    "rows check": (2.0, "s"),
    "wandb check": (3.0, "s"),
    "anomaly / threshold": (1.2, "x"),
    "live latency": (1.0, "s"),
}
LABELS = {
    "--version": "`gatekeeper --version`",
    "small check": "small check (1,000 steps x 10 metrics, 20 rules), whole process",
    "rows check": "`check` of 100k steps x 50 metrics JSONL rows, whole process",
    "wandb check": "`check` of a 1M-point wandb offline run",
    "anomaly / threshold": "anomaly policy vs threshold policy, `check` end to end",
    "live latency": "live detection latency, JSONL, 1 s poll",
}
# bounds the uniform noise of bench_check's run meets: both policies give the same verdict
# (49 pass, the NaN's ERROR), so neither stops short of judging every rule
ANOMALY = ["{spike: {window: 20, factor: 30}}", "{trend: {window: 50, max_slope: 0.05}}",
           "{flat: {window: 50, min_std: 1.0e-4}}", "{fraction: {above: 0.999, max: 0.5}}"]
THRESHOLD = ["{max: 1.5}", "{min: -0.5}", "{abs_max: 2.0}", "{between: [-1, 2]}"]
LIVE_POLICY = """version: 1
name: live
rules:
  - {id: loss-max, metric: train/loss, check: {max: 10}}
"""
# C extensions of the old tree: where an env still imports one, its table says so
C_MODULES = ("gatekeeper.sources.jsonl._rows", "gatekeeper.sources.wandb._history",
             "gatekeeper.checks._spike", "gatekeeper.checks._trend")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def child_env() -> dict[str, str]:
    """The environment of every child: nothing that would import another gatekeeper
    (PYTHONPATH) or change what it does (GATEKEEPER_*, WANDB_*, GITHUB_ACTIONS)."""
    drop = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "GITHUB_ACTIONS", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items()
            if k not in drop and not k.startswith(("GATEKEEPER_", "WANDB_"))}


@dataclass
class Env:
    label: str
    python: str
    script: str = ""
    describe: str = ""
    walls: dict[str, list[float]] = field(default_factory=dict)
    cpus: dict[str, list[float]] = field(default_factory=dict)
    loads: dict[str, list[float]] = field(default_factory=dict)
    codes: dict[str, set[int]] = field(default_factory=dict)
    verdicts: dict[str, set[str]] = field(default_factory=dict)

    def record(self, fig: str, wall: float, cpu: float, load: float, code: int,
               out: str) -> None:
        self.walls.setdefault(fig, []).append(wall)
        self.cpus.setdefault(fig, []).append(cpu)
        self.loads.setdefault(fig, []).append(load)
        self.codes.setdefault(fig, set()).add(code)
        self.verdicts.setdefault(fig, set()).add(out.splitlines()[-1] if out else "")


PROBE = """
import importlib.util, sys
import gatekeeper, wandb
from importlib.metadata import version
c = [m.rsplit('.', 1)[1] for m in sys.argv[1:] if importlib.util.find_spec(m) is not None]
print(f"gatekeeper {version('gatekeeper')} from {gatekeeper.__file__}; wandb {wandb.__version__};"
      f" C extensions: {', '.join(c) or 'none'}")
"""


def probe(env: Env, tmp: str) -> None:
    """Check the env is usable (gatekeeper and wandb import, the console script is there)
    and describe it: version, where it imports from, which C extensions it still has."""
    env.script = os.path.join(os.path.dirname(env.python), "gatekeeper")
    if not os.access(env.script, os.X_OK):
        raise SystemExit(f"{env.label}: no console script {env.script}: install gatekeeper "
                         "into that venv (pip install '.[all]', not editable)")
    out = subprocess.run([env.python, "-c", PROBE, *C_MODULES], capture_output=True,
                         text=True, cwd=tmp, env=child_env())
    if out.returncode != 0:
        raise SystemExit(f"{env.label}: {env.python} cannot import gatekeeper and wandb:\n"
                         f"{out.stderr.strip()}")
    env.describe = out.stdout.strip()
    if ".venv" in env.describe or "site-packages" not in env.describe:
        log(f"warning: {env.label} imports gatekeeper from outside site-packages "
            "(an editable install is not what the images run)")
    helptext = subprocess.run([env.script, "watch", "--help"], capture_output=True,
                              text=True, cwd=tmp, env=child_env()).stdout
    if "--interval" not in helptext:
        raise SystemExit(f"{env.label}: `gatekeeper watch` has no --interval; adapt live_trial")


# ---- inputs ------------------------------------------------------------------------------
def write_rules(path: str, kinds: list[str], metrics: list[str]) -> None:
    with open(path, "w") as fh:
        fh.write("version: 1\nname: bench\nrules:\n")
        for i, name in enumerate(metrics):
            fh.write(f"  - {{id: r{i:02d}, metric: {name}, check: {kinds[i % len(kinds)]}}}\n")


def wandb_run(tmp: str, python: str) -> tuple[str, str]:
    """The 1M-point offline run, logged by the real SDK in `python`; (run dir, policy)."""
    out = os.path.join(tmp, "wandb-run")
    os.makedirs(out)
    code = (f"import sys; sys.path.insert(0, {HERE!r}); from pathlib import Path; "
            f"from bench_wandb import generate; generate(Path({out!r}), {WANDB_STEPS})")
    env = dict(child_env(), WANDB_MODE="offline", WANDB_SILENT="true",
               WANDB_CONFIG_DIR=os.path.join(tmp, "wandb-config"))
    subprocess.run([python, "-c", code], check=True, cwd=tmp, env=env,
                   stdout=subprocess.DEVNULL)
    metrics = [f"train/m{i}" for i in range(20)] + [f"rollout/m{i}" for i in range(15)]
    metrics += [f"perf/m{i}" for i in range(12)]  # bench_wandb.METRICS: sin(.), in [-1, 1]
    policy = os.path.join(tmp, "wandb.yaml")
    write_rules(policy, ["{max: 2}"], metrics)
    with open(policy, "a") as fh:  # eval/score = step / 2: its own bound
        fh.write("  - {id: score, metric: eval/score, check: {max: 1.0e+6}}\n")
    return os.path.join(out, "wandb"), policy


def make_inputs(tmp: str, wandb_python: str) -> dict[str, list[str]]:
    """Every figure's gatekeeper arguments (after the console script)."""
    small, small_policy = os.path.join(tmp, "small.jsonl"), os.path.join(tmp, "small.yaml")
    bench_startup.write_run(small)
    bench_startup.write_policy(small_policy)
    log("writing the 100k x 50 JSONL run ...")
    bench_check.OUT = tmp  # its generator writes into OUT
    _record, rows, rows_policy = bench_check.generate(100_000, 50)
    names = [f"train/m{i:02d}" for i in range(50)]  # bench_check's metric names
    threshold, anomaly = os.path.join(tmp, "threshold.yaml"), os.path.join(tmp, "anomaly.yaml")
    write_rules(threshold, THRESHOLD, names)
    write_rules(anomaly, ANOMALY, names)
    log(f"logging the {WANDB_STEPS} x 50 wandb run with the SDK (offline) ...")
    wandb_dir, wandb_policy = wandb_run(tmp, wandb_python)
    with open(os.path.join(tmp, "live.yaml"), "w") as fh:
        fh.write(LIVE_POLICY)
    return {
        "--version": ["--version"],
        "small check": ["check", small, "-p", small_policy, "-q"],
        "rows check": ["check", rows, "-p", rows_policy, "-q"],
        "wandb check": ["check", wandb_dir, "-p", wandb_policy, "-q"],
        "threshold check": ["check", rows, "-p", threshold, "-q"],
        "anomaly check": ["check", rows, "-p", anomaly, "-q"],
    }


# ---- measuring ---------------------------------------------------------------------------
def timed(cmd: list[str], cwd: str) -> tuple[float, float, int, str]:
    """(wall s, CPU s of the child, exit code, the tail of its output)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=child_env())
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.returncode, (out.stdout + out.stderr).strip()[-400:]


def live_trial(env: Env, tmp: str, rng: random.Random) -> tuple[float, float, int, str]:
    """`watch --interval 1` on a JSONL file of good rows; a row over the rule's max is
    appended 2-3 s after the start (a random phase of the poll cycle). (seconds from the
    append to the watch's exit, CPU s, exit code, output)."""
    path = os.path.join(tmp, f"live-{env.label}.jsonl")
    with open(path, "w") as fh:
        fh.writelines(f'{{"train/step": {s}, "train/loss": 1.0}}\n' for s in range(LIVE_ROWS))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [env.script, "watch", path, "-p", os.path.join(tmp, "live.yaml"), "--interval", "1",
           "-q"]
    proc = subprocess.Popen(cmd, cwd=tmp, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(2.0 + rng.random())
        if proc.poll() is not None:
            out = proc.communicate()[0]
            raise SystemExit(f"{env.label}: watch exited {proc.returncode} before the bad row:"
                             f"\n{out}")
        with open(path, "a") as fh:
            fh.write(f'{{"train/step": {LIVE_ROWS}, "train/loss": 100.0}}\n')
        t0 = time.perf_counter()
        out = proc.communicate(timeout=60)[0]
        latency = time.perf_counter() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return latency, cpu, proc.returncode, out.strip()[-400:]


# what each figure may exit with: a pass, or the verdict of its data (bench_check's run
# holds a NaN, which is an ERROR); 2 (bad input) or 70 (a bug) stops the benchmark
EXPECTED = {"--version": {0}, "small check": {0}, "wandb check": {0}, "live latency": {1},
            "rows check": {0, 1}, "threshold check": {0, 1}, "anomaly check": {0, 1}}


def measure(env: Env, fig: str, args: list[str] | None, tmp: str,
            rng: random.Random) -> None:
    load = os.getloadavg()[0]
    if args is None:
        wall, cpu, code, out = live_trial(env, tmp, rng)
    else:
        wall, cpu, code, out = timed([env.script, *args], tmp)
    if code not in EXPECTED[fig]:
        raise SystemExit(f"{env.label}: {fig} exited {code} (expected "
                         f"{sorted(EXPECTED[fig])}):\n{out}")
    env.record(fig, wall, cpu, load, code, out)


def run_rounds(envs: list[Env], figures: dict[str, list[str] | None], runs: int,
               tmp: str) -> None:
    rng = random.Random(25)
    log("warm-up: every figure once in every env (page cache, .pyc files)")
    for env in envs:
        for args in figures.values():
            if args is not None:
                timed([env.script, *args], tmp)
    for rnd in range(runs):
        order = envs if rnd % 2 == 0 else envs[::-1]  # neither env always goes first
        for fig, args in figures.items():
            for _ in range(LIVE_PER_RUN if args is None else 1):
                for env in order:
                    measure(env, fig, args, tmp, rng)
            log(f"round {rnd + 1}/{runs} {fig}: " + ", ".join(
                f"{e.label} {e.walls[fig][-1]:.3f} s" for e in envs))


# ---- the report --------------------------------------------------------------------------
def fmt_load(loads: list[float]) -> str:
    return f"{min(loads):.1f}-{max(loads):.1f}"


def figure_rows(env: Env) -> list[list[str]]:
    rows = []
    for fig in ("--version", "small check", "rows check", "wandb check", "live latency"):
        budget, _ = BUDGETS[fig]
        w, c = env.walls[fig], env.cpus[fig]
        med = statistics.median(w)
        rows.append([LABELS[fig], f"<= {budget:g} s", env.label, f"{med:.3f} s",
                     f"{min(w):.3f} s", f"{statistics.median(c):.3f} s", fmt_load(env.loads[fig]),
                     "/".join(map(str, sorted(env.codes[fig]))),
                     "PASS" if med <= budget else "MISS"])
    a, t = env.walls["anomaly check"], env.walls["threshold check"]
    ac, tc = env.cpus["anomaly check"], env.cpus["threshold check"]
    ratio = statistics.median(a) / statistics.median(t)
    budget = BUDGETS["anomaly / threshold"][0]
    rows.append([LABELS["anomaly / threshold"] + f" ({statistics.median(a):.2f} s / "
                 f"{statistics.median(t):.2f} s)", f"<= {budget:g}x", env.label,
                 f"{ratio:.2f}x", f"{min(a) / min(t):.2f}x",
                 f"{statistics.median(ac) / statistics.median(tc):.2f}x",
                 fmt_load(env.loads["anomaly check"] + env.loads["threshold check"]),
                 "/".join(map(str, sorted(env.codes["anomaly check"]
                                          | env.codes["threshold check"]))),
                 "PASS" if ratio <= budget else "MISS"])
    return rows


def report(envs: list[Env], runs: int, took: float, title: str) -> str:
    head = ["figure", "budget", "env", "median", "best", "CPU (median)", "load (1-min)",
            "exit", "budget met"]
    lines = [f"### {title}", "",
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
             f"{runs} interleaved runs per figure and env (the budget is judged on the "
             f"median; the best is beside it), whole run {took / 60:.1f} min.", ""]
    lines += [f"- **{e.label}**: {e.describe}" for e in envs]
    loads = [x for e in envs for v in e.loads.values() for x in v]
    lines += ["", f"Machine load (1-minute average) {min(loads):.1f}-{max(loads):.1f} during the "
              f"runs on {os.cpu_count()} cores."]
    if max(loads) > (os.cpu_count() or 1):
        lines.append("Above the core count other work inflates the wall times: there the CPU "
                     "column (the child's user + system seconds, its forked workers included) "
                     "is the closer estimate of an idle machine's wall time; re-run idle to "
                     "judge the budgets.")
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    per_env = [figure_rows(e) for e in envs]
    for i in range(len(per_env[0])):  # one figure's envs next to each other
        for rows in per_env:
            lines.append("| " + " | ".join(rows[i]) + " |")
    lines.append(f"\nLive latency: {LIVE_PER_RUN * runs} trials per env. Verdicts (-q):")
    for fig in ("small check", "rows check", "wandb check", "threshold check", "anomaly check"):
        said = {e.label: " / ".join(sorted(e.verdicts[fig])) for e in envs}
        if len(set(said.values())) == 1:
            lines.append(f"- {fig}: `{next(iter(said.values()))}` (every env)")
        else:
            lines += [f"- {fig}, **{label}**: `{v}`" for label, v in said.items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--env", action="append", required=True, metavar="LABEL=PYTHON",
                    help="a venv's python with gatekeeper installed (repeatable)")
    ap.add_argument("--runs", type=int, default=5, help="runs per figure and env (default 5)")
    ap.add_argument("--out", metavar="FILE", help="also write the markdown table to FILE")
    ap.add_argument("--title", default="Budgets, before vs after", help="the table's heading")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()
    envs = []
    for spec in args.env:
        label, sep, python = spec.partition("=")
        if not sep or not label or not python:
            ap.error(f"--env {spec!r}: expected LABEL=PYTHON")
        envs.append(Env(label, os.path.abspath(python)))
    start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="gk-budgets-")
    try:
        for env in envs:
            probe(env, tmp)
            log(f"{env.label}: {env.describe}")
        figures: dict[str, list[str] | None] = dict(make_inputs(tmp, envs[0].python))
        figures["live latency"] = None
        log(f"inputs ready in {time.perf_counter() - start:.0f} s")
        run_rounds(envs, figures, args.runs, tmp)
    finally:
        if args.keep:
            log(f"scratch directory kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    text = report(envs, args.runs, time.perf_counter() - start, args.title)
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
