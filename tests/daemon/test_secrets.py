"""No secret reaches the daemon's log, at any level: webhook URLs, signing secrets, the
HTTP token. The real daemon runs at DEBUG, delivers, fails to deliver and is scraped."""

from __future__ import annotations

import logging
from pathlib import Path

from gatekeeper.daemon.logsafe import REDACTED, Redactor
from tests.daemon.harness import DaemonProcess, free_port, write_config, writer
from tests.daemon.recorder import Recorder

HOOK_PATH = "/hook/T0KEN-in-the-path-4711?key=qs-secret-0815"
LARK_SECRET = "lark-signing-s3cret-2323"
HTTP_TOKEN = "http-bearer-t0ken-9090"
DOWN_PATH = "/down/another-s3cret-path-5151"


def test_no_secret_in_the_log_at_debug_level(tmp_path: Path) -> None:
    hook, lark = Recorder(), Recorder(lark_secret=LARK_SECRET)
    hook_url = hook.url + HOOK_PATH[len("/hook") :]
    lark_url = lark.url + "/lark-bot-hook-id-3131"
    down_url = f"http://127.0.0.1:{free_port()}{DOWN_PATH}"  # nobody listens: refused
    config = write_config(
        tmp_path,
        [
            {"name": "hook", "kind": "webhook", "url_env": "T_HOOK", "group_wait": 0.2},
            {
                "name": "lark",
                "kind": "lark",
                "url_env": "T_LARK",
                "secret_env": "T_LARK_SECRET",
                "group_wait": 0.2,
            },
            {
                "name": "down",
                "kind": "slack",
                "url_env": "T_DOWN",
                "group_wait": 0.2,
                "retry_backoff": 0.1,
            },
        ],
        http={"token_env": "T_TOKEN"},
    )
    env = {
        "T_HOOK": hook_url,
        "T_LARK": lark_url,
        "T_LARK_SECRET": LARK_SECRET,
        "T_DOWN": down_url,
        "T_TOKEN": HTTP_TOKEN,
    }
    daemon = DaemonProcess(config, env, level="debug").start()
    kid = writer(tmp_path / "runs" / "bad.jsonl", "--steps", "6", "--bad-at", "2", "--end")
    try:
        kid.wait(30)
        assert hook.wait(lambda: len(hook.bodies) >= 1), daemon.tail()
        assert lark.wait(lambda: len(lark.bodies) >= 1) and lark.bad_signatures == 0
        auth = {"Authorization": f"Bearer {HTTP_TOKEN}"}
        import httpx

        base = f"http://127.0.0.1:{daemon.port}"
        assert httpx.get(f"{base}/metrics", headers=auth, timeout=5).status_code == 200
        assert httpx.get(f"{base}/metrics", timeout=5).status_code == 401
        assert daemon.wait(lambda: "attempt 2 failed" in daemon.log.read_text())
    finally:
        kid.kill()
        assert daemon.stop() == 0
        hook.close(), lark.close()
    log = daemon.log.read_text()
    assert " DEBUG " in log  # the level really was DEBUG
    for secret in (
        hook_url,
        HOOK_PATH,
        "T0KEN-in-the-path-4711",
        "qs-secret-0815",
        lark_url,
        "lark-bot-hook-id-3131",
        LARK_SECRET,
        HTTP_TOKEN,
        down_url,
        DOWN_PATH,
    ):
        assert secret not in log, f"{secret!r} leaked into the log"


def test_the_filter_redacts_messages_arguments_and_tracebacks() -> None:
    red = Redactor()
    red.add("https://hooks.example/services/T1/B2/xyzSECRET")
    record = logging.LogRecord(
        "httpx",
        logging.INFO,
        __file__,
        1,
        "POST %s done",
        ("https://hooks.example/services/T1/B2/xyzSECRET",),
        None,
    )
    try:
        raise ValueError("failed for /services/T1/B2/xyzSECRET")
    except ValueError as exc:
        record.exc_info = (ValueError, exc, exc.__traceback__)
    assert red.filter(record)
    text = logging.Formatter().format(record)
    assert "xyzSECRET" not in text and REDACTED in text and "ValueError" in text
