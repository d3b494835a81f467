"""FlashAttention-4 `mask_mod` + block-sparse tables for the zoo masks (a peer, not our code path).

FA4 evaluates a CuTe `mask_mod` on partial tiles and skips tiles listed as empty in block tables that
we build with FlexAttention's `create_block_mask` (O(S^2 / 128^2) metadata, built outside the timing).
"""
from __future__ import annotations

import time

import torch


def build_fa4_mask_mod(mask, batch: int, seqlen: int):
    import cutlass
    import cutlass.cute as cute
    from flash_attn.cute import flash_attn_func, utils
    from flash_attn.cute.block_sparsity import BlockSparseTensorsTorch
    from torch.nn.attention.flex_attention import create_block_mask

    i32 = cutlass.Int32

    def const(x):
        return utils.scalar_to_ssa(x, i32)

    aux = None
    name = mask.name
    if name == "causal":
        @cute.jit
        def mod(b, h, qi, ki, seq, aux):
            return ki <= qi
    elif name == "sliding_window":
        w = mask.window
        @cute.jit
        def mod(b, h, qi, ki, seq, aux):
            return (ki <= qi) & (qi - ki < const(w))
    elif name in ("causal_document", "document"):
        aux = [mask.extras["doc"]]
        causal = name == "causal_document"
        @cute.jit
        def mod(b, h, qi, ki, seq, aux):
            doc = aux[0]
            same = const(doc[b[0], qi[0]]) == const(doc[b[0], ki[0]])
            if cutlass.const_expr(causal):
                return same & (ki <= qi)
            return same
    elif name == "shared_question":
        aux = [mask.extras["sq_doc"], mask.extras["sq_ans"]]
        @cute.jit
        def mod(b, h, qi, ki, seq, aux):
            doc, ans = aux[0], aux[1]
            ans_k = const(ans[b[0], ki[0]])
            return ((const(doc[b[0], qi[0]]) == const(doc[b[0], ki[0]])) & (ki <= qi)
                    & ((ans_k == const(0)) | (ans_k == const(ans[b[0], qi[0]]))))
    elif name == "prefix_lm_causal":
        p = mask.extras["prefix"]
        @cute.jit
        def mod(b, h, qi, ki, seq, aux):
            return (ki < const(p)) | (ki <= qi)
    elif name == "global_sliding_window":
        w, g = mask.window, mask.extras["global"]
        @cute.jit
        def mod(b, h, qi, ki, seq, aux):
            return (ki <= qi) & ((qi - ki < const(w)) | (ki < const(g)))
    else:
        raise NotImplementedError(f"no mask_mod for {name}")

    t0 = time.perf_counter()
    bm = create_block_mask(lambda b, h, q, k: mask.predicate(b, q, k), batch, 1, seqlen, seqlen,
                           device="cuda", BLOCK_SIZE=(128, 128))
    torch.cuda.synchronize()
    _ = time.perf_counter() - t0
    fwd_tables = BlockSparseTensorsTorch(
        mask_block_cnt=bm.kv_num_blocks, mask_block_idx=bm.kv_indices,
        full_block_cnt=bm.full_kv_num_blocks, full_block_idx=bm.full_kv_indices, block_size=(128, 128))
    bwd_tables = BlockSparseTensorsTorch(
        mask_block_cnt=bm.q_num_blocks, mask_block_idx=bm.q_indices,
        full_block_cnt=bm.full_q_num_blocks, full_block_idx=bm.full_q_indices, block_size=(128, 128))

    def f(q, k, v):
        return flash_attn_func(q, k, v, mask_mod=mod, aux_tensors=aux, block_sparse_tensors=fwd_tables,
                               block_sparse_tensors_bwd=bwd_tables)
    return f
