"""Benchmark: the engine's cost of one live poll — `Evaluation.feed` of the new points
plus `verdict` — for 20 rules over 4 metrics (every selection kind, reduce, `for`,
spike, trend, fraction, flat, `when`, a policy `match`, `steps: {every: config.k}`).

Per poll each metric gets NEW new points (default 1,000; 10 is a usual live poll, where
the per-rule overhead dominates). Reported: the median and the best per-poll CPU time
(process_time: the machine is shared, wall time moves with its load) over POLLS polls
after WARM warm-up polls, in microseconds. Pure engine: no source, no I/O.

Compare two trees by running this file with each on PYTHONPATH, interleaved:
    PYTHONPATH=/old/tree python bench/bench_poll.py --new 1000
Usage: python bench/bench_poll.py [--new N] [--polls P] [--warm W]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

POLICY = """version: 1
name: bench
match: {config: {task: {eq: rl}}}
rules:
  - {id: kl-max, metric: kl, check: {abs_max: 1.0}}
  - {id: kl-first, metric: kl, steps: first, check: {abs_max: 1.0}}
  - {id: kl-list, metric: kl, steps: [0, 10, 1000000], check: {abs_max: 1.0}}
  - {id: kl-every, metric: kl, steps: {every: config.rollout}, check: {abs_max: 1.0}}
  - {id: loss-max-for, metric: loss, check: {max: 10}, for: 3}
  - {id: loss-between, metric: loss, check: {between: [0, 10]}}
  - {id: loss-spike, metric: loss, check: {spike: {window: 20, factor: 50}}}
  - {id: loss-trend, metric: loss, check: {trend: {window: 50, max_slope: 1.0}}}
  - {id: loss-mean-early, metric: loss, steps: {from: 0, to: 100}, reduce: mean,
     check: {max: 10}}
  - {id: loss-median, metric: loss, reduce: median, check: {max: 10}}
  - {id: loss-last, metric: loss, steps: last, check: {max: 10}}
  - {id: loss-tail, metric: loss, steps: {last: 50}, check: {max: 10}}
  - {id: grad-flat, metric: grad, check: {flat: {window: 50, min_std: 1.0e-9}}}
  - {id: grad-fraction, metric: grad, check: {fraction: {above: 0.999, max: 0.5}}}
  - {id: grad-range, metric: grad, steps: {from: 100}, check: {max: 1}}
  - {id: grad-when, metric: grad, when: {config.lr: {lt: 1}}, check: {max: 1}}
  - {id: reward-min, metric: reward, check: {min: -1}}
  - {id: reward-max, metric: reward, reduce: max, check: {max: 2}}
  - {id: reward-off, metric: reward, when: {config.lr: {gt: 1}}, check: {max: 1}}
  - {id: reward-min-for, metric: reward, check: {min: -1}, for: 5}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new", type=int, default=1000)
    ap.add_argument("--polls", type=int, default=200)
    ap.add_argument("--warm", type=int, default=20)
    args = ap.parse_args()
    from gatekeeper.engine import Evaluation
    from gatekeeper.model import Run, Series
    from gatekeeper.policy.loader import load_policy

    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "bench.yaml")
        with open(path, "w") as fh:
            fh.write(POLICY)
        policies = [load_policy(path)]
    rng = np.random.default_rng(0)
    ev = Evaluation(policies)
    config = {"task": "rl", "rollout": 8, "lr": 0.001, "model": {"layers": 32, "heads": 16}}
    times = []
    for poll in range(args.warm + args.polls):
        steps = np.arange(poll * args.new, (poll + 1) * args.new, dtype=np.int64)
        series = {
            name: Series(name, steps, rng.uniform(lo, hi, args.new), "step")
            for name, lo, hi in (("kl", 0, 1e-3), ("loss", 0.9, 1.1), ("grad", 0.1, 0.3),
                                 ("reward", 0, 1))
        }  # fmt: skip
        run = Run(name="r", source="bench", config=dict(config))  # a new Run each poll
        run.series = {k: Series.empty(k) for k in series}
        start = time.process_time()
        ev.feed(series)
        verdict = ev.verdict(run, final=False)
        took = time.process_time() - start
        if poll >= args.warm:
            times.append(took)
    assert len(verdict.results) == 20
    median, best = statistics.median(times) * 1e6, min(times) * 1e6
    print(f"poll of {args.new} new points x 4 metrics, 20 rules: CPU median {median:.0f} us, "
          f"best {best:.0f} us ({args.polls} polls)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
