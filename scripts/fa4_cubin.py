"""Compile FlashAttention-4's SM90 backward or forward for sm_90a on the CPU and write its cubin (a
reading aid for comparing its SASS with ours; not used by the package or the tests).

FA4 picks its own tile shape per call; this builds the one its host API picks for bf16 MHA at
``--head-dim`` (64, 128 or 256; at D=128: backward, ``_tile_size_bwd_sm90``: 64 x 128 for causal, 80 x 128 with dQ computed
transposed for full attention; forward, ``_tile_size_fwd_sm90``: 128 x 128, P·V from registers,
intra-warpgroup overlap) and compiles it on fake tensors, so no GPU is needed.

Setup, once, into a folder outside the project's venv (pure-Python wheels plus the two FA4
needs at import; ``.whl/`` holds the FA4 and quack wheels of ../shared/bench/README.md)::

    pip install --target /tmp/fa4env --no-deps .whl/flash_attn_4-*.whl \
        .whl/quack_kernels-*.whl apache-tvm-ffi==0.1.15.post2 triton einops

Then, with the project's venv active::

    python scripts/fa4_cubin.py --fa4-path /tmp/fa4env --mask causal --out /tmp/fa4_causal.cubin
    python scripts/sass_loop_mix.py cubin --cubin /tmp/fa4_causal.cubin

and compare with ``python scripts/sass_loop_mix.py bwd --head-dim 128 --causal``; add
``--pass fwd --mask full`` for the forward (compare with ``sass_loop_mix.py fwd --head-dim 128``;
FA4 4.0.0b36's causal forward does not trace with CuTe DSL 4.8.1 on fake tensors: its LPT tile
scheduler changes structure inside the persistent loop).
"""
from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fa4-path", required=True, help="folder holding flash_attn and its imports")
    p.add_argument("--pass", dest="which", choices=("bwd", "fwd"), default="bwd")
    p.add_argument("--mask", choices=("causal", "full"), default="causal")
    p.add_argument("--head-dim", type=int, choices=(64, 128, 256), default=128)
    p.add_argument("--out", required=True, help="where to write the cubin")
    args = p.parse_args(argv)

    os.environ.update(CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="cubin")
    sys.path.insert(0, args.fa4_path)
    import cuda.bindings.driver as cuda
    import cutlass
    import cutlass.cute as cute
    if args.which == "fwd":
        return _forward(args, cuda, cutlass, cute)
    from flash_attn.cute.flash_bwd_sm90 import FlashAttentionBackwardSm90
    from flash_attn.cute.interface import _tile_size_bwd_sm90
    from flash_attn.cute.utils import AuxData
    from quack.compile_utils import make_fake_tensor

    causal = args.mask == "causal"
    head_dim = args.head_dim
    cfg = _tile_size_bwd_sm90(head_dim, head_dim, causal, False)
    print(cfg)
    kernel = FlashAttentionBackwardSm90(
        cutlass.BFloat16, head_dim, head_dim, 1, causal, is_local=False, deterministic=False,
        tile_m=cfg.m_block_size, tile_n=cfg.n_block_size, Q_stage=cfg.num_stages_Q,
        dO_stage=cfg.num_stages_dO, PdS_stage=cfg.num_stages_PdS, SdP_swapAB=cfg.SdP_swapAB,
        dKV_swapAB=cfg.dKV_swapAB, dQ_swapAB=cfg.dQ_swapAB, AtomLayoutMSdP=cfg.AtomLayoutMSdP,
        AtomLayoutNdKV=cfg.AtomLayoutNdKV, AtomLayoutMdQ=cfg.AtomLayoutMdQ, num_threads=384)
    # extents only shape the fake tensors; the kernel takes them at run time
    batch, seqlen, heads = 1, 1024, 2
    rows = -(-seqlen // cfg.m_block_size) * cfg.m_block_size

    def bshd():
        return make_fake_tensor(cutlass.BFloat16, (batch, seqlen, heads, head_dim), divisibility=8)

    stats = [make_fake_tensor(cutlass.Float32, (batch, heads, rows)) for _ in range(2)]
    dq_accum = make_fake_tensor(cutlass.Float32, (batch, heads, rows * head_dim), divisibility=4)
    compiled = cute.compile(kernel, bshd(), bshd(), bshd(), bshd(), *stats, dq_accum, bshd(),
                            bshd(), cutlass.Float32(head_dim ** -0.5), None, None, None, None,
                            None, None, None, None, None, AuxData(None, None), None, None,
                            cuda.CUstream(0))
    with open(args.out, "wb") as f:
        f.write(compiled.__cubin__)
    print(f"wrote {args.out} ({len(compiled.__cubin__)} bytes)")
    return 0


def _forward(args, cuda, cutlass, cute) -> int:
    """FA4's SM90 forward at the tile shape its host API picks for bf16 MHA at ``--head-dim``."""
    from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90
    from flash_attn.cute.interface import _tile_size_fwd_sm90
    from quack.compile_utils import make_fake_tensor

    causal = args.mask == "causal"
    head_dim = args.head_dim
    cfg = _tile_size_fwd_sm90(head_dim, head_dim, causal, False)
    print(cfg)
    kernel = FlashAttentionForwardSm90(
        cutlass.BFloat16, head_dim, head_dim, 1, is_causal=causal, is_local=False,
        pack_gqa=False, tile_m=cfg.m_block_size, tile_n=cfg.n_block_size, num_stages=2,
        num_threads=384, Q_in_regs=False, intra_wg_overlap=cfg.intra_wg_overlap,
        mma_pv_is_rs=cfg.mma_pv_is_rs)
    batch, seqlen, heads = 1, 1024, 2  # extents only shape the fake tensors

    def bshd():
        return make_fake_tensor(cutlass.BFloat16, (batch, seqlen, heads, head_dim), divisibility=8)

    lse = make_fake_tensor(cutlass.Float32, (batch, heads, seqlen))
    compiled = cute.compile(kernel, bshd(), bshd(), bshd(), bshd(), lse,
                            cutlass.Float32(head_dim ** -0.5), stream=cuda.CUstream(0))
    with open(args.out, "wb") as f:
        f.write(compiled.__cubin__)
    print(f"wrote {args.out} ({len(compiled.__cubin__)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
