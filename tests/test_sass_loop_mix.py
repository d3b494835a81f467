"""scripts/sass_loop_mix.py: loop finding on a synthetic listing, and one real sm_90a compile (CPU)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "sass_loop_mix.py"


def _module():
    spec = importlib.util.spec_from_file_location("sass_loop_mix", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


# A loop with a skippable block, and an out-of-line mbarrier retry stub after EXIT that branches
# back into the loop (must not be taken for a loop).
_LISTING = """
\t.text.kern:
        /*0000*/                   MOV R1, R2 ;
.L_x_1:
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3 ;
        /*0020*/              @!P0 BRA `(.L_x_9) ;
.L_x_2:
        /*0030*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
        /*0040*/              @!P1 BRA `(.L_x_3) ;
        /*0050*/                   FSEL R24, R24, RZ, P2 ;
        /*0060*/                   FSEL R25, R25, RZ, P2 ;
.L_x_3:
        /*0070*/                   FFMA R24, R24, R5, R6 ;
        /*0080*/               @P3 BRA `(.L_x_1) ;
        /*0090*/                   EXIT ;
.L_x_9:
        /*00a0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3 ;
        /*00b0*/              @!P0 BRA `(.L_x_9) ;
        /*00c0*/                   BRA `(.L_x_2) ;
"""


def test_loop_finding_on_listing():
    mod = _module()
    (instrs, labels), = mod.parse_functions(_LISTING).values()
    loops = mod.hgmma_loops("kern", instrs, labels)
    assert len(loops) == 1  # the stub's branch back to .L_x_2 is not a loop (EXIT in range)
    loop = loops[0]
    assert (loop.header_label, loop.instructions) == (".L_x_1", 8)
    assert loop.histogram["HGMMA"] == 1 and sum(loop.histogram.values()) == loop.instructions
    assert [(b.branch_addr, b.instructions) for b in loop.skip_blocks] == [("0x0040", 2)]
    assert loop.exits == ["0x0020 -> .L_x_9"]


def test_real_backward_loop():
    from sass_harness import sass_loop_mix

    loops, report = sass_loop_mix("bwd", "--head-dim", "64")
    assert loops, report
    for loop in loops:
        assert loop["histogram"].get("HGMMA", 0) > 0
        assert sum(loop["histogram"].values()) == loop["instructions"]
        for block in loop["skip_blocks"]:
            assert 0 <= block["instructions"] < loop["instructions"]
