#!/usr/bin/env bash
# Install everything (scripts/install.sh) and run the main job: the packed-SFT recipe on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
exec .venv/bin/python examples/sft/train.py "$@"
