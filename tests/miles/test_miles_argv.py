"""A miles trainer's command line read into the config the miles pack needs, with miles'
own defaults (radixark/miles 31f1ca961a94cb860cec3b2dea34ec332bfa8f76,
miles/utils/arguments.py; Megatron-LM's store_true --multi-latent-attention), and the
test identity read from the test file CMD runs."""

from __future__ import annotations

import shlex
from pathlib import Path

from gatekeeper.live.miles_argv import read_trainer, trainer_args
from gatekeeper.live.miles_config import read_test_file
from tests.miles.fake_e2e import GATED, MODEL_ARGS, SUITE, TEST_PATH, TRAIN_ARGS, write_checkout


def _config(flags: str, script: str = "/root/miles/train.py") -> tuple[dict, dict]:
    hit = trainer_args(["python3", script, *shlex.split(flags)])
    assert hit is not None
    got = read_trainer(*hit)
    return got.config, got.unread


def test_the_qwen3_30b_a3b_baseline_command_line() -> None:
    """test_qwen3_30B_A3B/test_baseline's trainer: 2 steps per rollout, kl loss on, and
    --use-routing-replay (not R3's --use-rollout-routing-replay)."""
    config, unread = _config(f"{MODEL_ARGS} {TRAIN_ARGS}")
    assert unread == {}
    assert config == {
        "train_backend": "megatron", "lora_rank": 0, "multi_latent_attention": False,
        "use_rollout_routing_replay": False, "use_kl_loss": True, "rollout_batch_size": 8,
        "n_samples_per_prompt": 8, "global_batch_size": 32, "num_steps_per_rollout": None,
        "ci_load_grad_norm": None,
        "hf_checkpoint": "/root/models/Qwen3-30B-A3B", "eval_interval": None,
    }


def test_flags_given_set_their_keys_and_the_last_one_wins() -> None:
    config, unread = _config(
        "--rollout-batch-size=16 --num-steps-per-rollout 4 --lora-rank 8 --lora-rank=32 "
        "--multi-latent-attention --use-rollout-routing-replay --train-backend fsdp "
        "--ci-metric-checker-key eval/gsm8k --ci-load-grad-norm /tmp/g_{step_id}.pt"
    )
    assert unread == {}
    assert config["rollout_batch_size"] == 16 and config["num_steps_per_rollout"] == 4
    assert config["lora_rank"] == 32 and config["train_backend"] == "fsdp"
    assert config["multi_latent_attention"] is True
    assert config["use_rollout_routing_replay"] is True and config["use_kl_loss"] is False
    assert config["n_samples_per_prompt"] == 1  # miles' default
    assert config["global_batch_size"] is None
    # MetricChecker judges eval/*, which a CI record never holds: its keys are not read
    assert "ci_metric_checker_key" not in config
    assert config["ci_load_grad_norm"] == "/tmp/g_{step_id}.pt"


def test_steps_per_rollout_no_command_line_tells_are_not_guessed() -> None:
    """Neither --num-steps-per-rollout nor --global-batch-size: Megatron sizes the batch
    from the data-parallel size, so the key is left out and named."""
    config, unread = _config("--rollout-batch-size 8 --n-samples-per-prompt 8")
    assert "num_steps_per_rollout" not in config and "global_batch_size" not in config
    assert "neither --num-steps-per-rollout nor --global-batch-size" in unread[
        "num_steps_per_rollout"]


def test_unreadable_values_are_left_out_with_the_reason() -> None:
    config, unread = _config("--rollout-batch-size 8 --global-batch-size 8 --lora-rank x "
                             "--train-backend jax --num-steps-per-rollout")
    assert "lora_rank" not in config and "not a whole number" in unread["lora_rank"]
    assert "train_backend" not in config and "'jax'" in unread["train_backend"]
    assert "has no value" in unread["num_steps_per_rollout"]


def test_only_a_miles_train_script_with_its_required_flag_is_a_trainer() -> None:
    assert trainer_args(["/bin/sh", "-c", "python3 train.py --rollout-batch-size 8"]) is None
    assert trainer_args(["python3", "train.py", "--lr", "1e-6"]) is None  # no required flag
    assert trainer_args(["python3", "other.py", "--rollout-batch-size", "8"]) is None
    hit = trainer_args(["python3", "/m/train_async.py", "--rollout-batch-size", "8"])
    assert hit == ("/m/train_async.py", ["--rollout-batch-size", "8"])
    # `ray job submit ... -- python3 train.py FLAGS`: the submitting client names the same flags
    ray = ["ray", "job", "submit", "--", "python3", "/m/train.py", "--rollout-batch-size", "4"]
    assert trainer_args(ray) == ("/m/train.py", ["--rollout-batch-size", "4"])


def test_the_test_file_gives_the_history_identity_and_ci_gate(tmp_path: Path) -> None:
    write_checkout(tmp_path)
    found = read_test_file(["python3", TEST_PATH], str(tmp_path))
    assert found.config == {"test_path": TEST_PATH, "backend": "cuda", "suite": SUITE,
                            "ci_gate": list(GATED)}
    assert found.notes == []


def test_a_declaration_with_its_own_steps_gives_no_ci_gate(tmp_path: Path) -> None:
    test = tmp_path / "tests" / "test_x.py"
    test.parent.mkdir()
    test.write_text('register_cuda_ci(est_time=1, suite="s")\n'
                    'register_ci_gate(metric_key="train/ppo_kl", steps="all")\n')
    found = read_test_file(["python3", str(test)], str(tmp_path))
    assert "ci_gate" not in found.config and found.config["suite"] == "s"
    assert any("own steps/constraint" in n for n in found.notes)


def test_a_test_that_may_run_on_another_stage_gives_no_suite(tmp_path: Path) -> None:
    """register_cuda_ci(hardware=[...]) with two arches (miles #2701): the stage that ran
    it is not in the file, so the suite is asked for, never the home stage guessed."""
    test = tmp_path / "tests" / "test_y.py"
    test.parent.mkdir()
    test.write_text('register_cuda_ci(est_time=1, suite="stage-c-8-gpu-h200", '
                    'hardware=["hopper", "blackwell"])\n')
    found = read_test_file(["python3", "tests/test_y.py"], str(tmp_path))
    assert found.config == {"test_path": "tests/test_y.py", "backend": "cuda", "ci_gate": []}
    assert any("--config suite=STAGE" in n for n in found.notes)
