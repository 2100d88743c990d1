#!/usr/bin/env bash
# The release job (.github/workflows/release.yml), run in a full checkout on the pushed
# tag: `release.sh vX.Y.Z`.
# - The tag must be vMAJOR.MINOR.PATCH and match pyproject.toml's version.
# - CHANGELOG.md must have a `## [X.Y.Z]` section: its text becomes the release notes
#   (written to $NOTES_FILE, default release-notes.md). No entry, no release.
# - The major tag (v1 for v1.4.2) is moved to the release commit and pushed to $REMOTE
#   (default origin): `uses: OWNER/gatekeeper@v1` gets the newest v1.x.y.
set -euo pipefail

fail() { echo "::error title=release::$1" >&2; exit 1; }

tag="${1:?usage: release.sh vX.Y.Z}"
[[ "$tag" =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] || fail "tag $tag is not vMAJOR.MINOR.PATCH"
version="${tag#v}"
major="v${BASH_REMATCH[1]}"
declared="$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -n1)"
[ "$declared" = "$version" ] || fail "tag $tag but pyproject.toml says version = \"$declared\""

notes="${NOTES_FILE:-release-notes.md}"
# The section's lines: from its heading (exclusive) to the next `## ` heading.
awk -v v="$version" '
  /^## / { if (inside) exit; if (index($0, "## [" v "]") == 1) { inside = 1; next } }
  inside { print }
' CHANGELOG.md > "$notes"
grep -q '[^[:space:]]' "$notes" ||
  fail "CHANGELOG.md has no \`## [$version]\` section with text: write the entry, then tag"

commit="$(git rev-parse "$tag^{commit}")"
git tag -f "$major" "$commit"
git push -f "${REMOTE:-origin}" "refs/tags/$major"
echo "released $tag: $major -> $commit; notes in $notes"
