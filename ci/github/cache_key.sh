#!/usr/bin/env bash
# A step of action.yml: the key of the pip cache the install step fills. It names what
# is installed -- GK_VERSION as written, else this action's ref (GK_ACTION_REF) and
# GK_EXTRAS -- and the interpreter's exact version, so a new release or another Python
# starts a new entry (restoring the nearest older one: pip reuses its wheels). The
# spec is hashed: actions/cache refuses a key with a comma (an extras list) or over 512
# characters (a git URL).
set -euo pipefail

python="${GK_PYTHON:-python3}"
py="$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || echo unknown)"
[ -n "$py" ] || py=unknown
what="${GK_VERSION:-${GK_ACTION_REF:-local}[${GK_EXTRAS:-}]}"
hash="$(printf '%s' "$what" | sha256sum | cut -c1-16)"
prefix="gatekeeper-pip-${GK_OS:-os}-${GK_ARCH:-arch}-py$py-"
{
  echo "key=$prefix$hash"
  echo "restore=$prefix"
} >> "${GITHUB_OUTPUT:?}"
echo "pip cache key: $prefix$hash (for $what)"
