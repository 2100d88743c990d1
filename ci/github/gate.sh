#!/usr/bin/env bash
# Step 2 of action.yml: run `gatekeeper check` or `gatekeeper run` with the action's
# inputs (GK_* variables), write the reports, set the step outputs, and exit with
# gatekeeper's code (0 when the gate failed -- 1 -- or judged nothing -- 5 -- and
# GK_FAIL_ON_GATE is not true).
set -uo pipefail

fail() { echo "::error title=gatekeeper action::$1"; echo "status=invalid" >> "$GITHUB_OUTPUT"; exit 2; }

report_dir="${GK_REPORT_DIR:-gatekeeper-reports}"
mkdir -p "$report_dir"
echo "report-dir=$report_dir" >> "$GITHUB_OUTPUT"

args=()
read -ra policies <<< "$(tr '\n' ' ' <<< "${GK_POLICIES:-}")"
[ ${#policies[@]} -gt 0 ] || fail "the policies input is empty"
for p in "${policies[@]}"; do args+=(-p "$p"); done
while IFS= read -r line; do
  [ -n "${line// /}" ] && args+=(--override "$line")
done <<< "${GK_OVERRIDES:-}"

# The JSON report always exists: the outputs are read from it.
json="$report_dir/gatekeeper.json"
keep_json=0
read -ra reports <<< "$(tr '\n' ' ' <<< "${GK_REPORTS:-}")"
for kind in "${reports[@]}"; do
  case "$kind" in
    json) keep_json=1 ;;
    junit) args+=(--junit "$report_dir/gatekeeper.xml") ;;
    html)
      if gatekeeper "${GK_COMMAND:-check}" --help 2>/dev/null | grep -q -- '--html'; then
        args+=(--html "$report_dir/gatekeeper.html")
      else
        echo "::notice title=gatekeeper::html report skipped: this gatekeeper has no --html"
      fi ;;
    *) fail "unknown report '$kind' (known: json junit html)" ;;
  esac
done
[ "$keep_json" = 1 ] || json="${RUNNER_TEMP:-/tmp}/gatekeeper-$$.json"
args+=(--json "$json")
rm -f "$json"  # a report left from an earlier run must not speak for this one

# `args` is shell-quoted text (like a command line); split it without evaluating it.
if [ -n "${GK_ARGS:-}" ]; then
  split='import shlex, sys; sys.stdout.write("".join(a + "\0" for a in shlex.split(sys.argv[1])))'
  python3 -c "$split" "$GK_ARGS" >/dev/null 2>&1 || fail "cannot split the args input: $GK_ARGS"
  mapfile -d '' -t extra < <(python3 -c "$split" "$GK_ARGS")
  args+=("${extra[@]}")
fi

case "${GK_COMMAND:-check}" in
  check)
    [ -n "${GK_SOURCE:-}" ] || fail "command check needs the source input"
    gatekeeper check "$GK_SOURCE" "${args[@]}" ;;
  run)
    [ -n "${GK_RUN_COMMAND:-}" ] || fail "command run needs the run-command input"
    [ -n "${GK_SOURCE:-}" ] && args+=(--source "$GK_SOURCE")
    gatekeeper run "${args[@]}" -- bash -c "$GK_RUN_COMMAND" ;;
  *) fail "unknown command '${GK_COMMAND}' (check or run)" ;;
esac
code=$?
echo "exit-code=$code" >> "$GITHUB_OUTPUT"

if [ -s "$json" ]; then
  python3 - "$json" >> "$GITHUB_OUTPUT" <<'PY'
import json, sys
verdict = json.load(open(sys.argv[1]))
gating = [r for r in verdict["results"]
          if r["mode"] == "enforce" and r["severity"] == "fail" and r["status"] in ("fail", "error")]
print(f"status={verdict['status']}")
print("failing=" + ",".join(f"{r['policy']}/{r['rule']}" for r in gating))
PY
elif [ "$code" = 2 ]; then
  echo "status=invalid" >> "$GITHUB_OUTPUT"
else
  echo "status=crashed" >> "$GITHUB_OUTPUT"
fi

if [ "$code" = 1 ] && [ "${GK_FAIL_ON_GATE:-true}" != "true" ]; then
  echo "::warning title=gatekeeper::the gate failed; fail-on-gate is false, so the step passes"
  exit 0
fi
# 5: a gate that judged nothing (every gating rule skipped) is a gate result too
if [ "$code" = 5 ] && [ "${GK_FAIL_ON_GATE:-true}" != "true" ]; then
  echo "::warning title=gatekeeper::the gate judged nothing; fail-on-gate is false, so the step passes"
  exit 0
fi
exit "$code"
