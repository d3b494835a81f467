#!/usr/bin/env bash
# Create ./.venv (Python >= 3.10) with paddle_flashmask and everything its CPU tests and examples need:
# paddlepaddle 3.3.1 (CPU), torch 2.13.0 (CPU), the CuTe DSL (kernels compile for sm_90a without a GPU),
# nvdisasm, PaddleFormers; and ./.venv-paddlenlp for PaddleNLP 3.0.0b4 (the two conflict).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

quietly() {  # run a pip step; show its output only if it fails
  if ! "$@" >"$log" 2>&1; then
    grep -v '^WARNING: Location' "$log" >&2
    echo "install.sh: failed: $*" >&2
    exit 1
  fi
}

if [ ! -x .venv/bin/python ]; then
  echo "[install] creating .venv with $("$PY" --version)"
  "$PY" -m venv .venv
fi
echo "[install] paddlepaddle 3.3.1, torch 2.13.0 (CPU), nvidia-cutlass-dsl 4.8.1, test tools -> .venv"
quietly .venv/bin/python -m pip install -q --upgrade pip
# numpy 1.26.4: what PaddleNLP/PaddleFormers are tested with; torch 2.13.0 CPU is a local file on our machines.
quietly .venv/bin/python -m pip install -q \
  "numpy==1.26.4" "paddlepaddle==3.3.1" "torch==2.13.0" "nvidia-cutlass-dsl[cu13]==4.8.1" \
  "nvidia-cuda-nvdisasm" "pytest>=8" "hypothesis>=6" "pillow" "tqdm" "pyyaml"
quietly .venv/bin/python -m pip install -q -e . --no-deps
scripts/setup_integration_envs.sh 2> >(grep -v -e '^WARNING: Location' -e 'UserWarning' -e 'warnings.warn' >&2)
.venv/bin/python -W ignore -c "import paddle, torch, cutlass, paddle_flashmask; print('[install] ready: paddle', paddle.__version__, '| torch', torch.__version__, '| paddle_flashmask', paddle_flashmask.__version__)"
