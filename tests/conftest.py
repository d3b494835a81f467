"""Shared test setup: kernels compile for sm_90a on machines without a GPU."""
import os
import sys
from pathlib import Path

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
ROOT = Path(__file__).resolve().parents[1]
# tests import helpers such as tests/oracle.py as top-level modules
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
