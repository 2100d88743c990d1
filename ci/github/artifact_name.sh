#!/usr/bin/env bash
# A step of action.yml: the upload's artifact name. GK_ARTIFACT_NAME when given; else
# gatekeeper-reports-JOB-INDEX, the job id and its matrix index (0 outside a matrix), so
# the jobs of one matrix, which share a job id, never upload under the same name.
# Characters upload-artifact refuses (" : < > | * ? \ / CR LF) become '-'.
set -euo pipefail

name="${GK_ARTIFACT_NAME:-}"
if [ -z "$name" ]; then
  name="gatekeeper-reports-${GK_JOB:-job}-${GK_JOB_INDEX:-0}"
fi
name="$(printf '%s' "$name" | tr '":<>|*?\\/\r\n' '-----------')"
echo "name=$name" >> "${GITHUB_OUTPUT:?}"
echo "artifact name: $name"
