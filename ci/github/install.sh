#!/usr/bin/env bash
# Step 1 of action.yml: put a `gatekeeper` on PATH for the following steps.
# GK_INSTALL=true: a virtualenv under RUNNER_TEMP with GK_VERSION pip-installed as written
# (default: the action's own checkout with the extras in GK_EXTRAS, e.g. `wandb`); false:
# use the gatekeeper already on PATH.
set -euo pipefail

if [ "${GK_INSTALL:-true}" != "true" ]; then
  command -v gatekeeper >/dev/null || {
    echo "::error title=gatekeeper::install: false, but there is no gatekeeper on PATH"
    exit 2
  }
  echo "using $(command -v gatekeeper) ($(gatekeeper --version))"
  exit 0
fi

venv="${RUNNER_TEMP:?RUNNER_TEMP is set by the runner}/gatekeeper-venv"
spec="${GK_VERSION:-}"
if [ -z "$spec" ]; then
  spec="${GITHUB_ACTION_PATH:?}"
  [ -z "${GK_EXTRAS:-}" ] || spec="$spec[$GK_EXTRAS]"
fi
"${GK_PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$spec"
echo "$venv/bin" >> "${GITHUB_PATH:?}"
echo "installed $("$venv/bin/gatekeeper" --version) into $venv"
