"""A stand-in for one real miles E2E test, `tests/e2e/megatron/test_qwen3_30B_A3B/test_baseline.py`
at radixark/miles 31f1ca961a94cb860cec3b2dea34ec332bfa8f76, as gatekeeper meets it under
`gatekeeper run --miles`:

- the test file registers itself as that file does (`register_cuda_ci(suite=
  "stage-c-4-gpu-h200", ...)`, five `register_ci_gate(metric_key=...)` calls);
- run, it starts the trainer the way miles' `execute_train` does through Ray: a
  supervisor in a session of its own (the raylet's job supervisor) runs, through
  `/bin/sh -c`, `python3 <checkout>/train.py <model args> <train args>`; the flags are
  those `_common.build_train_args` and `scripts/models/qwen3-30B-A3B.py` give for that
  test's CASE (no WANDB_API_KEY, MILES_TEST_TIGHT_HOST_MEMORY=1, eval off);
- the trainer trains `rollout_batch_size * n_samples_per_prompt // global_batch_size`
  steps per rollout (8 * 8 // 32 = 2) for `--num-rollout` rollouts, and writes CI
  records into MILES_CI_GATE_RECORD_DIR as CiHistoryBackend does (capture.py).

    python fake_e2e.py supervise TRAIN_PY FLAGS...   # the job supervisor
    python fake_e2e.py train FLAGS...                # the trainer (via the checkout's train.py)

Test knobs (environment, so the documented command lines stay as written):
FAKE_MILES_BAD_STEP (that train step logs ppo_kl = 0.05), FAKE_MILES_STEP_DELAY (seconds
per train step, default 0.05), FAKE_MILES_NUM_ROLLOUT (instead of --num-rollout).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEST_PATH = "tests/e2e/megatron/test_qwen3_30B_A3B/test_baseline.py"
SUITE = "stage-c-4-gpu-h200"
GATED = (
    "train/grad_norm",
    "train/ppo_kl",
    "train/train_rollout_logprob_abs_diff",
    "train/train_rollout_kl",
    "rollout/raw_reward",
)

# scripts/models/qwen3-30B-A3B.py (48 layers, rotary base 1e6, no dense layer first)
MODEL_ARGS = (
    "--disable-bias-linear --qk-layernorm --group-query-attention --num-attention-heads 32 "
    "--num-query-groups 4 --kv-channels 128 --num-layers 48 --hidden-size 2048 "
    "--ffn-hidden-size 6144 --normalization RMSNorm --position-embedding-type rope "
    "--norm-epsilon 1e-6 --rotary-percent 1.0 --swiglu --untie-embeddings-and-output-weights "
    "--vocab-size 151936 --rotary-base 1000000 --moe-ffn-hidden-size 768 "
    "--moe-router-score-function softmax --moe-token-dispatcher-type alltoall "
    "--moe-router-topk 8 --moe-layer-freq '[" + ",".join(["1"] * 48) + "]' "
    "--num-experts 128 --moe-grouped-gemm --moe-token-drop-policy probs "
    "--moe-router-dtype fp32 --moe-permute-fusion --moe-aux-loss-coeff 0"
)
# _common.build_train_args for test_baseline's CASE
TRAIN_ARGS = (
    "--hf-checkpoint /root/models/Qwen3-30B-A3B --ref-load /root/Qwen3-30B-A3B_torch_dist "
    "--prompt-data /root/datasets/dapo-math-17k/dapo-math-17k.jsonl --input-key prompt "
    "--label-key label --apply-chat-template --rollout-shuffle --rm-type deepscaler "
    "--num-rollout 2 --rollout-batch-size 8 --n-samples-per-prompt 8 "
    "--rollout-max-response-len 8192 --rollout-temperature 1 --global-batch-size 32 "
    "--balance-data --optimizer adam --lr 1e-6 --lr-decay-style constant --weight-decay 0.1 "
    "--adam-beta1 0.9 --adam-beta2 0.98 --optimizer-cpu-offload "
    "--overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer "
    "--advantage-estimator gspo --use-kl-loss --kl-loss-coef 0.00 --kl-loss-type low_var_kl "
    "--kl-coef 0.00 --entropy-coef 0.00 --eps-clip 4e-4 --use-tis --use-routing-replay "
    "--tensor-model-parallel-size 1 --sequence-parallel --pipeline-model-parallel-size 2 "
    "--context-parallel-size 2 --expert-model-parallel-size 2 --expert-tensor-parallel-size 1 "
    "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
    "--use-dynamic-batch-size --max-tokens-per-gpu 8192 --exp-avg-dtype fp16 "
    "--exp-avg-sq-dtype fp16 --main-params-dtype fp16 "
    "--eval-prompt-data aime24 /root/datasets/aime-2024/aime-2024.jsonl "
    "--n-samples-per-eval-prompt 1 --eval-max-response-len 16384 --eval-top-k 1 "
    "--rollout-num-gpus-per-engine 4 --sglang-mem-fraction-static 0.7 "
    "--sglang-max-running-requests 512 --sglang-enable-metrics --ci-test "
    "--attention-dropout 0.0 --hidden-dropout 0.0 --accumulate-allreduce-grads-in-fp32 "
    "--attention-softmax-in-fp32 --attention-backend flash --actor-num-nodes 1 "
    "--actor-num-gpus-per-node 4 --colocate --rematerialize-param-from-master-weight "
    "--object-store-backend mooncake --mooncake-store-init-kwargs "
    "'{\"protocol\": \"tcp\", \"master_server_address\": \"127.0.0.1:50051\", "
    "\"global_segment_size\": \"2gb\", \"local_buffer_size\": \"2gb\"}' "
    "--moe-token-dispatcher-type alltoall"
)

_TEST_FILE = '''"""gatekeeper's stand-in for miles' {test_path} (see {me})."""
import sys

sys.path.insert(0, {repo!r})
from tests.miles.fake_e2e import register_ci_gate, register_cuda_ci  # noqa: E402

register_cuda_ci(
    est_time=1100, suite={suite!r}, labels=["megatron", "weight-update", "short", "mooncake"]
)

{gates}

if __name__ == "__main__":
    from tests.miles.fake_e2e import launch

    sys.exit(launch({train_py!r}))
'''

_TRAIN_PY = '''import sys

sys.path.insert(0, {repo!r})
from tests.miles.fake_e2e import train  # noqa: E402

sys.exit(train(sys.argv[1:]))
'''


def write_checkout(root: Path) -> Path:
    """A miles checkout holding the test file and `train.py`; returns the test file."""
    root = root.resolve()
    test_file = root / TEST_PATH
    test_file.parent.mkdir(parents=True, exist_ok=True)
    train_py = root / "train.py"
    train_py.write_text(_TRAIN_PY.format(repo=str(REPO)))
    gates = "\n".join(f"register_ci_gate(metric_key={m!r})" for m in GATED)
    test_file.write_text(_TEST_FILE.format(
        test_path=TEST_PATH, me=Path(__file__).name, repo=str(REPO), suite=SUITE,
        gates=gates, train_py=str(train_py),
    ))
    return test_file


def register_cuda_ci(**_: object) -> None:
    """miles' registration calls do nothing when the test runs (the CI reads them)."""


register_ci_gate = register_cuda_ci


def launch(train_py: str) -> int:
    """`execute_train`: the trainer runs under a supervisor in a session of its own."""
    flags = shlex.split(MODEL_ARGS) + shlex.split(TRAIN_ARGS)
    sup = [sys.executable, __file__, "supervise", train_py, *flags]
    return subprocess.Popen(sup, start_new_session=True).wait()


def supervise(train_py: str, flags: list[str]) -> int:
    line = shlex.join([sys.executable, train_py, *flags])
    return subprocess.call(["/bin/sh", "-c", line])


def train(flags: list[str]) -> int:
    sys.path.insert(0, str(REPO))
    from tests.miles.capture import CiCapture, Variant, miles_log

    p = argparse.ArgumentParser(allow_abbrev=False)
    for flag in ("--num-rollout", "--rollout-batch-size", "--n-samples-per-prompt",
                 "--global-batch-size"):
        p.add_argument(flag, type=int)
    p.add_argument("--use-kl-loss", action="store_true")
    args, _ = p.parse_known_args(flags)
    steps = args.rollout_batch_size * args.n_samples_per_prompt // args.global_batch_size
    rollouts = int(os.environ.get("FAKE_MILES_NUM_ROLLOUT") or args.num_rollout)
    bad = os.environ.get("FAKE_MILES_BAD_STEP")
    delay = float(os.environ.get("FAKE_MILES_STEP_DELAY", "0.05"))
    record_dir = Path(os.environ["MILES_CI_GATE_RECORD_DIR"])
    # loading the model (minutes in miles): the trainer runs a while before its first
    # record, longer than `run`'s default 1 s poll, so `run` sees it as it would miles'
    time.sleep(2.0)
    procs = {"trainer": CiCapture(record_dir, os.getpid()),
             "rollout": CiCapture(record_dir, os.getpid() + 1)}
    variant = Variant(num_steps_per_rollout=steps, use_kl_loss=args.use_kl_loss)
    for process, metrics, step_key in miles_log(variant, rollouts):
        if bad is not None and metrics.get("train/step") == int(bad):
            metrics = {**metrics, "train/ppo_kl": 0.05}
        procs[process].log(metrics, step_key)
        if process == "trainer":
            print(f"STEP {metrics['train/step']}", flush=True)
            time.sleep(delay)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "supervise":
        sys.exit(supervise(sys.argv[2], sys.argv[3:]))
    sys.exit(train(sys.argv[2:]))
