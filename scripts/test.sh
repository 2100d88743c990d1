#!/usr/bin/env bash
# Install gatekeeper with its test tools (and the PostgreSQL/Prometheus servers the tests
# start, when missing), then lint and type-check the package (both must report 0) and run
# the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --test
.venv/bin/ruff check gatekeeper bench
.venv/bin/mypy gatekeeper
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
