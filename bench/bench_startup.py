"""Benchmark: what a person waits for before gatekeeper does anything.

Wall time of fresh child processes, interleaved so machine noise hits every case alike,
best of N (the floor a quiet machine reaches; the median is printed beside it):

- `python -c pass`                          the interpreter alone, the yardstick
- `gatekeeper --version`                    target <= 2x `python -c pass` (issue 14): the
                                            console script, and `python -m gatekeeper`
- `gatekeeper check RUN -p POLICY`          a 1,000-step x 10-metric JSONL run and a
                                            20-rule policy; target <= 0.25 s on an idle
                                            machine

The machine's load average is printed before and after: figures taken under load are
not the idle targets, only their ratios are comparable.

The children may write .pyc files (PYTHONDONTWRITEBYTECODE is removed from their
environment; the warm-up run writes them), as an installed package has them: without,
every gatekeeper module is compiled from source on each run.
`--against DIR` adds the same gatekeeper cases run from another checkout's `gatekeeper`
package (PYTHONPATH=DIR, e.g. `git archive <rev> gatekeeper | tar -x -C DIR`), interleaved
with these: before/after ratios taken under the same load.

`--installed` also times the checkout as a user installs it: a wheel built from it
(`pip wheel --no-deps`), installed with `--no-deps` into a throwaway venv whose only other
path is this interpreter's site-packages (a .pth line: the dependencies, without the
editable install's finder, which a path added that way never runs), its console script
run side by side with the editable one (setuptools' editable finder costs every import
of the package a lookup: ~13% of the small check).

Usage: python bench/bench_startup.py [--runs N] [--json FILE] [--against DIR] [--installed]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

METRICS = 10
STEPS = 1000
RULES = 20


def write_run(path: str) -> None:
    """Per-step rows as a trainer writes them: one JSON object a line."""
    with open(path, "w") as fh:
        for step in range(STEPS):
            row = {"step": step, **{f"m{i}": 0.5 + 0.001 * ((step * (i + 1)) % 97)
                                   for i in range(METRICS)}}
            fh.write(json.dumps(row) + "\n")


def write_policy(path: str) -> None:
    """Two threshold rules per metric (20 rules): what a CI gate usually holds."""
    with open(path, "w") as fh:
        fh.write("version: 1\nname: startup\nrules:\n")
        for i in range(METRICS):
            fh.write(f"  - {{id: m{i}-max, metric: m{i}, check: {{max: 2}}}}\n")
            fh.write(f"  - {{id: m{i}-min, metric: m{i}, check: {{min: 0}}}}\n")


# what an installed package has: its bytecode (pip compiles it), not a compile per run
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str], env: dict[str, str] | None = None,
          cwd: str | None = None) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one child. On a loaded machine the
    CPU time is the closer estimate of what an idle machine's wall time would be."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env or ENV, cwd=cwd)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu


def install_wheel(tmp: str) -> str:
    """The checkout installed as a user installs it, in a venv under `tmp`; its bin/."""
    venv = os.path.join(tmp, "installed")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    site = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    # the dependencies: this interpreter's site-packages, after the venv's own (a path
    # from a .pth line is not a site dir: the editable install's .pth there is not run)
    with open(os.path.join(site, "_gatekeeper_deps.pth"), "w") as fh:
        fh.write(sysconfig.get_paths()["purelib"] + "\n")
    # built from a copy: setuptools builds in the source tree, and a build/ left in the
    # checkout would carry deleted modules into later wheels
    src = os.path.join(tmp, "src")
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", "node_modules", "out"))
    wheels = os.path.join(tmp, "wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", wheels, src], check=True,
                   capture_output=True)
    (wheel,) = glob.glob(os.path.join(wheels, "gatekeeper-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "--python", os.path.join(venv, "bin", "python"),
                    "install", "--quiet", "--no-deps", "--no-index", wheel], check=True,
                   capture_output=True)
    probe = "import gatekeeper; print(gatekeeper.__file__)"
    where = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c", probe],
        check=True, capture_output=True, text=True, cwd=tmp,
    ).stdout.strip()
    if not where.startswith(site):
        raise SystemExit(f"the installed venv imports gatekeeper from {where}, not {site}")
    return os.path.join(venv, "bin")


def main() -> None:
    tmp = tempfile.mkdtemp(prefix="gk-startup-")
    try:
        bench(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the run, the policy, the installed venv


def bench(tmp: str) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="children per case (default 15)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    ap.add_argument("--against", metavar="DIR",
                    help="also time the gatekeeper package in DIR (another revision)")
    ap.add_argument("--installed", action="store_true",
                    help="also time the checkout installed from a wheel (not editable)")
    args = ap.parse_args()

    run, policy = os.path.join(tmp, "run.jsonl"), os.path.join(tmp, "policy.yaml")
    write_run(run)
    write_policy(policy)
    py = sys.executable
    script = os.path.join(os.path.dirname(py), "gatekeeper")
    cases = {
        "python -c pass": [py, "-c", "pass"],
        "gatekeeper --version": [script, "--version"],
        "python -m gatekeeper --version": [py, "-m", "gatekeeper", "--version"],
        "gatekeeper check (1k x 10, 20 rules)": [py, "-m", "gatekeeper", "check", run,
                                                 "-p", policy, "-q"],
    }
    check_args = ["check", run, "-p", policy, "-q"]
    if args.installed:
        installed = install_wheel(tmp)
        cases["gatekeeper check, console script [editable]"] = [script, *check_args]
        cases["gatekeeper --version [installed]"] = [os.path.join(installed, "gatekeeper"),
                                                     "--version"]
        cases["gatekeeper check, console script [installed]"] = [
            os.path.join(installed, "gatekeeper"), *check_args]
    envs: dict[str, dict[str, str]] = {name: ENV for name in cases}
    if args.against:
        # the console script is this checkout's; `python -m` finds DIR's package first
        other = {**ENV, "PYTHONPATH": os.path.abspath(args.against)}
        for name, cmd in list(cases.items())[2:4]:
            cases[f"{name} [against]"] = cmd
            envs[f"{name} [against]"] = other
    load_before = os.getloadavg()
    # children run in the scratch directory: `python -m` puts the working directory first
    # on sys.path, and a checkout's own `gatekeeper/` there would shadow --against
    for name, cmd in cases.items():  # warm the page cache and .pyc files once
        timed(cmd, envs[name], tmp)
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, cmd in cases.items():
            wall, cpu = timed(cmd, envs[name], tmp)
            times[name].append(wall)
            cpus[name].append(cpu)
    load_after = os.getloadavg()

    best = {name: min(t) for name, t in times.items()}
    base = best["python -c pass"]
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
          f"({os.cpu_count()} CPUs); best of {args.runs}, median in brackets")
    for name, t in times.items():
        print(f"  {name:46} {best[name] * 1000:7.1f} ms ({statistics.median(t) * 1000:7.1f})"
              f"  {best[name] / base:5.2f}x python; CPU {min(cpus[name]) * 1000:7.1f} ms")
    version_ratio = best["gatekeeper --version"] / base
    module_ratio = best["python -m gatekeeper --version"] / base
    check_s = best["gatekeeper check (1k x 10, 20 rules)"]
    print(f"--version / python -c pass = {version_ratio:.2f} (script), {module_ratio:.2f} "
          "(python -m) (target <= 2)")
    check_cpu = min(cpus["gatekeeper check (1k x 10, 20 rules)"])
    print(f"small check = {check_s:.3f} s wall, {check_cpu:.3f} s CPU (target <= 0.25 s idle)")
    if args.installed:
        edit = best["gatekeeper check, console script [editable]"]
        inst = best["gatekeeper check, console script [installed]"]
        print(f"small check, console script: installed {inst:.3f} s wall, editable {edit:.3f} s "
              f"({inst / edit:.2f}x); CPU installed "
              f"{min(cpus['gatekeeper check, console script [installed]']):.3f} s, editable "
              f"{min(cpus['gatekeeper check, console script [editable]']):.3f} s")
    for name in [n for n in cases if n.endswith(" [against]")]:
        mine = name.removesuffix(" [against]")
        print(f"{mine}: {best[mine] / best[name]:.2f}x the --against revision's wall, "
              f"{min(cpus[mine]) / min(cpus[name]):.2f}x its CPU")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"best_s": best, "best_cpu_s": {n: min(c) for n, c in cpus.items()},
                       "median_s": {n: statistics.median(t)
                                                   for n, t in times.items()},
                       "load": [load_before[0], load_after[0]]}, fh, indent=2)


if __name__ == "__main__":
    main()
