#!/usr/bin/env bash
# Create ./.venv (Python >= 3.10) with paddle_flashmask and everything its CPU tests and examples need:
# paddlepaddle 3.3.1 (CPU), torch 2.13.0 (CPU), the CuTe DSL (kernels compile for sm_90a without a GPU),
# nvdisasm, PaddleFormers. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
# numpy<2 because paddleformers' pyarrow pin needs it; torch 2.13.0 CPU is a local file on our machines.
.venv/bin/python -m pip install -q \
  "numpy==1.26.4" "paddlepaddle==3.3.1" "torch==2.13.0" "nvidia-cutlass-dsl[cu13]==4.8.1" \
  "nvidia-cuda-nvdisasm" "pytest>=8" "hypothesis>=6" "pillow" "tqdm" "pyyaml" 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -m pip install -q -e . --no-deps 2>&1 | grep -v '^WARNING: Location' || true
if [ -x scripts/setup_integration_envs.sh ]; then
  scripts/setup_integration_envs.sh
fi
.venv/bin/python -c "import paddle, torch, cutlass, paddle_flashmask; print('installed: paddle', paddle.__version__, '| torch', torch.__version__, '| cutlass-dsl', cutlass.__version__ if hasattr(cutlass, '__version__') else '?', '| paddle_flashmask', paddle_flashmask.__version__)"
