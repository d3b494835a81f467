#!/usr/bin/env bash
# Create ./.venv (Python >= 3.10) with paddle_flashmask and everything its CPU tests and examples need:
# paddlepaddle 3.3.1 (CPU), torch 2.13.0 (CPU), the CuTe DSL (kernels compile for sm_90a without a GPU),
# nvdisasm, PaddleFormers; and ./.venv-paddlenlp for PaddleNLP 3.0.0b4 (the two conflict).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# No pip cache: every wheel is installed once per venv, and CI machines share a disk that is
# sometimes nearly full (a cache would hold a second copy of ~1 GB of wheels).
export PIP_NO_CACHE_DIR=1
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
# The CuTe DSL ships one 190 MB compiler per CUDA flavour. Without a CUDA driver it uses the newest
# (cu13), so a machine with no driver gets only that one; with a driver, both (the DSL picks the one
# the driver supports).
if .venv/bin/python -c "import ctypes; ctypes.CDLL('libcuda.so.1')" 2>/dev/null; then
  dsl=("nvidia-cutlass-dsl[cu13]==4.8.1")
else
  dsl=("nvidia-cutlass-dsl-libs-base==4.8.1" "nvidia-cutlass-dsl-libs-cu13==4.8.1")
fi
quietly .venv/bin/python -m pip install -q \
  "numpy==1.26.4" "paddlepaddle==3.3.1" "torch==2.13.0" "${dsl[@]}" \
  "nvidia-cuda-nvdisasm" "pytest>=8" "hypothesis>=6" "pillow" "tqdm" "pyyaml"
quietly .venv/bin/python -m pip install -q --no-deps "nvidia-cutlass-dsl==4.8.1"
quietly .venv/bin/python -m pip install -q -e . --no-deps
scripts/setup_integration_envs.sh 2> >(grep -v -e '^WARNING: Location' -e 'UserWarning' -e 'warnings.warn' >&2)
.venv/bin/python -W ignore -c "import paddle, torch, cutlass, paddle_flashmask; print('[install] ready: paddle', paddle.__version__, '| torch', torch.__version__, '| paddle_flashmask', paddle_flashmask.__version__)"
