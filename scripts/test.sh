#!/usr/bin/env bash
# Install gatekeeper with its test tools (and the PostgreSQL/Prometheus servers the tests
# start, when missing), then lint and type-check the package (both must report 0) and run
# the whole test suite, on 3 workers (pytest-xdist; each test file on one worker, so a
# file's module fixtures are made once; on 2 cores 3 workers keep them busier while
# tests wait on child processes and servers: 679 -> 609-613 s of pytest). Extra
# arguments go to pytest (`-n 0`: one process, as a debugger wants).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --test
.venv/bin/ruff check gatekeeper bench
.venv/bin/mypy gatekeeper
# Bytecode caches on (ignored __pycache__/ folders), whatever the caller's environment: the
# suite starts ~650 Python processes that import gatekeeper, and each xdist worker
# collects every test module; with PYTHONDONTWRITEBYTECODE set each of them compiled the
# package (+0.15 s a CLI child) and re-wrote every test module's asserts (collection
# 23.5 -> 17.5 s of CPU a worker, measured 2026-12-07).
unset PYTHONDONTWRITEBYTECODE
exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 -n 3 --dist loadfile "$@"
