"""The daemon on a run where nothing is ever judged: live it is a pass (nothing judged
*yet*), once the run ends it is `nothing_judged` -- on the API, the status page and the
Prometheus gauge -- and no alert fires (it is not a failure)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.daemon.harness import POLICY, DaemonProcess, write_config
from tests.daemon.recorder import Recorder


def test_an_ended_run_that_judged_nothing_is_nothing_judged_not_pass(tmp_path: Path) -> None:
    hook = Recorder()
    config = write_config(
        tmp_path, [{"name": "hook", "kind": "webhook", "url": hook.url, "group_wait": 0.2}]
    )
    # the harness's kl policy, for nightly runs only: this run is not one
    (tmp_path / "kl.yaml").write_text(POLICY.replace("rules:", "match: {tags: [nightly]}\nrules:"))
    run = tmp_path / "runs" / "pr.jsonl"
    rows = [{"train/step": s, "train/ppo_kl": 0.001, "train/loss": 1.0} for s in range(5)]
    run.write_text("".join(json.dumps(r) + "\n" for r in rows))
    daemon = DaemonProcess(config).start()
    try:
        assert daemon.wait(lambda: daemon.run("pr")["points"] >= 10), daemon.tail()
        assert daemon.run("pr")["status"] == "pass"  # live: not judged yet, not "nothing"
        with open(run, "a") as fh:
            fh.write(json.dumps({"event": "end", "state": "finished"}) + "\n")
        assert daemon.wait(lambda: daemon.run("pr")["status"] == "nothing_judged"), daemon.tail()
        assert daemon.metric('gatekeeper_runs{status="nothing_judged"}') == 1
        assert daemon.metric('gatekeeper_runs{status="pass"}') == 0
        page = daemon.get("/").text
        assert "b-nothing_judged" in page and "NOTHING JUDGED" in page
        time.sleep(0.6)  # past group_wait: a run that judged nothing pages no one
        assert hook.bodies == []
    finally:
        assert daemon.stop() == 0
        hook.close()
