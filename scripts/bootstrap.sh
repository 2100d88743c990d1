#!/usr/bin/env bash
# Make a fresh clone usable: a virtualenv in .venv with gatekeeper installed editable.
#   scripts/bootstrap.sh            every feature (gatekeeper[all]: the source families, serve,
#                                   PostgreSQL history)
#   scripts/bootstrap.sh --test     plus test tools, the trainer callbacks' libraries and the
#                                   system servers the tests start
#                                   (PostgreSQL and Prometheus from Debian, when missing)
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
extras="[all]"
# `test` takes `all`. The trainer-callback tests (tests/integrations) run the real transformers and Lightning
# trainers; they install into .venv (measured: ~2 min more on a fresh machine).
[ "$want_test" = 1 ] && extras="[test,hf,lightning]"
# Reinstall only when the project definition changed since the last install.
stamp=".venv/.gatekeeper-installed$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "==> installing gatekeeper$extras into .venv"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
  if [ "$want_test" = 1 ]; then
    # torch first, the CPU build pinned, so nothing resolves the multi-GB CUDA build:
    # from a configured wheel directory/index, else from PyTorch's CPU index.
    torch_spec="torch==${GATEKEEPER_TORCH:-2.13.0}+cpu"
    # The CPU build first and pinned: a bare `torch` from PyPI is a multi-GB CUDA build.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "$torch_spec"
  fi
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".$extras"
  touch "$stamp"
fi

if [ "$want_test" = 1 ]; then
  need=()
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
  # The HTML report and status page tests open them in Debian's Chromium (driven by
  # playwright; no browser is ever downloaded).
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v npm >/dev/null 2>&1 || need+=(npm)
  # `gatekeeper completion zsh|fish` is checked in the shells themselves.
  command -v zsh >/dev/null 2>&1 || need+=(zsh)
  command -v fish >/dev/null 2>&1 || need+=(fish)
  if [ ${#need[@]} -gt 0 ]; then
    echo "==> installing system packages for the tests: ${need[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    # The tests start their own throwaway servers; the packaged services are not needed.
    for svc in prometheus postgresql; do
      $SUDO service "$svc" stop >/dev/null 2>&1 || true
    done
  fi

  # Mermaid's own renderer checks the step-summary charts; test-only, kept inside .venv
  # (ignored), never committed.
  if [ ! -f .venv/mermaid/node_modules/mermaid/dist/mermaid.min.js ]; then
    echo "==> installing mermaid (npm) into .venv/mermaid for the tests"
    npm install --prefix .venv/mermaid --no-audit --no-fund --loglevel=error mermaid@11 >/dev/null
  fi
fi
