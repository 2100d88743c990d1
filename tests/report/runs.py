"""A run with known failures at known steps, and the policy that finds them."""

from __future__ import annotations

import math
from pathlib import Path

from tests.helpers import write_meta, write_policy, write_record

HOSTILE = 'train/<img src=x onerror="alert(1)">&amp;'  # a metric name is attacker text
SPIKE_STEP = 12345
NAN_STEP = 777
HOSTILE_STEP = 5


def loss(n: int) -> list[tuple[int, float]]:
    out = []
    for s in range(n):
        v = 2.0 * math.exp(-s / 4000) + 0.5 + 0.02 * math.sin(s * 0.7)
        out.append((s, 8.0 if s == SPIKE_STEP else v))
    return out


def failing_run(root: Path, steps: int = 20000) -> tuple[Path, Path]:
    """(run directory, policy file)."""
    run = root / "run"
    write_record(run / "metrics.jsonl", {
        "train/loss": loss(steps),
        "train/ppo_kl": [(0, -0.3)] + [(s, 1e-4) for s in range(1, 50)],
        "train/grad_norm": [(s, float("nan") if s == NAN_STEP else 0.5) for s in range(1000)],
        "rollout/raw_reward": [(s, 0.6 + 0.001 * s) for s in range(100)],
        "train/entropy": [(s, 0.5) for s in range(100)],
        HOSTILE: [(s, 10.0 if s == HOSTILE_STEP else 0.0) for s in range(20)],
    })
    write_meta(run, name="grpo-<b>bold</b>", state="finished", url="https://wandb.example/r/1")
    policy = write_policy(root / "policy.yaml", f"""
        version: 1
        name: demo
        rules:
          - id: loss-spike
            metric: train/loss
            check: {{spike: {{window: 20, factor: 8}}}}
          - id: loss-max
            metric: train/loss
            steps: {{from: 100}}
            check: {{max: 5}}
          - id: kl-step0
            metric: train/ppo_kl
            steps: [0]
            check: {{abs_max: 1.0e-9}}
          - id: grad-finite
            metric: train/grad_norm
            check: {{finite: true}}
          - id: reward-reach
            metric: rollout/raw_reward
            check: {{reach: {{value: 0.75, by_step: 80, window: 5}}}}
          - id: entropy-band
            metric: train/entropy
            check: {{between: [0.1, 1.0]}}
          - id: hostile
            metric: '{HOSTILE}'
            check: {{max: 1}}
            description: '<script>alert(2)</script>'
    """)
    return run, policy
