"""One chat card for a CI run's gate jobs (G20), posted to a real local HTTP server.

Gate jobs run `gatekeeper check --json` as CI runs them (child processes, each stamped
with its job's label and link); a last step runs `gatekeeper notify` over their reports.
Jobs failing the same way fold into one group that keeps each job's link (miles #3197's
card, with the daemon's grouping); `check`/`run --notify` post their one job's card.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.daemon.recorder import Recorder
from tests.helpers import gatekeeper, write_policy, write_record

POLICY = """
version: 1
name: ci
rules:
  - {id: kl-zero, metric: train/ppo_kl, steps: [0], check: {abs_max: 1.0e-9}}
  - {id: loss-max, metric: train/loss, check: {max: 10}}
"""
SECRET = "s3cr3t-lark"


def gate_job(tmp_path: Path, job: str, kl0: float, loss: float = 1.0, *extra: str):
    """One CI job: judge its run, write its JSON report; the job's page is its link."""
    rec = write_record(tmp_path / job / "run.jsonl",
                       {"train/ppo_kl": [(0, kl0), (1, 0.1)], "train/loss": [(0, loss)]})
    out = tmp_path / "reports" / job / "gate.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    res = gatekeeper("check", str(rec), "-p", str(tmp_path / "ci.yaml"), "--json", str(out),
                     "--job", job, "--job-url", f"https://ci.example/run/7/job/{job}", *extra)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return out, res


def a_ci_run(tmp_path: Path) -> list[str]:
    write_policy(tmp_path / "ci.yaml", POLICY)
    reports = [
        gate_job(tmp_path, "stage-a (0)", kl0=0.25)[0],  # these two fail alike
        gate_job(tmp_path, "stage-a (1)", kl0=0.5)[0],
        gate_job(tmp_path, "stage-b", kl0=0.0, loss=float("nan"))[0],  # another failure
        gate_job(tmp_path, "stage-c", kl0=0.0)[0],  # passes: not on the card
    ]
    return [str(r) for r in reports]


def test_one_signed_lark_card_folds_identical_failures_and_keeps_each_link(tmp_path):
    reports = a_ci_run(tmp_path)
    lark = Recorder(lark_secret=SECRET)
    env = {"LARK_HOOK": lark.url, "LARK_SECRET": SECRET}
    res = gatekeeper("notify", *reports, "--notify", "lark:LARK_HOOK:LARK_SECRET", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "posted 1 card: 3 alert(s) of 3 of 4 job(s) in 2 group(s)" in res.stdout
    assert lark.requests == 1 and lark.bad_signatures == 0 and len(lark.bodies) == 1
    card = lark.bodies[0]["card"]
    assert card["header"]["title"]["content"] == "gatekeeper: 2 firing, 0 resolved"
    texts = [e["text"]["content"] for e in card["elements"] if e["tag"] == "div"]
    assert len(texts) == 2
    kl, loss = texts
    assert kl.startswith("**FAIL: ci/kl-zero on 2 runs**")
    for job in ("stage-a (0)", "stage-a (1)"):
        assert f"[{job}](https://ci.example/run/7/job/{job})" in kl
    assert "stage-b" not in kl and "stage-c" not in kl
    assert loss.startswith("**ERROR: ci/loss-max on 1 run**")
    assert "[stage-b](https://ci.example/run/7/job/stage-b)" in loss
    assert "stage-c" not in json.dumps(card)
    assert lark.url not in res.stdout + res.stderr and SECRET not in res.stdout + res.stderr


def test_slack_gets_the_same_groups(tmp_path):
    reports = a_ci_run(tmp_path)
    slack = Recorder()
    res = gatekeeper("notify", *reports, "--notify", "slack:SLACK_HOOK",
                     env={"SLACK_HOOK": slack.url})
    assert res.returncode == 0, res.stdout + res.stderr
    (body,) = slack.bodies
    sections = [b["text"]["text"] for b in body["blocks"] if b["type"] == "section"]
    assert len(sections) == 2 and "ci/kl-zero on 2 runs" in sections[0]
    assert "<https://ci.example/run/7/job/stage-a (1)|stage-a (1)>" in sections[0]


def test_nothing_failing_posts_nothing_and_nothing_judged_is_carded(tmp_path):
    write_policy(tmp_path / "ci.yaml", POLICY)
    ok, _ = gate_job(tmp_path, "green", kl0=0.0)
    hook = Recorder()
    res = gatekeeper("notify", str(ok), "--notify", "webhook:HOOK", env={"HOOK": hook.url})
    assert res.returncode == 0 and "nothing to post (1 report(s)" in res.stdout
    assert hook.requests == 0
    # a job whose every gating rule was skipped judged nothing (exit 5): never silent
    write_policy(tmp_path / "none.yaml", "version: 1\nname: clip\nrules:\n  - {id: clip, "
                 "metric: train/pg_clipfrac, if_logged: true, check: {max: 1}}\n")
    rec = write_record(tmp_path / "n" / "run.jsonl", {"train/ppo_kl": [(0, 0.0)]})
    none = tmp_path / "none.json"
    judged = gatekeeper("check", str(rec), "-p", str(tmp_path / "none.yaml"), "--json",
                        str(none), "--job", "lora-only")
    assert judged.returncode == 5, judged.stdout + judged.stderr
    res = gatekeeper("notify", str(ok), str(none), "--notify", "webhook:HOOK",
                     env={"HOOK": hook.url})
    assert res.returncode == 0, res.stdout + res.stderr
    (group,) = hook.bodies[0]["groups"]
    assert group["rule"] == "nothing-judged" and group["alerts"][0]["run"] == "lora-only"


def test_a_bad_report_or_a_refused_post_is_exit_2_without_the_url(tmp_path):
    reports = a_ci_run(tmp_path)
    (tmp_path / "junk.json").write_text('{"not": "a report"}')
    hook = Recorder()
    bad = gatekeeper("notify", *reports, str(tmp_path / "junk.json"), "--notify",
                     "webhook:HOOK", env={"HOOK": hook.url})
    assert bad.returncode == 2 and "junk.json: not a gatekeeper JSON report" in bad.stderr
    assert hook.requests == 0  # nothing half-posted
    unset = gatekeeper("notify", *reports, "--notify", "webhook:NOT_SET_HOOK")
    assert unset.returncode == 2 and "NOT_SET_HOOK is not set" in unset.stderr
    echo: list[str] = []
    refusing = Recorder(script=lambda n: (400, {}, f"bad hook {echo[0]}".encode()))
    echo.append(refusing.url)
    res = gatekeeper("notify", *reports, "--notify", "webhook:HOOK",
                     env={"HOOK": refusing.url})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "card failed" in res.stderr and "rejected with 400" in res.stderr
    assert refusing.url not in res.stdout + res.stderr and "[redacted]" in res.stderr


def test_check_notify_posts_its_job_and_keeps_the_gate_exit_code(tmp_path):
    write_policy(tmp_path / "ci.yaml", POLICY)
    hook = Recorder()
    github = {"GITHUB_JOB": "stage-c-8-gpu-b200", "GITHUB_SERVER_URL": "https://github.com",
              "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "42", "GITHUB_RUN_ATTEMPT": "2",
              "HOOK": hook.url}
    rec = write_record(tmp_path / "r" / "run.jsonl", {"train/ppo_kl": [(0, 0.3)],
                                                      "train/loss": [(0, 1.0)]})
    out = tmp_path / "gate.json"
    res = gatekeeper("check", str(rec), "-p", str(tmp_path / "ci.yaml"), "--json", str(out),
                     "--notify", "webhook:HOOK", env=github)
    assert res.returncode == 1, res.stdout + res.stderr  # the gate's code, not the post's
    job = {"name": "stage-c-8-gpu-b200",
           "url": "https://github.com/o/r/actions/runs/42/attempts/2"}
    assert json.loads(out.read_text())["run"]["ci_job"] == job
    (group,) = hook.bodies[0]["groups"]
    assert group["alerts"][0]["run"] == job["name"] and group["alerts"][0]["url"] == job["url"]
    # a post that fails warns; the verdict still decides the exit code
    down = gatekeeper("check", str(rec), "-p", str(tmp_path / "ci.yaml"), "--notify",
                      "webhook:UNSET_HOOK")
    assert down.returncode == 1 and "warning: notify webhook" in down.stderr


def test_run_notify_posts_the_card_of_the_command_it_watched(tmp_path):
    write_policy(tmp_path / "ci.yaml", POLICY)
    hook = Recorder()
    metrics = tmp_path / "m.jsonl"
    writer = ("import json,sys; f=open(sys.argv[1],'w'); "
              "f.write(json.dumps({'train/step':0,'train/ppo_kl':0.7,'train/loss':1.0})+'\\n')")
    res = gatekeeper("run", "-p", str(tmp_path / "ci.yaml"), "--source", str(metrics),
                     "--notify", "webhook:HOOK", "--job", "e2e", "--json",
                     str(tmp_path / "v.json"), "--", sys.executable, "-c", writer, str(metrics),
                     env={"HOOK": hook.url})
    assert res.returncode == 1, res.stdout + res.stderr
    (group,) = hook.bodies[0]["groups"]
    assert group["rule"] == "kl-zero" and group["alerts"][0]["run"] == "e2e"
    assert json.loads((tmp_path / "v.json").read_text())["run"]["ci_job"]["name"] == "e2e"


def test_run_notify_warns_of_an_unset_url_before_the_command_starts(tmp_path):
    """The warning came only after the run (when the card was to be posted); it now comes
    before CMD starts too. Still a warning, the gate's verdict the exit code: a CI job
    without the secret (a fork's pull request) still gates."""
    write_policy(tmp_path / "ci.yaml", POLICY)
    metrics = tmp_path / "m.jsonl"
    writer = ("import json,sys; print('CMD STARTED', file=sys.stderr, flush=True); "
              "open(sys.argv[1],'w').write(json.dumps({'train/step':0,'train/ppo_kl':0.0,"
              "'train/loss':1.0})+'\\n')")
    res = gatekeeper("run", "-p", str(tmp_path / "ci.yaml"), "--source", str(metrics),
                     "--notify", "webhook:NOT_SET_HOOK", "--", sys.executable, "-c", writer,
                     str(metrics))
    warning = ("gatekeeper: warning: notify webhook: notifier webhook: environment variable "
               "NOT_SET_HOOK is not set (it holds the webhook URL)")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stderr.index(warning) < res.stderr.index("CMD STARTED"), res.stderr


def test_a_receiver_that_fails_once_gets_the_card_on_the_retry(tmp_path):
    """The daemon's Channel delivers: a 503 is retried (backoff), still one card."""
    reports = a_ci_run(tmp_path)
    flaky = Recorder(script=lambda n: (503, {}, b"busy") if n == 0 else None)
    res = gatekeeper("notify", *reports, "--notify", "webhook:HOOK", env={"HOOK": flaky.url})
    assert res.returncode == 0, res.stdout + res.stderr
    assert flaky.requests == 2 and len(flaky.bodies) == 1
    assert [g["rule"] for g in flaky.bodies[0]["groups"]] == ["kl-zero", "loss-max"]
    assert "attempt 1 failed: webhook: server error 503" in res.stderr
