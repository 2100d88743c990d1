#!/usr/bin/env bash
# Install gatekeeper and gate the shipped example runs against the shipped policies:
# a healthy run passes; a run whose step-0 ppo_kl is -0.3 (which miles' signed assert
# `ppo_kl < 1e-8` lets through) fails. Exits 0 when both verdicts are as expected.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
mkdir -p out
gk=.venv/bin/gatekeeper

echo; echo "==> gatekeeper check examples/runs/healthy -p policies"
set +e
$gk check examples/runs/healthy -p policies --json out/healthy.json --junit out/healthy.xml
healthy=$?
echo; echo "==> gatekeeper check examples/runs/broken-kl -p policies"
$gk check examples/runs/broken-kl -p policies --json out/broken-kl.json --junit out/broken-kl.xml
broken=$?
set -e
echo
echo "healthy run: exit $healthy (expected 0); broken run: exit $broken (expected 1)"
echo "reports: out/healthy.json out/healthy.xml out/broken-kl.json out/broken-kl.xml"
[ "$healthy" = 0 ] && [ "$broken" = 1 ]
