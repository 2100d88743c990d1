#!/usr/bin/env bash
# Install gatekeeper with its test tools (and the PostgreSQL/Prometheus servers the tests
# start, when missing), then run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --test
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
