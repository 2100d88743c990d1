"""Limits read from the environment (docs/limits.md, "Limits from the environment"): a
value that is not a finite number in range is exit 2 naming the variable, through the
real CLI, before any request. Before, a word was exit 70 (a ValueError from `float()`;
`GATEKEEPER_MLFLOW_MAX_FILE_BYTES` at import) and NaN or a negative size was taken."""

from __future__ import annotations

import pytest

from tests.helpers import REPO, gatekeeper

CASES = [
    ("prom+http://127.0.0.1:9?query=up&name=u", "GATEKEEPER_PROMETHEUS_TIMEOUT", "abc",
     "0.1 to 3600", "20"),
    ("prom+http://127.0.0.1:9?query=up&name=u", "GATEKEEPER_PROMETHEUS_MAX_BYTES", "-1",
     "1024 to 1099511627776", "67108864"),
    ("prom+http://127.0.0.1:9?query=up&name=u", "GATEKEEPER_PROMETHEUS_RETRY_SECONDS", "inf",
     "0 to 86400", "30"),
    ("mlflow+http://127.0.0.1:9/runs/abc", "GATEKEEPER_MLFLOW_TIMEOUT", "nan",
     "0.1 to 3600", "20"),
    ("wandb://team/project/run1", "GATEKEEPER_WANDB_RETRY_SECONDS", "2 minutes",
     "0 to 86400", "120"),
]


@pytest.mark.parametrize(("source", "name", "value", "bounds", "default"), CASES)
def test_a_limit_that_is_not_a_number_in_range_is_exit_2_naming_it(
    source: str, name: str, value: str, bounds: str, default: str
) -> None:
    proc = gatekeeper("check", source, "-p", "policies", cwd=REPO, env={name: value})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"gatekeeper: error: {name}={value}: expected a number from {bounds}; fix or unset "
        f"it (default {default})"), proc.stderr
