#!/usr/bin/env bash
# Install the integration dependencies (idempotent; safe to re-run).
#
#   main environment ($PYTHON; default: <repo>/.venv/bin/python if scripts/install.sh made it, else python3):
#       paddleformers==1.2.0 (+ transformers 5.3, tokenizers 0.22) and pyarrow==21.0.0.
#       paddlepaddle and torch are never replaced: their installed versions are pinned as
#       constraints. numpy is pinned to the installed version too: PaddleFormers' only
#       numpy<=1.26.4 requirement comes from `fast_dataindex`, a compiled helper used solely by its
#       *pretraining* dataset (paddleformers/data/causal_dataset.py), so we install PaddleFormers'
#       other requirements and leave fast_dataindex out instead of downgrading numpy for everyone.
#       paddlecodec is left out (and removed if present): it installs a top-level `torchcodec`
#       package without torchcodec's metadata, which makes every transformers torch model fail to
#       import (audio_utils reads torchcodec's version). PaddleFormers only uses it to decode videos.
#   .venv-paddlenlp (isolated venv, NOT --system-site-packages: PaddleNLP 3.0.0b4 needs
#       tokenizers<0.22 and numpy<=1.26.4, which conflict with PaddleFormers/transformers 5, and a
#       shadowing venv would still leak system transformers into it):
#       paddlepaddle==3.3.1 paddlenlp==3.0.0b4 numpy==1.26.4 pyarrow==21.0.0 aistudio-sdk==0.2.6 pytest.
#       paddle_flashmask itself is put on the venv's path with a .pth file pointing at the repo.
#
# Usage: scripts/setup_integration_envs.sh [--main-only | --paddlenlp-only]
# Env:   PYTHON (main environment, see above); VENV (default <repo>/.venv-paddlenlp).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
VENV="${VENV:-$REPO/.venv-paddlenlp}"
DO_MAIN=1; DO_NLP=1
case "${1:-}" in
  --main-only) DO_NLP=0 ;;
  --paddlenlp-only) DO_MAIN=0 ;;
  "") ;;
  *) echo "usage: $0 [--main-only | --paddlenlp-only]" >&2; exit 2 ;;
esac

PF_VERSION=1.2.0
# PaddleFormers 1.2.0's requirements minus fast_dataindex and paddlecodec (see above) and paddlefleet (extra).
PF_DEPS=(colorlog scikit-learn multiprocess "datasets>=3.0.0" tqdm sentencepiece "huggingface_hub>=0.19.2"
         "protobuf>=3.20.2" visualdl safetensors "aistudio-sdk>=0.3.0" jinja2
         regex tiktoken ml_dtypes omegaconf modelscope "transformers>=5.0.0,<5.4.0" GPUtil
         importlib_metadata librosa binpacking orjson "pyarrow==21.0.0")

export PIP_NO_CACHE_DIR=${PIP_NO_CACHE_DIR:-1}  # see scripts/install.sh

quiet_pip() {  # pip, minus this machine's noise about absent local index folders
  "$@" 2> >(grep -v '^WARNING: Location' >&2)
}

installed_version() {  # installed_version <python> <dist> -> version or empty
  "$1" - "$2" <<'PY' 2>/dev/null || true
import importlib.metadata as m, sys
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    pass
PY
}

if [[ $DO_MAIN == 1 ]]; then
  if [[ -n "$(installed_version "$PYTHON" paddlecodec)" ]]; then
    echo "[setup] main env: removing paddlecodec (its 'torchcodec' shim breaks transformers' torch models)"
    quiet_pip "$PYTHON" -m pip uninstall -y -q paddlecodec
  fi
  have_pf="$(installed_version "$PYTHON" paddleformers)"
  if [[ "$have_pf" == "$PF_VERSION" ]] && "$PYTHON" -c "import paddleformers.nn.attention, transformers, pyarrow" 2>/dev/null; then
    echo "[setup] main env: paddleformers $have_pf already installed"
  else
    cons="$(mktemp)"; trap 'rm -f "$cons"' EXIT
    for dist in numpy torch paddlepaddle; do
      v="$(installed_version "$PYTHON" "$dist")"
      [[ -n "$v" ]] && echo "$dist==$v" >> "$cons"
    done
    echo "[setup] main env: pinning $(tr '\n' ' ' < "$cons")"
    quiet_pip "$PYTHON" -m pip install -q -c "$cons" "${PF_DEPS[@]}"
    quiet_pip "$PYTHON" -m pip install -q --no-deps "paddleformers==$PF_VERSION"
    "$PYTHON" -c "import paddleformers.nn.attention, transformers; print('[setup] main env OK: paddleformers', __import__('paddleformers').__version__, 'transformers', transformers.__version__)"
  fi
fi

if [[ $DO_NLP == 1 ]]; then
  if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "import paddlenlp, paddle, pytest; assert paddlenlp.__version__.startswith('3.0.0b4')" 2>/dev/null; then
    echo "[setup] $VENV: paddlenlp already installed"
  else
    [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
    nlp_reqs=(paddlepaddle==3.3.1 paddlenlp==3.0.0b4 numpy==1.26.4 pyarrow==21.0.0 aistudio-sdk==0.2.6
              pytest pyyaml)
    # Most of what PaddleNLP needs (paddlepaddle, numpy, scipy, pyarrow, ...) is in the main env
    # already at the same version: ask pip what it would install, hard-link those from the main
    # env (scripts/seed_venv.py), then install the rest. Saves ~1.3 GB of disk.
    main_site="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    nlp_site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    report="$(mktemp)"
    if quiet_pip "$VENV/bin/python" -m pip install -q --dry-run --report "$report" "${nlp_reqs[@]}"; then
      "$VENV/bin/python" "$REPO/scripts/seed_venv.py" "$report" "$main_site" "$nlp_site"
    fi
    rm -f "$report"
    quiet_pip "$VENV/bin/python" -m pip install -q "${nlp_reqs[@]}"
  fi
  site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$REPO" > "$site/paddle_flashmask_repo.pth"
  "$VENV/bin/python" -c "import paddlenlp, paddle; print('[setup] paddlenlp venv OK: paddlenlp', paddlenlp.__version__, 'paddle', paddle.__version__)"
fi
