"""Benchmark: what importing gatekeeper costs a training script.

Each figure is measured in fresh child processes (nothing cached in `sys.modules`),
timed inside the child around the import statement, median of N runs:

- `import gatekeeper`                      target < 150 ms (issue #18): a trainer pays it
                                           even when no gate is built
- `from gatekeeper import Gate`            the in-process API (numpy, pydantic, YAML)
- `import gatekeeper.integrations.hf`      the transformers callback (includes transformers)
- `import gatekeeper.integrations.lightning`

and which heavy modules `import gatekeeper` pulled in (must be none of torch,
transformers, lightning, wandb, httpx, apscheduler, prometheus_client); then what one
`Gate.observe` call costs the training step (the shipped policies/, 5 metrics a step,
median over 2,000 steps).
Usage: python bench/bench_import.py [--runs N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

HEAVY = ("torch", "transformers", "lightning", "wandb", "httpx", "apscheduler",
         "prometheus_client")
STATEMENTS = {
    "import gatekeeper": "import gatekeeper",
    "from gatekeeper import Gate": "from gatekeeper import Gate",
    "import gatekeeper.integrations.hf": "import gatekeeper.integrations.hf",
    "import gatekeeper.integrations.lightning": "import gatekeeper.integrations.lightning",
}
TARGET_MS = 150.0


def time_import(statement: str) -> tuple[float, list[str]] | None:
    """Milliseconds the statement took in a fresh interpreter, and the heavy modules
    loaded after it; None when the import fails (an extra not installed)."""
    code = (
        "import sys, time, json\n"
        "t = time.perf_counter()\n"
        f"{statement}\n"
        "ms = (time.perf_counter() - t) * 1000\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print(json.dumps([ms, heavy]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    ms, heavy = json.loads(proc.stdout)
    return ms, heavy


def measure(runs: int) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for label, statement in STATEMENTS.items():
        samples = [time_import(statement) for _ in range(runs)]
        if any(s is None for s in samples):
            out[label] = {"skipped": "import failed (extra not installed?)"}
            continue
        times = [s[0] for s in samples if s is not None]
        heavy = samples[0][1] if samples[0] is not None else []
        out[label] = {"median_ms": round(statistics.median(times), 2),
                      "min_ms": round(min(times), 2), "max_ms": round(max(times), 2),
                      "heavy_modules": sorted({m.split(".")[0] for m in heavy})}
    return out


def observe_cost(steps: int = 2000) -> dict[str, float]:
    """Milliseconds per `Gate.observe` call with the shipped policies."""
    import os
    import time

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from gatekeeper import Gate
    from gatekeeper.gate import ReportOptions

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    gate = Gate(os.path.join(repo, "policies"), echo=False, reports=ReportOptions(quiet=True))
    rules = len(gate.verdict().results)
    times = []
    for step in range(steps):
        row = {"train/step": step, "rollout/step": step, "train/ppo_kl": 0.0,
               "train/loss": 1.0 / (step + 1), "train/grad_norm": 0.5,
               "rollout/raw_reward": 0.5, "train/pg_clipfrac": 0.0}
        t = time.perf_counter()
        gate.observe(None, row)
        times.append((time.perf_counter() - t) * 1000)
    return {"rules": rules, "median_ms": round(statistics.median(times), 3),
            "p99_ms": round(sorted(times)[int(len(times) * 0.99)], 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    results = measure(args.runs)
    for label, r in results.items():
        if "skipped" in r:
            print(f"{label:45} skipped: {r['skipped']}")
            continue
        print(f"{label:45} median {r['median_ms']:8.2f} ms  (min {r['min_ms']}, "
              f"max {r['max_ms']})  heavy: {', '.join(r['heavy_modules']) or 'none'}")
    cost = observe_cost()
    print(f"{'Gate.observe, one step':45} median {cost['median_ms']:8.3f} ms  "
          f"(p99 {cost['p99_ms']} ms, {cost['rules']} rules)")
    results["observe"] = cost  # type: ignore[assignment]
    base = results["import gatekeeper"]
    ok = float(base["median_ms"]) < TARGET_MS and not base["heavy_modules"]
    print(f"target: import gatekeeper < {TARGET_MS:g} ms, no heavy modules: "
          f"{'met' if ok else 'MISSED'}")
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
