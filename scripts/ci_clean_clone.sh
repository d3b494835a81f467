#!/usr/bin/env bash
# Run CI as CI does: a clean clone of HEAD (committed files only) in a temporary folder, then
# .ci/run there. The clone (~5 GB once installed) is removed on exit, pass or fail, since
# machines here share one disk: leftover clones once filled it and broke the real CI.
# Usage: scripts/ci_clean_clone.sh [pytest args...]   Log: the clone's output on stdout.
# Env: PFM_DEMO=1 also runs the README's main job (./scripts/demo.sh) there first, as a new user.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
clone="$(mktemp -d "${TMPDIR:-/tmp}/pfm_ci.XXXXXX")"
trap 'rm -rf "$clone"' EXIT
git clone -q "$repo" "$clone/repo"
echo "[ci_clean_clone] $(git -C "$clone/repo" log --oneline -1) in $clone/repo; $(df -h --output=avail "$clone" | tail -1) free"
cd "$clone/repo"
start=$(date +%s)
rc=0
if [ "${PFM_DEMO:-0}" = 1 ]; then
  ./scripts/demo.sh || rc=$?
  echo "[ci_clean_clone] demo exit $rc after $(( $(date +%s) - start )) s"
fi
.ci/run "$@" || rc=$?
echo "[ci_clean_clone] exit $rc after $(( $(date +%s) - start )) s"
exit $rc
