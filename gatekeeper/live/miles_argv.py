"""A miles trainer's command line read as miles reads it, for the config keys the miles
pack needs: `python3 train.py --rollout-batch-size 8 ...` -> `{"rollout_batch_size": 8,
"lora_rank": 0, ...}`. Pure: no /proc, no files.

The defaults are facts of radixark/miles at 31f1ca961a94cb860cec3b2dea34ec332bfa8f76
(`miles/utils/arguments.py`, and Megatron-LM for `--multi-latent-attention`): a
store_true flag absent is false, `--lora-rank` defaults to 0, `--train-backend` to
megatron, `--n-samples-per-prompt` to 1; `--num-steps-per-rollout` and
`--global-batch-size` default to null (miles derives one from the other; with neither
given Megatron sets the batch from the data-parallel size, which no command line tells,
so then neither key is written and the pack's `requires_config` names the flag to pass).
The FSDP backend has no `--multi-latent-attention` (its parser refuses unknown flags),
so there it is false. Flags are read whole (`--flag VALUE` or `--flag=VALUE`; Megatron's
parser takes no abbreviations); the last occurrence wins, as in argparse.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# miles' entry points at the mirrored commit (the repository root's train scripts)
TRAIN_SCRIPTS = ("train.py", "train_async.py", "train_multi_lora_async.py")
REQUIRED_FLAG = "--rollout-batch-size"  # required=True in miles: every trainer has it

_FLAG, _INT, _TEXT = "flag", "int", "text"
# config key -> (miles flag, kind, default when absent; None for "required")
_SPEC: dict[str, tuple[str, str, Any]] = {
    "train_backend": ("--train-backend", _TEXT, "megatron"),
    "lora_rank": ("--lora-rank", _INT, 0),
    "multi_latent_attention": ("--multi-latent-attention", _FLAG, False),
    "use_rollout_routing_replay": ("--use-rollout-routing-replay", _FLAG, False),
    "use_kl_loss": ("--use-kl-loss", _FLAG, False),
    "rollout_batch_size": (REQUIRED_FLAG, _INT, None),
    "n_samples_per_prompt": ("--n-samples-per-prompt", _INT, 1),
    "global_batch_size": ("--global-batch-size", _INT, None),
    "num_steps_per_rollout": ("--num-steps-per-rollout", _INT, None),
    "ci_load_grad_norm": ("--ci-load-grad-norm", _TEXT, None),
    "hf_checkpoint": ("--hf-checkpoint", _TEXT, None),
    "eval_interval": ("--eval-interval", _INT, None),
}
_BACKENDS = ("megatron", "fsdp")
_BATCH_KEYS = ("num_steps_per_rollout", "global_batch_size")


@dataclass(frozen=True)
class TrainerArgs:
    """What one trainer command line gives: `config` (key -> value, miles' default where
    the flag is absent), `unread` (key -> why it was left out)."""

    script: str
    config: dict[str, Any]
    unread: dict[str, str]


def trainer_args(argv: list[str]) -> tuple[str, list[str]] | None:
    """(script, its arguments) when `argv` runs a miles train script with miles' one
    required flag, else None (a shell, `ray job submit`, a data-loader worker)."""
    for i, token in enumerate(argv):
        if os.path.basename(token) in TRAIN_SCRIPTS:
            rest = argv[i + 1 :]
            if any(t == REQUIRED_FLAG or t.startswith(REQUIRED_FLAG + "=") for t in rest):
                return token, rest
            return None
    return None


def _values(args: list[str]) -> dict[str, str | bool]:
    """flag -> its last value (True for a flag given without one), for the flags read."""
    wanted = {flag: kind for flag, kind, _ in _SPEC.values()}
    out: dict[str, str | bool] = {}
    for i, token in enumerate(args):
        flag, eq, inline = token.partition("=")
        kind = wanted.get(flag)
        if kind is None:
            continue
        if kind == _FLAG:
            out[flag] = True
        elif eq:
            out[flag] = inline
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[flag] = args[i + 1]
        else:
            out[flag] = False  # given without its value: miles' argparse refuses it
    return out


def read_trainer(script: str, args: list[str]) -> TrainerArgs:
    """The config a miles trainer started with `args` runs with, for the keys read."""
    given = _values(args)
    config: dict[str, Any] = {}
    unread: dict[str, str] = {}
    for key, (flag, kind, default) in _SPEC.items():
        raw = given.get(flag)
        if raw is None:
            config[key] = default
            continue
        if raw is False:
            unread[key] = f"{flag} has no value"
        elif kind == _FLAG:
            config[key] = True
        elif kind == _INT:
            try:
                config[key] = int(str(raw))
            except ValueError:
                unread[key] = f"{flag} {raw!r} is not a whole number"
        else:
            config[key] = raw
    backend = config.get("train_backend")
    if backend is not None and backend not in _BACKENDS:
        unread["train_backend"] = f"--train-backend {backend!r} is not one of {_BACKENDS}"
        del config["train_backend"]
    if all(config.get(k) is None for k in _BATCH_KEYS) and not set(_BATCH_KEYS) & set(unread):
        # the steps per rollout follow from the data-parallel size: not on the command line
        for key in _BATCH_KEYS:
            del config[key]
        unread["num_steps_per_rollout"] = (
            "neither --num-steps-per-rollout nor --global-batch-size is given"
        )
    return TrainerArgs(script, config, unread)
