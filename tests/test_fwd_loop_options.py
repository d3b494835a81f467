"""Forward main-loop options, on the CPU (their numbers are for the H200: tests/gpu/fwd_check.py
with the env switch, scripts/gpu_session.sh calls 46 and 71-72; the lazy rescale is a default at
D = 128 since session 15):

* FwdConfig.uniform_q: Q's wgmma descriptors from the warpgroup's warp-uniform slice -- no
  vector-to-uniform register moves before the Q·Kᵀ wgmmas;
* FwdConfig.rescale_threshold: the lazy O rescale -- O's 64 multiplies in a block a warp skips
  when none of its rows moved its max;
* FwdConfig.edge_pass: a partial tile's sequence-edge compares and selects in a block of their
  own, run only on a tile that reaches past Sk;
* FwdConfig.mask_pred_chain: one predicate chain and one select per element of a partial tile;
* FwdConfig.row_max_chains: the softmax's row max as independent fmax chains.
"""
from __future__ import annotations

import pytest

from paddle_flashmask.ops.cute import flash_fwd_sm90 as fwd

def test_uniform_q_config_rule(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(fwd.UNIFORM_Q_ENV, raising=False)
    monkeypatch.delenv(fwd.STAGE_FIRST_ENV, raising=False)
    for d in (128, 256):  # off by default there (session 30: D = 128 1.001-1.014x slower)
        cfg = interface.forward_config("bfloat16", d, True, 1, False)
        assert not cfg.uniform_q and not cfg.stage_first, d
    for causal, columns in ((True, 1), (False, None), (False, 4)):  # on at D = 64 (0.964-0.971x)
        cfg = interface.forward_config("bfloat16", 64, causal, columns, False)
        assert cfg.uniform_q and cfg.stage_first, (causal, columns)
    monkeypatch.setenv(fwd.UNIFORM_Q_ENV, "0")
    monkeypatch.setenv(fwd.STAGE_FIRST_ENV, "0")
    cfg = interface.forward_config("bfloat16", 64, True, 1, False)
    assert not cfg.uniform_q and not cfg.stage_first
    monkeypatch.setenv(fwd.UNIFORM_Q_ENV, "1")
    for d, causal, columns in ((64, True, 1), (128, True, None), (128, False, 4), (256, True, 2)):
        assert interface.forward_config("bfloat16", d, causal, columns, False).uniform_q, d
    monkeypatch.setenv(fwd.UNIFORM_Q_ENV, "on")
    with pytest.raises(ValueError, match=fwd.UNIFORM_Q_ENV):
        interface.forward_config("bfloat16", 128, True, 1, False)


def _main_loop(env: dict, *form: str) -> dict:
    """The forward's main loop (d128, causal unless ``form`` says otherwise) under ``env``: its
    opcode histogram and skip blocks."""
    from sass_harness import sass_loop_mix

    loops, _ = sass_loop_mix("fwd", "--head-dim", "128", *(form or ("--causal",)), **env)
    assert len(loops) == 1, loops
    return loops[0]


def test_q_descriptors_stay_in_uniform_registers():
    pytest.importorskip("cutlass")
    # the edge pass off: its own tile-end compare brings one R2UR of its own
    base = _main_loop({fwd.UNIFORM_Q_ENV: "0", fwd.EDGE_PASS_ENV: "0"})["histogram"]
    uniform = _main_loop({fwd.UNIFORM_Q_ENV: "1", fwd.EDGE_PASS_ENV: "0"})["histogram"]
    # per-thread slice: each Q·Kᵀ wgmma's descriptor is moved from vector registers (R2UR)
    assert base.get("R2UR", 0) >= 8
    assert "R2UR" not in uniform
    # same wgmmas, same softmax, fewer instructions
    for op in ("HGMMA", "MUFU", "FFMA", "FMNMX", "F2FP", "BAR"):
        assert uniform.get(op) == base.get(op), op
    assert sum(uniform.values()) < sum(base.values())


def test_rescale_threshold_config_rule(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(fwd.RESCALE_THRESHOLD_ENV, raising=False)
    # by default (session 15's A/B) at D = 64 and 256, and at D = 128 for every form but full
    for d, causal, columns in ((128, True, None), (128, True, 1), (128, True, 2), (128, False, 2),
                               (128, False, 4), (64, False, None), (64, True, 1),
                               (256, False, None), (256, False, 2)):
        cfg = interface.forward_config("bfloat16", d, causal, columns, False)
        assert cfg.rescale_threshold == 8.0, (d, causal, columns)
    assert interface.forward_config("bfloat16", 128, False, None, False).rescale_threshold == 0.0
    for d in (96, 192):
        assert interface.forward_config("bfloat16", d, True, 1, False).rescale_threshold == 0.0, d
    monkeypatch.setenv(fwd.RESCALE_THRESHOLD_ENV, "0")
    assert interface.forward_config("bfloat16", 128, True, 1, False).rescale_threshold == 0.0
    monkeypatch.setenv(fwd.RESCALE_THRESHOLD_ENV, "8")
    assert interface.forward_config("bfloat16", 128, False, None, False).rescale_threshold == 8.0
    for d in (64, 128, 256):
        assert interface.forward_config("bfloat16", d, True, 1, False).rescale_threshold == 8.0
    monkeypatch.setenv(fwd.RESCALE_THRESHOLD_ENV, "4")
    with pytest.raises(ValueError, match=fwd.RESCALE_THRESHOLD_ENV):
        interface.forward_config("bfloat16", 128, True, 1, False)


def test_lazy_rescale_puts_o_rescale_in_a_skippable_block():
    pytest.importorskip("cutlass")
    base = _main_loop({fwd.RESCALE_THRESHOLD_ENV: "0"})
    lazy = _main_loop({fwd.RESCALE_THRESHOLD_ENV: "8"})

    def fmul_blocks(loop):
        return [b for b in loop["skip_blocks"] if b["mix"].get("FMUL", 0) >= 64]

    # every tile multiplies O by its rescale (64 per thread) unconditionally ...
    assert not fmul_blocks(base) and base["histogram"]["FMUL"] >= 64
    # ... unless the warp votes that no row moved its max: one block of exactly those multiplies
    [block] = fmul_blocks(lazy)
    assert block["mix"] == {"FMUL": 64} and lazy["histogram"].get("VOTE", 0) >= 1
    assert lazy["histogram"]["HGMMA"] == base["histogram"]["HGMMA"]
    assert lazy["histogram"]["MUFU"] == base["histogram"]["MUFU"]


def test_edge_pass_config_rule(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(fwd.EDGE_PASS_ENV, raising=False)
    # by default at D = 128 only (session 26's A/B), every form
    for causal, columns in ((False, 2), (True, 1), (True, None), (False, None), (False, 4)):
        assert interface.forward_config("bfloat16", 128, causal, columns, False).edge_pass
    for d in (64, 96, 192, 256):
        assert not interface.forward_config("bfloat16", d, True, 1, False).edge_pass, d
    assert not fwd.default_config("bfloat16", 128, None, False, 2, fast=False).edge_pass
    monkeypatch.setenv(fwd.EDGE_PASS_ENV, "0")
    assert not interface.forward_config("bfloat16", 128, False, 2, False).edge_pass
    monkeypatch.setenv(fwd.EDGE_PASS_ENV, "1")
    for d, causal, columns in ((128, False, 2), (128, True, 1), (128, True, None), (256, False, 2)):
        assert interface.forward_config("bfloat16", d, causal, columns, False).edge_pass, d
    # d64's three consumer warpgroups (160 registers each) would spill with it
    assert not interface.forward_config("bfloat16", 64, True, 2, False).edge_pass
    monkeypatch.setenv(fwd.EDGE_PASS_ENV, "yes")
    with pytest.raises(ValueError, match=fwd.EDGE_PASS_ENV):
        interface.forward_config("bfloat16", 128, False, 2, False)


def test_edge_pass_moves_the_sequence_edge_out_of_the_partial_tile_mask():
    pytest.importorskip("cutlass")
    # the element rule of sessions 1-26 (without the predicate chain, whose block differs)
    base = _main_loop({fwd.EDGE_PASS_ENV: "0", fwd.MASK_CHAIN_ENV: "0"}, "--columns", "2")
    edge = _main_loop({fwd.EDGE_PASS_ENV: "1", fwd.MASK_CHAIN_ENV: "0"}, "--columns", "2")

    def mask_block(loop):  # the partial tiles' element mask: the block with the most selects
        return max(loop["skip_blocks"], key=lambda b: b["mix"].get("FSEL", 0))

    # one select per element (64 per thread) and one compare per column (32) ...
    edge_blocks = [b for b in edge["skip_blocks"]
                   if b["mix"].get("FSEL") == 64 and b["mix"].get("ISETP") == 32]
    assert len(edge_blocks) == 1, edge["skip_blocks"]
    # ... nested inside the mask block, which is as long as before: interior partial tiles run
    # the mask without them
    outer, inner = mask_block(edge), edge_blocks[0]
    assert int(outer["first_addr"], 16) <= int(inner["first_addr"], 16)
    assert int(inner["last_addr"], 16) <= int(outer["last_addr"], 16)
    assert abs(outer["instructions"] - mask_block(base)["instructions"]) <= 8
    assert not [b for b in base["skip_blocks"]
                if b["mix"].get("FSEL") == 64 and b["mix"].get("ISETP") == 32]
    for op in ("HGMMA", "MUFU", "FFMA", "FMNMX"):
        assert edge["histogram"][op] == base["histogram"][op], op


def test_mask_chain_config_rule(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(fwd.MASK_CHAIN_ENV, raising=False)
    # by default (session 27's and 28's A/Bs) at every head dim, every form
    for d, causal, columns in ((64, False, 2), (96, True, 1), (128, True, 1), (128, False, 4),
                               (128, True, None), (192, False, 2), (256, True, 2)):
        assert interface.forward_config("bfloat16", d, causal, columns, False).mask_pred_chain, d
    monkeypatch.setenv(fwd.MASK_CHAIN_ENV, "0")
    assert not interface.forward_config("bfloat16", 192, True, 2, False).mask_pred_chain
    monkeypatch.setenv(fwd.MASK_CHAIN_ENV, "1")
    assert interface.forward_config("bfloat16", 192, True, 2, False).mask_pred_chain
    monkeypatch.setenv(fwd.MASK_CHAIN_ENV, "0")
    assert not interface.forward_config("bfloat16", 128, False, 2, False).mask_pred_chain
    monkeypatch.setenv(fwd.MASK_CHAIN_ENV, "yes")
    with pytest.raises(ValueError, match=fwd.MASK_CHAIN_ENV):
        interface.forward_config("bfloat16", 128, False, 2, False)


def _run_predicate_chain(lines: list, values: list) -> bool:
    """A small interpreter of mask.predicate_chain_ptx's PTX (setp with an optional boolean
    operand, or.pred), independent of how the lines were built."""
    import re

    preds: dict = {}
    for line in lines:
        if line.startswith("or.pred"):
            dst, a, b = re.match(r"or\.pred (\w+), (\w+), (\w+);", line).groups()
            preds[dst] = preds[a] or preds[b]
            continue
        m = re.match(r"setp\.(ge|lt)(?:\.(and|or))?\.s32 (\w+), \$(\d+), \$(\d+)(?:, (\w+))?;",
                     line)
        assert m, line
        op, combine, dst, i, j, src = m.groups()
        lhs, rhs = values[int(i)], values[int(j)]
        verdict = lhs >= rhs if op == "ge" else lhs < rhs
        if combine == "and":
            verdict = verdict and preds[src]
        elif combine == "or":
            verdict = verdict or preds[src]
        preds[dst] = verdict
    return preds["m"]


@pytest.mark.parametrize("causal,columns", [(True, 1), (True, 2), (False, 2), (False, 4)])
@pytest.mark.parametrize("with_edge", [False, True])
def test_predicate_chain_matches_the_element_rule(causal, columns, with_edge):
    """The chain select_masked emits, run on random bounds, against semantics.element_masked
    (and the sequence edge where it is folded in)."""
    import numpy as np

    from paddle_flashmask import semantics
    from paddle_flashmask.ops.cute import mask

    rng = np.random.default_rng()
    seqlen_k = 40
    for _ in range(400):
        row, col = (int(v) for v in rng.integers(0, 48, size=2))
        diag_offset = int(rng.integers(-8, 9))
        bands = semantics.band_bounds([int(v) for v in rng.integers(0, 48, size=columns)], causal)
        intervals = semantics.masked_row_intervals(bands, causal, col, diag_offset)
        clauses = mask.interval_clauses(row, intervals)
        if with_edge:
            clauses.append([(col, "ge", seqlen_k)])
        lines, operands = mask.predicate_chain_ptx(clauses, first_operand=2)
        got = _run_predicate_chain(lines, [None, None, *operands])
        want = bool(semantics.element_masked(row, col, bands, causal, diag_offset))
        if with_edge:
            want = want or col >= seqlen_k
        assert got == want, (row, col, bands, diag_offset, lines)


def test_mask_chain_selects_once_per_element():
    pytest.importorskip("cutlass")
    base = _main_loop({fwd.MASK_CHAIN_ENV: "0", fwd.EDGE_PASS_ENV: "1"}, "--columns", "2")
    chain = _main_loop({fwd.MASK_CHAIN_ENV: "1", fwd.EDGE_PASS_ENV: "1"}, "--columns", "2")

    def runtime_mix(loop):  # the mask block less its nested sequence-edge block
        blocks = sorted(loop["skip_blocks"], key=lambda b: -b["mix"].get("FSEL", 0))
        outer, edge = blocks[0]["mix"], blocks[1]["mix"]
        return {op: outer.get(op, 0) - edge.get(op, 0) for op in ("FSEL", "ISETP")}

    # bidirectional C = 2, 64 elements per thread: two compares and two selects each, then
    # two compares and one select
    assert runtime_mix(base) == {"FSEL": 128, "ISETP": 128}
    assert runtime_mix(chain) == {"FSEL": 64, "ISETP": 128}
    for op in ("HGMMA", "MUFU", "FFMA", "FMNMX"):
        assert chain["histogram"][op] == base["histogram"][op], op


def test_row_max_chains_config_rule(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(fwd.MAX_CHAINS_ENV, raising=False)
    # four by default (session 28's A/Bs) at D = 64, and on D = 128's causal forms and full
    for d, causal, columns in ((64, False, None), (64, True, 2), (64, False, 2), (128, True, None),
                               (128, True, 1), (128, True, 2), (128, False, None)):
        cfg = interface.forward_config("bfloat16", d, causal, columns, False)
        assert cfg.row_max_chains == 4, (d, causal, columns)
    for d, causal, columns in ((128, False, 2), (128, False, 4), (96, True, 1),
                               (192, True, 1), (256, True, 2), (256, True, None)):
        cfg = interface.forward_config("bfloat16", d, causal, columns, False)
        assert cfg.row_max_chains == 1, (d, causal, columns)
    for chains in ("2", "4", "8"):
        monkeypatch.setenv(fwd.MAX_CHAINS_ENV, chains)
        assert interface.forward_config("bfloat16", 128, False, None,
                                        False).row_max_chains == int(chains)
    monkeypatch.setenv(fwd.MAX_CHAINS_ENV, "3")
    with pytest.raises(ValueError, match=fwd.MAX_CHAINS_ENV):
        interface.forward_config("bfloat16", 128, False, None, False)
    with pytest.raises(ValueError, match="row_max_chains"):
        fwd.FwdConfig("bfloat16", 128, 128, False, None, row_max_chains=3)


def _longest_dependent_run(sequence: list, opcode: str) -> int:
    """The longest run of ``opcode`` instructions that each read the one before (a register's
    depth restarts at any other instruction that writes it)."""
    import re

    depth: dict = {}
    longest = 0
    for text in sequence:
        m = re.search(r"\b([A-Z][A-Z0-9]*)(?:\.[A-Z0-9.]+)? (R\d+), (.*);", text)
        if not m:
            continue
        op, dst, rest = m.groups()
        if op == opcode:
            sources = re.findall(r"\bR\d+\b", rest)
            depth[dst] = 1 + max((depth.get(r, 0) for r in sources), default=0)
            longest = max(longest, depth[dst])
        else:
            depth[dst] = 0
    return longest


def test_row_max_chains_shorten_the_dependent_fmnmx_run():
    pytest.importorskip("cutlass")
    base = _main_loop({fwd.MAX_CHAINS_ENV: "1"}, "--columns", "2")
    split = _main_loop({fwd.MAX_CHAINS_ENV: "4"}, "--columns", "2")
    # one chain: each row's 32 columns (128-wide key tiles) then the quad's two butterflies
    assert _longest_dependent_run(base["sequence"], "FMNMX") >= 32
    # four chains of 8, two pairwise combines, the butterflies (and the running max)
    assert _longest_dependent_run(split["sequence"], "FMNMX") <= 14
    # the same work: bit-identical maxima from the same number of instructions
    for op in ("HGMMA", "MUFU", "FFMA", "FMNMX", "SHFL"):
        assert split["histogram"][op] == base["histogram"][op], op


def test_row_max_order_and_sum_chains_config_rules(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    for env in (fwd.MAX_ROWWISE_ENV, fwd.SUM_CHAINS_ENV):
        monkeypatch.delenv(env, raising=False)
    cfg = interface.forward_config("bfloat16", 128, True, 1, False)
    assert not cfg.row_max_rowwise and cfg.row_sum_chains == 1
    # two sum chains by default for D = 128 full attention only (session 28, call 173)
    assert interface.forward_config("bfloat16", 128, False, None, False).row_sum_chains == 2
    for d, causal, columns in ((128, True, None), (128, False, 2), (64, False, None),
                               (256, False, None)):
        assert interface.forward_config("bfloat16", d, causal, columns,
                                        False).row_sum_chains == 1, d
    monkeypatch.setenv(fwd.MAX_ROWWISE_ENV, "1")
    monkeypatch.setenv(fwd.SUM_CHAINS_ENV, "2")
    cfg = interface.forward_config("bfloat16", 128, True, 1, False)
    assert cfg.row_max_rowwise and cfg.row_sum_chains == 2
    monkeypatch.setenv(fwd.SUM_CHAINS_ENV, "5")
    with pytest.raises(ValueError, match=fwd.SUM_CHAINS_ENV):
        interface.forward_config("bfloat16", 128, True, 1, False)
    monkeypatch.setenv(fwd.SUM_CHAINS_ENV, "1")
    monkeypatch.setenv(fwd.MAX_ROWWISE_ENV, "yes")
    with pytest.raises(ValueError, match=fwd.MAX_ROWWISE_ENV):
        interface.forward_config("bfloat16", 128, True, 1, False)
    with pytest.raises(ValueError, match="row_sum_chains"):
        fwd.FwdConfig("bfloat16", 128, 128, True, None, row_sum_chains=0)


def test_sum_chains_shorten_the_dependent_fadd_run():
    pytest.importorskip("cutlass")
    base = _main_loop({fwd.MAX_CHAINS_ENV: "4", fwd.SUM_CHAINS_ENV: "1"})
    split = _main_loop({fwd.MAX_CHAINS_ENV: "4", fwd.SUM_CHAINS_ENV: "2"})
    assert _longest_dependent_run(base["sequence"], "FADD") >= 32  # one chain over a row's 32 columns
    assert _longest_dependent_run(split["sequence"], "FADD") <= 17  # two of 16, then their combine
    for op in ("HGMMA", "MUFU", "FMNMX"):
        assert split["histogram"][op] == base["histogram"][op], op


def test_stage_first_config_rule(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(fwd.STAGE_FIRST_ENV, raising=False)
    assert not interface.forward_config("bfloat16", 128, False, None, False).stage_first
    monkeypatch.setenv(fwd.STAGE_FIRST_ENV, "1")
    for d, causal, columns in ((64, False, 2), (128, True, 1), (256, False, None)):
        assert interface.forward_config("bfloat16", d, causal, columns, False).stage_first, d
    monkeypatch.setenv(fwd.STAGE_FIRST_ENV, "on")
    with pytest.raises(ValueError, match=fwd.STAGE_FIRST_ENV):
        interface.forward_config("bfloat16", 128, True, 1, False)


def test_stage_first_builds_fewer_descriptor_instructions():
    pytest.importorskip("cutlass")
    base = _main_loop({fwd.STAGE_FIRST_ENV: "0"}, "--columns", "2")["histogram"]
    first = _main_loop({fwd.STAGE_FIRST_ENV: "1"}, "--columns", "2")["histogram"]
    # each wgmma's descriptor pair rebuilt (its constant high word moved in again) ...
    assert base.get("UMOV", 0) >= 20
    # ... against one stage base stepped per K-slice
    assert first.get("UMOV", 0) <= 8
    # the same GEMMs and softmax, fewer instructions
    for op in ("HGMMA", "MUFU", "FFMA", "FMNMX", "F2FP", "FSEL"):
        assert first.get(op) == base.get(op), op
    assert sum(first.values()) <= sum(base.values()) - 25


def test_pingpong_config_rule(monkeypatch):
    from paddle_flashmask.ops.cute import interface

    monkeypatch.delenv(fwd.PINGPONG_ENV, raising=False)
    for d in (64, 128, 192, 256):  # on at every head dim until the H200 A/B says otherwise
        assert interface.forward_config("bfloat16", d, True, 1, False).pingpong, d
    monkeypatch.setenv(fwd.PINGPONG_ENV, "0")
    for d, causal, columns in ((256, False, None), (192, True, 2), (128, True, 1)):
        cfg = interface.forward_config("bfloat16", d, causal, columns, False)
        assert not cfg.pingpong and cfg.intra_wg_overlap, d
    monkeypatch.setenv(fwd.PINGPONG_ENV, "off")
    with pytest.raises(ValueError, match=fwd.PINGPONG_ENV):
        interface.forward_config("bfloat16", 256, True, 1, False)


def test_no_pingpong_drops_the_turn_barriers_from_the_loop():
    pytest.importorskip("cutlass")
    from sass_harness import sass_loop_mix

    def loop(flag: str) -> dict:
        loops, _ = sass_loop_mix("fwd", "--head-dim", "256", "--causal",
                                 **{fwd.PINGPONG_ENV: flag})
        assert len(loops) == 1, loops
        return loops[0]["histogram"]

    turns, free = loop("1"), loop("0")
    # taking turns: one BAR.SYNC (wait for this warpgroup's turn) and one BAR.ARV (pass it on)
    assert turns.get("BAR", 0) == 2
    assert "BAR" not in free
    for op in ("HGMMA", "MUFU", "FFMA", "FMNMX", "F2FP"):
        assert free.get(op) == turns.get(op), op
