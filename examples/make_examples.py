"""Write the example runs under examples/runs/ (deterministic; rerun to regenerate).

- healthy/       a miles-style run directory: two per-process metric-history records and
                 run.json, matching the DeepSeek-V4.1-Flash recipe expectations
- broken-kl/     the same run, but train and rollout log-probs disagree at step 0
                 (ppo_kl = -0.3: miles' signed `ppo_kl < 1e-8` assert passes it)
- rows.jsonl     per-step rows (`{"train/step": 3, "train/loss": 0.41}`) with a NaN loss
- seeds/seed-N/  five more healthy runs of the same recipe (seeds 1-5): the trusted runs
                 `gatekeeper suggest` derives bands from in docs/toolkit.md
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runs")
STEPS = 100
# Four optimizer steps per rollout: miles' check_kl judges the first step of each rollout
# (train/step % 4 == 0), where the policy has not moved yet and ppo_kl is ~0.
STEPS_PER_ROLLOUT = 4


def _clean(v: float) -> float | str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return round(float(v), 8)


def healthy_series(seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(STEPS)
    reward = 0.5 + 0.35 * (1 - np.exp(-t / 25)) + rng.normal(0, 0.02, STEPS)
    reward[0] = 0.5
    ppo_kl = np.concatenate([[0.0], np.abs(rng.normal(0, 3e-4, STEPS - 1))])
    clipfrac = np.concatenate([[0.0], rng.uniform(0.01, 0.08, STEPS - 1)])
    ppo_kl[::STEPS_PER_ROLLOUT] = 0.0
    clipfrac[::STEPS_PER_ROLLOUT] = 0.0
    return {
        "train/ppo_kl": ppo_kl,
        "train/pg_clipfrac": clipfrac,
        "train/kl_loss": np.concatenate([[0.0], np.abs(rng.normal(0, 1e-3, STEPS - 1))]),
        "train/loss": 0.4 - 0.1 * (1 - np.exp(-t / 40)) + rng.normal(0, 0.01, STEPS),
        "train/grad_norm": np.concatenate([[0.155], rng.uniform(0.12, 0.3, STEPS - 1)]),
        "train/train_rollout_logprob_abs_diff": 0.0246 + rng.normal(0, 0.001, STEPS),
        "train/train_rollout_kl": 0.00145 + rng.normal(0, 0.0001, STEPS),
        "rollout/raw_reward": reward,
        "perf/rollout_time": 50 + rng.normal(0, 2, STEPS),
        "perf/train_time": 30 + rng.normal(0, 1, STEPS),
    }


def write_record_dir(path: str, series: dict[str, np.ndarray], meta: dict) -> None:
    os.makedirs(path, exist_ok=True)
    names = sorted(series)
    # miles writes one record per process: the trainer and the rollout manager.
    for pid, wanted in (("1201-6f1c", "train/"), ("1202-a93e", ("rollout/", "perf/"))):
        with open(os.path.join(path, f"{pid}.jsonl"), "w") as fh:
            for name in names:
                if name.startswith(wanted):
                    points = [[i, _clean(v)] for i, v in enumerate(series[name])]
                    fh.write(json.dumps({"metric": name, "series": points}) + "\n")
    with open(os.path.join(path, "run.json"), "w") as fh:
        json.dump(meta, fh, indent=2)
        fh.write("\n")


def write_rows(path: str, series: dict[str, np.ndarray]) -> None:
    with open(path, "w") as fh:
        for i in range(STEPS):
            train = {"train/step": i}
            train.update({k: _clean(v[i]) for k, v in series.items() if k.startswith("train/")})
            rollout = {"rollout/step": i}
            rollout.update(
                {k: _clean(v[i]) for k, v in series.items() if k.startswith(("rollout/", "perf/"))}
            )
            fh.write(json.dumps(train) + "\n" + json.dumps(rollout) + "\n")


def main() -> None:
    meta = {
        "name": "qwen3-4b-grpo-e2e",
        "tags": ["e2e", "megatron"],
        "config": {
            "hf_checkpoint": "/root/models/DeepSeek-V4.1-bf16",
            # what the miles pack reads to pick its check_kl variant (requires_config);
            # start_rollout_id 0: a fresh run, as miles logs it (a resume logs null)
            "train_backend": "megatron",
            "start_rollout_id": 0,
            "lora_rank": 0,
            "multi_latent_attention": False,
            "num_steps_per_rollout": STEPS_PER_ROLLOUT,
            "use_rollout_routing_replay": False,
            "use_kl_loss": True,
        },
        "state": "finished",
    }
    good = healthy_series()
    write_record_dir(os.path.join(HERE, "healthy"), good, meta)
    broken = {k: v.copy() for k, v in good.items()}
    broken["train/ppo_kl"][0] = -0.3
    broken["train/train_rollout_logprob_abs_diff"][0] = 10.2
    write_record_dir(os.path.join(HERE, "broken-kl"), broken, {**meta, "name": "qwen3-4b-grpo-e2e-broken"})
    rows = {k: v.copy() for k, v in good.items()}
    rows["train/loss"][37] = math.nan
    write_rows(os.path.join(HERE, "rows.jsonl"), rows)
    for seed in range(1, 6):
        name = f"seed-{seed}"
        write_record_dir(os.path.join(HERE, "seeds", name), healthy_series(seed), {**meta, "name": name})


if __name__ == "__main__":
    main()
