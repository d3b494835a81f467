#!/usr/bin/env bash
# Install everything (scripts/install.sh) and run the whole CPU test suite, kernel compile checks
# for sm_90a included. GPU tests skip cleanly without an SM90 GPU. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
export CUTE_DSL_ARCH=${CUTE_DSL_ARCH:-sm_90a}
exec .venv/bin/python -m pytest -q tests "$@"
