"""How policy loading scales: 100 / 1,000 / 10,000 rules and 1 MB / 10 MB descriptions.

    .venv/bin/python bench/bench_policy_load.py [--repeat 3] [--max-rules 10000]

Each size is loaded with `gatekeeper.policy.loader.load_policies` in a fresh child process
(so one size's garbage does not slow the next), `--repeat` times; the median is printed
with the time per rule (or per MB), which stays flat when loading is linear. Wall and CPU time
are both shown: on a shared machine CPU time is the steadier figure. Before the
fixes of issue 11 a 10 MB description took 47 s (quadratic) and 100k rules over 120 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

RULE = """\
  - id: r{i}
    metric: train/m{i}
    steps: [0]
    check: {{abs_max: 1.0e-9}}
    when: {{config.lora_rank: {{gt: 0}}}}
    description: rule {i}
"""

TIMER = textwrap.dedent(
    """
    import sys, time
    from gatekeeper.checks import registry
    from gatekeeper.policy.loader import load_policies
    registry()  # imports every check module: a one-off cost, not the file's
    start, cpu = time.perf_counter(), time.process_time()
    specs = load_policies([sys.argv[1]])
    print(time.perf_counter() - start, time.process_time() - cpu)
    """
)


def rules_policy(path: Path, n: int) -> Path:
    with open(path, "w") as fh:
        fh.write("version: 1\nname: bench\nrules:\n")
        for i in range(n):
            fh.write(RULE.format(i=i))
    return path


def description_policy(path: Path, megabytes: int) -> Path:
    words = ("loss spikes after warmup; " * 40)[:1000]
    text = (words * (megabytes * 1024 * 1024 // len(words) + 1))[: megabytes * 1024 * 1024]
    path.write_text(
        f'version: 1\nname: bench\ndescription: "{text}"\n'
        "rules:\n  - id: r\n    metric: a\n    check: {max: 1}\n"
    )
    return path


def timed(path: Path, repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds (CPU time is the steadier figure on a shared machine)."""
    wall, cpu = [], []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", TIMER, str(path)], capture_output=True, text=True, check=True
        )
        w, c = out.stdout.split()
        wall.append(float(w))
        cpu.append(float(c))
    return statistics.median(wall), statistics.median(cpu)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-rules", type=int, default=10_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("| policy | file size | load, wall (median) | load, CPU (median) | CPU per unit |")
        print("|---|---|---|---|---|")
        n = 100
        while n <= args.max_rules:
            path = rules_policy(root / f"r{n}.yaml", n)
            wall, cpu = timed(path, args.repeat)
            size = path.stat().st_size / 1e6
            print(
                f"| {n:,} rules | {size:.2f} MB | {wall:.2f} s | {cpu:.2f} s "
                f"| {cpu / n * 1e3:.2f} ms/rule |"
            )
            n *= 10
        for mb in (1, 10):
            path = description_policy(root / f"d{mb}.yaml", mb)
            wall, cpu = timed(path, args.repeat)
            print(
                f"| {mb} MB description | {mb} MB | {wall:.2f} s | {cpu:.2f} s "
                f"| {cpu / mb:.2f} s/MB |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
