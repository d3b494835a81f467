"""FlashMask forward for Hopper (SM90a) in CuTe DSL.

Structure (one CTA = one 128-row query tile at a time -- 192 rows with three consumer
warpgroups, ``FwdConfig.tile_m`` -- persistent over work tiles):

* warp 0 of warpgroup 0 is the producer. Per work tile it TMA-loads Q, then walks the key tiles:
  32 lanes evaluate ``semantics.tile_fully_masked`` / ``tile_needs_mask`` for 32 key tiles at once
  (from the per-key-tile min/max summary), a ballot gives the non-skipped ones, and for each it
  fills one K stage (TMA) together with that tile's metadata (key-tile index, partial flag) and,
  for partial tiles, the tile's column bounds, written into shared memory *before* the K stage's
  barrier is armed, so they travel in lockstep with K. V goes through its own stage ring. A
  sentinel stage (index -1) ends the work tile. Fully masked tiles are never loaded.
* warpgroups 1 and 2 (and 3) are consumers (64 query rows each, one tiled wgmma over them):
  S = Q·Kᵀ (SS wgmma), element mask in registers from the staged bounds only for partial tiles
  (full tiles run no mask code), online softmax, P converted in registers and O += P·V
  (RS wgmma, P never touches shared memory). Epilogue writes O and the fp32 LSE.
* ``setmaxnreg`` moves registers from the producer warpgroup to the consumers.
* Persistent scheduler (``tile_scheduler.py``): a head's query tiles together, last (heaviest)
  first; by default each CTA's producer claims the next work tile from a global counter
  (``FwdConfig.dynamic_schedule``) and passes it to the consumers with the tile's Q stage. With
  ``FwdConfig.work_order`` (the host's choice for GQA grids with few query tiles per CTA,
  :func:`default_work_order`) the claims, or the static slots without the dynamic schedule, walk
  the heaviest-first order that ``work_order_kernel.py`` computes on the GPU from the tile
  summary.
* Fast path (``FwdConfig`` flags, ``default_config(fast=True)``): S_j = Q·K_jᵀ in flight with
  P_{j-1}·V_{j-1} (intra-warpgroup overlap), turns between the consumer warpgroups (ping-pong,
  round robin with three), double-buffered Q, and a stmatrix + TMA-store epilogue. The default since it was
  verified on the H200; ``PADDLE_FLASHMASK_FWD_FAST=0`` selects the simpler one-tile-at-a-time loop.

Host side: :class:`FwdConfig` (compile-time parameters) and :func:`compile_forward`, which returns a
:class:`CompiledForward` taking cute tensors made with ``cute.runtime.from_dlpack`` plus the stream.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, Int64, Uint32
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from paddle_flashmask.ops.cute import mask as fm_mask
from paddle_flashmask.ops.cute import softmax as fm_softmax
from paddle_flashmask.ops.cute.softmax import acc_mn_view
from paddle_flashmask.ops.cute import tile_scheduler as sched
from paddle_flashmask.ops.cute.tile_range_kernel import ranges_tensor
from paddle_flashmask.ops.cute.launch_args import (check_variant_call, env_choice, env_flag,
                                                  float32_arg, gmem_ptr, int32_arg, launch)

_DTYPES = {"bfloat16": cutlass.BFloat16, "float16": cutlass.Float16}
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16"}
SUPPORTED_HEAD_DIMS = ((64, 64), (96, 96), (128, 128), (192, 128), (256, 256))
LOG2_E = math.log2(math.e)
BOUNDS_BATCH = 4  # independent global loads per lane in flight while staging a tile's bounds


@dataclass(frozen=True)
class FwdConfig:
    """Every compile-time parameter of the forward kernel (hashable; INFRA's cache key).

    GQA/MQA ratios (H // Hk, H // Hm) are runtime values, so one compiled kernel serves every
    head layout. ``tile_n`` is also the key-tile width of the tile summary the kernel expects.
    """
    dtype: str
    head_dim: int
    head_dim_v: int
    causal: bool
    mask_columns: Optional[int]  # C in {1, 2, 4}, or None for plain causal / full attention
    has_sink: bool = False
    tile_m: int = 128
    tile_n: int = 128
    num_stages: int = 2
    q_stages: int = 1  # 2: the next work tile's Q loads during this tile's main loop
    # Fast-path switches (docs/kernels_fwd.md): on in default_config since they passed fwd_check
    # on the H200; a 32/240 register split cannot be satisfied (it hung once) and is rejected.
    intra_wg_overlap: bool = False  # S_j = Q·K_jᵀ in flight together with P_{j-1}·V_{j-1}
    pingpong: bool = False  # the two consumer warpgroups take turns issuing their GEMMs
    tma_store_o: bool = False  # O leaves through shared memory + TMA (else direct stores)
    producer_regs: int = 24
    consumer_regs: int = 240
    # Persistent CTAs walk a work order computed on the GPU from the tile summary (query tiles by
    # real work, heaviest first; work_order_kernel.py): claim t takes order[t] under the dynamic
    # schedule, static slot t takes order[snake(t)] without it. Off by default.
    work_order: bool = False
    # The producer scans only each query tile's [n_lo, n_hi) of key tiles, computed on the GPU
    # from the tile summary (tile_range_kernel.py). Masks only; default_config turns it on.
    tile_ranges: bool = False
    # Dynamic persistent schedule: the producer takes the next work tile from a global counter
    # (atomic add) and hands it to the consumers with the tile's Q stage, so a CTA that drew
    # light query tiles takes more of them (documents: query tiles differ in work). Same order
    # as the static schedule (a head's tiles together, heaviest first), so L2 reuse is kept.
    dynamic_schedule: bool = False
    # Partial tiles keep P_{j-1}·V_{j-1} in flight while S_j is masked (as full tiles do), instead
    # of draining the wgmma pipeline first. On by default since the H200 A/B (24/24, masks +1-3 %).
    partial_overlap: bool = False
    # Dynamic schedule: claims run ``claim_passes`` times over the work list; pass p takes only
    # the query tiles of work class p (tile_scheduler.claim_pass of the key-tile range the
    # producer scans), so heavy query tiles start first wherever they are in the list and the
    # grid ends on light ones. 1 = the list once (default until the H200 A/B).
    claim_passes: int = 1
    # With claim_passes > 1: each atomic claims this many consecutive list items, whose classes
    # the producer reads back to back before producing the ones of the current pass, so a pass
    # skips the other classes' items at one atomic and one overlapped range read per block
    # instead of per item (session 13: one skip per item stalled the forward's producer).
    claim_block: int = 1
    # Masks: a partial tile whose bands touch none of its rows (tile summary) is masked by the
    # causal diagonal and the sequence edge only; the producer tells it apart (s_meta kind 2, no
    # column values staged) and the consumers run that cheaper mask (document masks: most
    # partial tiles are the diagonal tiles inside one document). Off until the H200 A/B.
    diagonal_partials: bool = False
    # The producer scans a work tile's key tiles (tile ranges, summary) before waiting for its
    # Q stage, which frees only when the consumers finish the previous work tile, instead of
    # after: with short work tiles (packed documents) that wait is at every tile boundary and
    # the scan's global loads then delay the first K/V load. default_config turns it on (H200,
    # session 14: forward 0-5.5 % faster on every zoo mask at B=4 MHA, within +-4 % at B=2 GQA).
    early_scan: bool = False
    # Q's wgmma operand descriptors from a slice at the warpgroup's first thread (made
    # warp-uniform), not at this thread: they depend only on the warpgroup, and built from the
    # thread index they sit in vector registers and are moved to uniform ones (R2UR) before
    # every Q·Kᵀ wgmma. d128 causal main loop 844 -> 820 instructions (516 -> 492 on an unmasked
    # tile); the backward slices this way already. Off until the H200 A/B.
    uniform_q: bool = False
    # Lazy O rescale (softmax.online_update): a row's running max moves only when a tile's max
    # exceeds it by more than this many log2 units, so in most iterations no row of a warp moves
    # and the warp skips O's 64-multiply rescale (a warp vote). Exact: O, the sum and LSE use the
    # same max; P can reach 2^t (t = 8: 256, far inside fp16 / bf16). 0 = rescale every tile,
    # as FA4 does on SM90 (FA4's SM100 forward uses 8). Off until the H200 A/B.
    rescale_threshold: float = 0.0
    # Partial tiles: the sequence edge (col >= Sk) as a separate pass run only on a tile that
    # reaches past Sk, not a compare per column and a select per element in every partial tile
    # (mask.apply_element_mask's edge_tile_n): 96 of the d128 C=2 mask block's 407 instructions
    # per warp. The Nsight sampling of the documents forward (call 154) put 6.8 % of all samples
    # in that block (811 partial tiles of 5,706, FA4 varlen has none inside a document). The
    # host's choice: default_edge_pass (on at D = 128 since the H200 A/B of session 26).
    edge_pass: bool = False
    # Partial tiles: each element's mask verdict as one chain of predicated compares and one
    # select (mask.select_masked) instead of ptxas's select per masked row interval: the d128
    # bidirectional C = 2 block's two compares and two selects per element become three
    # instructions. The host's choice: default_mask_pred_chain (on at every head dim since the
    # H200 A/Bs of sessions 27 and 28: masked forwards 0.6-5.5 % faster).
    mask_pred_chain: bool = False
    # The softmax's per-row tile max as this many independent fmax chains, every row's max and
    # quad shuffles before the first exponential (softmax.online_update's max_chains), instead
    # of one serial chain per row: at 128-wide key tiles that chain is 32 dependent FMNMX per row
    # ahead of the row's first exponential (SASS, d128 main loop), which ptxas does not
    # reassociate. Bit-identical (max is exact in any order). The host's choice:
    # default_row_max_chains.
    row_max_chains: int = 1
    # row_max_chains > 1: each row's split max and quad shuffles right before that row's
    # exponentials, instead of every row's first. The host's choice: default_row_max_rowwise.
    row_max_rowwise: bool = False
    # The softmax's per-row sum of the new exponentials as this many independent add chains
    # (softmax.online_update's sum_chains; another fp32 order). The host's choice:
    # default_row_sum_chains.
    row_sum_chains: int = 1
    # The wgmma operands' pipeline stage selected once per GEMM (``tSrK[None, None, None,
    # stage]``), then each K-slice of that view, instead of indexing (slice, stage) per wgmma:
    # the same descriptors, built from one stage base. ptxas otherwise rewrites each wgmma's
    # descriptor pair from scratch (d128 full-tile loop: 33 UMOV, 508 instructions per warp;
    # with it 11 and 480; FA4's loop 453). The host's choice: default_stage_first.
    stage_first: bool = False

    def __post_init__(self):
        dtype = _DTYPE_ALIASES.get(self.dtype, self.dtype)
        object.__setattr__(self, "dtype", dtype)
        if dtype not in _DTYPES:
            raise ValueError(f"FwdConfig.dtype: expected one of {sorted(_DTYPES)}, found {self.dtype!r}")
        if (self.head_dim, self.head_dim_v) not in SUPPORTED_HEAD_DIMS:
            raise NotImplementedError(
                f"FwdConfig head dims: expected (head_dim, head_dim_v) in {SUPPORTED_HEAD_DIMS}, "
                f"found ({self.head_dim}, {self.head_dim_v})")
        fm_mask.num_mask_columns(self.causal, self.mask_columns)  # validates the (causal, C) form
        if self.tile_m not in (128, 192):  # two or three consumer warpgroups of 64 rows
            raise NotImplementedError(f"FwdConfig.tile_m: expected 128 or 192, found {self.tile_m}")
        if self.row_sum_chains not in ROW_MAX_CHAIN_CHOICES:
            raise ValueError(f"FwdConfig.row_sum_chains: expected one of {ROW_MAX_CHAIN_CHOICES}, "
                             f"found {self.row_sum_chains}")
        if self.row_max_chains not in ROW_MAX_CHAIN_CHOICES:
            raise ValueError(f"FwdConfig.row_max_chains: expected one of {ROW_MAX_CHAIN_CHOICES}, "
                             f"found {self.row_max_chains}")
        if self.tile_n % 16 != 0 or not 16 <= self.tile_n <= 256:
            raise ValueError(f"FwdConfig.tile_n: expected a multiple of 16 in [16, 256], found {self.tile_n}")
        if self.num_stages < 1:
            raise ValueError(f"FwdConfig.num_stages: expected >= 1, found {self.num_stages}")
        if self.q_stages not in (1, 2):
            raise ValueError(f"FwdConfig.q_stages: expected 1 or 2, found {self.q_stages}")
        if not fits_shared_memory(self.shared_memory_bytes()):
            raise ValueError(
                f"FwdConfig: shared memory {self.shared_memory_bytes()} B + {STATIC_SMEM_BYTES} B "
                f"static exceeds the SM90 limit {SMEM_LIMIT_BYTES} B (reduce tile_n, num_stages "
                f"or q_stages, or tma_store_o)")
        if self.partial_overlap and not self.intra_wg_overlap:
            raise ValueError("FwdConfig.partial_overlap: needs intra_wg_overlap=True")
        if self.pingpong and not self.intra_wg_overlap:
            raise ValueError("FwdConfig.pingpong: needs intra_wg_overlap=True")
        if self.work_order and self.claim_passes > 1:
            raise ValueError(f"FwdConfig.claim_passes: expected 1 with work_order=True (the "
                             f"order already puts the heaviest items first), found "
                             f"{self.claim_passes}")
        if self.tile_ranges and self.mask_columns is None:
            raise ValueError("FwdConfig.tile_ranges: expected mask_columns (ranges come from the "
                             "tile summary of startend_row_indices), found None")
        if self.diagonal_partials and self.mask_columns is None:
            raise ValueError("FwdConfig.diagonal_partials: expected mask_columns (plain causal "
                             "tiles have no bands to tell apart), found None")
        if self.claim_block not in (1, 2, 4, 8) or (self.claim_block > 1
                                                    and self.claim_passes == 1):
            raise ValueError(f"FwdConfig.claim_block: expected 1, or 2 / 4 / 8 with "
                             f"claim_passes > 1, found {self.claim_block} "
                             f"(claim_passes={self.claim_passes})")
        if self.claim_passes not in (1, 2, 3, 4) or (self.claim_passes > 1
                                                     and not self.dynamic_schedule):
            raise ValueError(f"FwdConfig.claim_passes: expected 1, or 2..4 with "
                             f"dynamic_schedule=True, found {self.claim_passes} "
                             f"(dynamic_schedule={self.dynamic_schedule})")
        # setmaxnreg only moves registers inside the CTA's launch allocation (ptxas caps a
        # 384-thread CTA at 168/thread, a 512-thread one at 128): what the producer warpgroup
        # gives back must cover what the consumer warpgroups take, or setmaxnreg.inc waits
        # forever.
        launch = launch_registers(self.tile_m)
        consumers = 128 * (self.tile_m // 64)
        if 128 * (launch - self.producer_regs) < consumers * (self.consumer_regs - launch):
            raise ValueError(
                f"FwdConfig register split: producer {self.producer_regs} / consumer "
                f"{self.consumer_regs} needs 128*({launch}-p) >= {consumers}*(c-{launch}), found "
                f"{128 * (launch - self.producer_regs)} < "
                f"{consumers * (self.consumer_regs - launch)}")


FAST_ENV = "PADDLE_FLASHMASK_FWD_FAST"
WORK_ORDER_ENV = "PADDLE_FLASHMASK_FWD_WORK_ORDER"
TILE_RANGES_ENV = "PADDLE_FLASHMASK_FWD_TILE_RANGES"
DYNAMIC_SCHEDULE_ENV = "PADDLE_FLASHMASK_FWD_DYNAMIC_SCHEDULE"
PARTIAL_OVERLAP_ENV = "PADDLE_FLASHMASK_FWD_PARTIAL_OVERLAP"
CLAIM_PASSES_ENV = "PADDLE_FLASHMASK_FWD_CLAIM_PASSES"
CLAIM_BLOCK_ENV = "PADDLE_FLASHMASK_FWD_CLAIM_BLOCK"
DIAGONAL_PARTIALS_ENV = "PADDLE_FLASHMASK_FWD_DIAGONAL_PARTIALS"
UNIFORM_Q_ENV = "PADDLE_FLASHMASK_FWD_UNIFORM_Q"
RESCALE_THRESHOLD_ENV = "PADDLE_FLASHMASK_FWD_RESCALE_THRESHOLD"
EDGE_PASS_ENV = "PADDLE_FLASHMASK_FWD_EDGE_PASS"
MASK_CHAIN_ENV = "PADDLE_FLASHMASK_FWD_MASK_CHAIN"
MAX_CHAINS_ENV = "PADDLE_FLASHMASK_FWD_MAX_CHAINS"
MAX_ROWWISE_ENV = "PADDLE_FLASHMASK_FWD_MAX_ROWWISE"
SUM_CHAINS_ENV = "PADDLE_FLASHMASK_FWD_SUM_CHAINS"
STAGE_FIRST_ENV = "PADDLE_FLASHMASK_FWD_STAGE_FIRST"
PINGPONG_ENV = "PADDLE_FLASHMASK_FWD_PINGPONG"
ROW_MAX_CHAIN_CHOICES = (1, 2, 4, 8)
EARLY_SCAN_ENV = "PADDLE_FLASHMASK_FWD_EARLY_SCAN"
GRID_ENV = "PADDLE_FLASHMASK_FWD_GRID"  # "tiles": one CTA per work tile (default "persistent")
D128_TILE_ENV = "PADDLE_FLASHMASK_FWD_D128_TILE_N"  # "112": the 128x112 tile, two Q buffers
D256_TILE_ENV = "PADDLE_FLASHMASK_FWD_D256_TILE_N"  # default "80": 128x80 where it fits; "64"
D64_TILE_M_ENV = "PADDLE_FLASHMASK_FWD_D64_TILE_M"  # default "192": three consumer WGs; "128"


SMEM_LIMIT_BYTES = 232448  # 227 KB of shared memory per CTA on SM90, static + dynamic
# Every forward kernel the DSL builds also holds 1 KB of static shared memory (the cubin's
# .nv.shared.<kernel>, compile_check's "smem" column); it counts toward the same 227 KB.
STATIC_SMEM_BYTES = 1024


def launch_registers(tile_m: int) -> int:
    """Registers per thread of the CTA at launch: 64K over a producer warpgroup and one consumer
    warpgroup per 64 rows, in ptxas' steps of 8."""
    threads = 128 * (1 + tile_m // 64)
    return min(255, 65536 // threads) // 8 * 8


def _align(nbytes: int, alignment: int) -> int:
    return -(-nbytes // alignment) * alignment


def _shared_memory_bytes(cfg: "FwdConfig", tile_n: Optional[int] = None) -> int:
    """Dynamic shared memory of a config: the size of the kernel's ``SharedStorage`` (mbarriers,
    tile meta and work slots, staged column values; then the Q, K, V and O buffers, each aligned
    to 1 KB), known before tracing; ``tile_n``: of the same config with key tiles that wide.
    ``compile_forward`` checks it against the traced struct (tests/test_fwd_kernel.py)."""
    elem = 2
    tile_n = cfg.tile_n if tile_n is None else tile_n
    ncols = fm_mask.num_mask_columns(cfg.causal, cfg.mask_columns)
    header = (cfg.q_stages * 2 + cfg.num_stages * 4) * 8 + cfg.num_stages * 2 * 4 + cfg.q_stages * 4
    header = _align(header, 16) + cfg.num_stages * tile_n * ncols * 4
    q = cfg.q_stages * cfg.tile_m * cfg.head_dim * elem
    kv = cfg.num_stages * tile_n * (cfg.head_dim + cfg.head_dim_v) * elem
    o = cfg.tile_m * cfg.head_dim_v * elem if cfg.tma_store_o else 0
    return _align(header, 1024) + _align(q, 1024) + _align(kv, 1024) + _align(o, 1024)


def fits_shared_memory(dynamic_bytes: int) -> bool:
    """Whether a kernel with this much dynamic shared memory can launch on SM90."""
    return dynamic_bytes + STATIC_SMEM_BYTES <= SMEM_LIMIT_BYTES


FwdConfig.shared_memory_bytes = _shared_memory_bytes


# every environment switch default_config reads: the host keys its cached choice of variant on
# their values (interface.forward_config), so a switch flipped between calls counts
ENV_SWITCHES = tuple(value for name, value in list(globals().items()) if name.endswith("_ENV"))


def default_one_tile_per_cta() -> bool:
    """Whether the forward runs one CTA per work tile (the grid the ``retire`` launches use: a
    static schedule, each CTA takes its tile and ends, the hardware hands SMs to the next CTAs
    as they free) instead of the persistent grid of one CTA per SM. FA4's grid: Nsight Compute
    had our persistent grid's SMs idle 17 % of the e2e shape's forward at its tail, FA4's 4 %
    (session 13). Env ``PADDLE_FLASHMASK_FWD_GRID=tiles``; off until the H200 A/B."""
    return env_choice(GRID_ENV, ("persistent", "tiles")) == "tiles"


def default_work_order(work_items: Optional[int] = None, grid_ctas: Optional[int] = None,
                       heads_per_kv_head: int = 1) -> bool:
    """``FwdConfig.work_order`` wanted for a persistent grid of ``grid_ctas`` CTAs over
    ``work_items`` query tiles of a mask with columns, whose query heads share K/V heads in groups
    of ``heads_per_kv_head`` (None: not known yet, the compile-time default, off).

    On for GQA / MQA (``heads_per_kv_head > 1``) when the grid gets fewer than
    ``tile_scheduler.FEW_ITEMS_PER_CTA`` items per CTA: the dynamic schedule's claims then walk
    the heaviest-first order, which shortens the grid's tail but runs tiles of many heads at once.
    H200, session 14 (``bench/results/README.md``), forward kernel per call at B=2 S=8K H=16:

    * GQA 16/8 (the end-to-end step's model): its packed SFT rows 322-325 -> 299 us (inside the
      training step 353 -> 316-343 us), documents -6 %, shared question -8 %, causal documents
      -3 %, prefix-LM causal 0 %, sliding windows +2 %;
    * MHA (16 K/V heads, twice the K/V streamed by the interleaved heads): 2-7 % slower on five of
      six zoo masks, documents -4 % to -8 %; at B=4 (31 items per CTA, not reached) 3-16 % slower.

    Env ``PADDLE_FLASHMASK_FWD_WORK_ORDER`` = 1 / 0 forces it on / off."""
    forced = env_choice(WORK_ORDER_ENV, ("0", "1"))
    if forced:
        return forced == "1"
    if work_items is None or grid_ctas is None or heads_per_kv_head <= 1:
        return False
    return sched.few_items_per_cta(work_items, grid_ctas)


def default_rescale_threshold(head_dim: int, causal: bool, mask_columns: Optional[int]) -> float:
    """``FwdConfig.rescale_threshold`` without an env choice: 8 (a row keeps its max until a tile
    beats it by 2^8; exact, see the field) at D = 64 and 256, and at D = 128 except full
    attention; 0 elsewhere (D = 96 / 192 not measured). Measured on the H200 in session 15 with
    ``bench/kernel_ab.py`` (variants interleaved in one process), B=4 S=8K MHA: at D = 128 causal
    -1.3 %, sliding window -4.4 %, causal documents -5.5 %, documents -2.6 %, shared question
    -6 %, prefix-LM -2.3 %, global + sliding window -5.3 %, full +1.5 %; at D = 64 -0.4 to -3.1 %
    and at D = 256 -2.2 to -4.7 % on full, causal, causal documents, documents and sliding
    window; B=2 GQA 16/8 D = 128 packed documents -1.3 %, causal documents -1.2 %, documents
    -2 %. Session 12's separate-process runs could not see it through their 5-10 % spread."""
    if head_dim in (64, 256) or (head_dim == 128 and (causal or mask_columns is not None)):
        return 8.0
    return 0.0


def default_edge_pass(head_dim: int) -> bool:
    """``FwdConfig.edge_pass`` without an env choice: on at D = 128, off elsewhere (not
    measured). Measured on the H200 (session 26, call 159 and its rerun, ``bench/kernel_ab.py``
    forward, variants interleaved, B=4 S=8K MHA): causal documents 0.984x / 0.983x, shared
    question 0.980x / 0.980x, global + sliding window 0.975x / 0.979x, sliding window 0.989x,
    documents 0.995x / 0.994x, causal 0.998x, full 0.997x / 1.000x, but prefix-LM 1.016x /
    1.016x; at the e2e shape (B=2 GQA 16/8) packed SFT 0.990x, sliding window 0.988x, the others
    0.997-0.998x. Oracle 24/24 with it forced at every head dim. Env
    ``PADDLE_FLASHMASK_FWD_EDGE_PASS=1`` / ``0`` forces it on / off (d64's three consumer
    warpgroups never take it: it spills there)."""
    forced = env_choice(EDGE_PASS_ENV, ("0", "1"))
    if forced:
        return forced == "1"
    return head_dim == 128


def default_mask_pred_chain(head_dim: int) -> bool:
    """``FwdConfig.mask_pred_chain`` without an env choice: on at every head dim. Measured on
    the H200 (``bench/kernel_ab.py`` forward, variants interleaved, against the select per
    interval): session 27, call 164, MHA B=4 S=8K D=128 sliding window 0.961x, causal documents
    0.957x, documents 0.983x, shared question 0.958x, prefix-LM 0.987x, global + sliding window
    0.957x, full 1.003x, causal 1.001x; GQA 16/8 B=2 (the e2e shape) packed SFT 0.974x, causal
    documents 0.974x, documents 0.987x, sliding window 0.970x, causal 1.000x; D=64 MHA B=4
    documents 0.969x, causal documents 0.945x, prefix-LM 1.006x; D=256 (call 166) documents
    0.994x, causal documents 0.986x, sliding window 0.986x; session 28, MHA B=4, D=96 (call 170)
    documents 0.972x, causal documents 0.958x, sliding window 0.970x, D=192 (call 171) documents
    0.988x, causal documents 0.976x, sliding window 0.973x, causal 0.996x. Oracle 24/24 with it
    forced at every head dim. Env ``PADDLE_FLASHMASK_FWD_MASK_CHAIN=1`` / ``0`` forces it on /
    off."""
    forced = env_choice(MASK_CHAIN_ENV, ("0", "1"))
    if forced:
        return forced == "1"
    return head_dim in (64, 96, 128, 192, 256)


def default_row_max_chains(head_dim: int, causal: bool, mask_columns: Optional[int]) -> int:
    """``FwdConfig.row_max_chains`` without an env choice: 4 at D = 64, and at D = 128 on causal
    forms and full attention (there with the row sum as two chains, default_row_sum_chains:
    alone, 4 max chains made full attention 1.4-2.2 % slower in three calls); 1 elsewhere. Measured on the H200 (session 28, ``bench/kernel_ab.py`` forward,
    variants interleaved, 4 chains against 1, two calls at D = 128: 170 and 171). MHA B=4 S=8K
    D=128 causal forms: causal 0.967x / 0.968x, sliding window 0.993x / 0.994x, global + sliding
    window 0.998x / 0.994x, causal documents 1.001x / 1.001x, shared question 1.001x / 1.000x;
    bidirectional forms: full 1.015x / 1.022x, documents 1.006x / 1.006x, prefix-LM 1.003x /
    0.997x. The e2e shape (GQA 16/8 B=2): causal 0.966x, packed SFT 0.991x, sliding window
    0.993x, causal documents 0.995x, documents 0.997x. D=64 (MHA B=4): full 0.957x, causal
    0.973x, causal documents 0.972x, documents 1.002x. D=256: causal 1.026x / 1.036x, full
    0.974x / 1.065x (wide spreads), documents 0.998x, causal documents 0.995x. D=192: masked
    forms 0.993-0.995x, causal 1.007x (left at 1). Call 173 (D=128, against 1): 4 chains full
    1.014x, causal 0.969x; 4 chains with 2 sum chains full 0.993x, causal 0.966x. The forward
    oracle passed 24/24 with 4 forced at every head dim (and with 2 sum chains, call 173). Env
    ``PADDLE_FLASHMASK_FWD_MAX_CHAINS`` = 1 / 2 / 4 / 8 forces a count."""
    forced = env_choice(MAX_CHAINS_ENV, tuple(str(c) for c in ROW_MAX_CHAIN_CHOICES))
    if forced:
        return int(forced)
    if head_dim == 64 or (head_dim == 128 and (causal or mask_columns is None)):
        return 4
    return 1


def default_row_max_rowwise() -> bool:
    """``FwdConfig.row_max_rowwise`` without an env choice: off (every row's max first) until
    the H200 A/B; env ``PADDLE_FLASHMASK_FWD_MAX_ROWWISE=1`` / ``0`` forces it."""
    return env_choice(MAX_ROWWISE_ENV, ("0", "1")) == "1"


def default_row_sum_chains(head_dim: int, causal: bool, mask_columns: Optional[int]) -> int:
    """``FwdConfig.row_sum_chains`` without an env choice: 2 for D = 128 full attention, 1
    elsewhere. Measured on the H200 (session 28, call 173, ``bench/kernel_ab.py`` forward, MHA
    B=4 S=8K D=128, variants interleaved, against one max chain and one sum chain): 4 max chains
    with 2 sum chains full 0.993x (4 max chains alone 1.014x), causal 0.966x (0.969x), sliding
    window 1.003x (0.994x), causal documents 1.008x (1.001x), documents 1.005x (1.006x): it
    helps full attention only. One call. Oracle 24/24 with it forced at every head dim. Env
    ``PADDLE_FLASHMASK_FWD_SUM_CHAINS`` = 1 / 2 / 4 / 8 forces a count."""
    forced = env_choice(SUM_CHAINS_ENV, tuple(str(c) for c in ROW_MAX_CHAIN_CHOICES))
    if forced:
        return int(forced)
    return 2 if head_dim == 128 and not causal and mask_columns is None else 1


def default_stage_first() -> bool:
    """``FwdConfig.stage_first`` without an env choice: off (compiled and SASS-checked on the CPU
    in session 28, not yet run on the H200); env ``PADDLE_FLASHMASK_FWD_STAGE_FIRST=1`` / ``0``
    forces it."""
    return env_choice(STAGE_FIRST_ENV, ("0", "1")) == "1"


def default_pingpong(head_dim: int) -> bool:
    """``FwdConfig.pingpong`` on the fast path without an env choice: on at every head dim (the
    default since session 2). FA4's SM90 forward takes turns only up to D = 128 (with its
    intra-warpgroup overlap); whether D = 192 / 256 are faster without the turns here is
    ``scripts/gpu_session.sh call175``'s question (compiled spill-free on the CPU in session 29,
    not yet run on the H200). Env ``PADDLE_FLASHMASK_FWD_PINGPONG=0`` / ``1`` forces it."""
    forced = env_choice(PINGPONG_ENV, ("0", "1"))
    return True if not forced else forced == "1"


def default_config(dtype: str, head_dim: int, head_dim_v: Optional[int], causal: bool,
                   mask_columns: Optional[int], has_sink: bool = False,
                   fast: Optional[bool] = None, work_order: Optional[bool] = None,
                   tile_ranges: Optional[bool] = None,
                   dynamic_schedule: Optional[bool] = None,
                   partial_overlap: Optional[bool] = None) -> FwdConfig:
    """Tile shape and features for a head dim (smem: Q + stages * (K + V) [+ O] <= 227 KB).

    ``fast=True`` (default; env ``PADDLE_FLASHMASK_FWD_FAST=0`` turns it off): intra-warpgroup
    overlap, ping-pong, double-buffered Q (single for d >= 128: at d128 the 128x128 tile with one
    Q buffer beat 128x112 with two on the H200, causal 621 -> 643, causal documents 338 -> 384
    TFLOP/s, full equal), TMA-store epilogue. Verified on the H200 (fwd_check 24/24, 2026-11-30) and
    about 10 % faster than ``fast=False``, the simpler one-tile-at-a-time loop (also verified).
    ``work_order=True`` (or env ``PADDLE_FLASHMASK_FWD_WORK_ORDER=1``): the persistent scheduler
    takes query tiles in the GPU-computed heaviest-first order (either path): claimed one after
    the other under the dynamic schedule (the default), through static snake slots with env
    ``PADDLE_FLASHMASK_FWD_DYNAMIC_SCHEDULE=0``. Off here (the problem is not known yet); the host
    API turns it on per call where :func:`default_work_order` asks for it.
    """
    dv = head_dim if head_dim_v is None else head_dim_v
    if fast is None:
        fast = env_flag(FAST_ENV, default="1")
    if work_order is None:  # the env's choice; the host API applies the problem-size rule
        work_order = default_work_order()
    if tile_ranges is None:  # on since the H200 check (24/24, 1-3 % faster on documents/windows)
        tile_ranges = env_flag(TILE_RANGES_ENV, default="1")
    tile_ranges = bool(tile_ranges) and mask_columns is not None
    if dynamic_schedule is None:  # on since the H200 A/B: documents +16-19 %, others +0-2 %
        dynamic_schedule = env_flag(DYNAMIC_SCHEDULE_ENV, default="1")
    dynamic_schedule = bool(dynamic_schedule)
    if partial_overlap is None:  # fast path only; on since the H200 A/B (24/24, masks +1-3 %)
        partial_overlap = env_flag(PARTIAL_OVERLAP_ENV, default="1")
    # claims by work class: off until the H200 A/B (env PADDLE_FLASHMASK_FWD_CLAIM_PASSES=3)
    claim_passes = int(env_choice(CLAIM_PASSES_ENV, ("1", "2", "3", "4")) or 1)
    claim_passes = claim_passes if dynamic_schedule and not work_order else 1
    # items per claim of the class passes: 1 until the H200 A/B (env ..._FWD_CLAIM_BLOCK=4)
    claim_block = int(env_choice(CLAIM_BLOCK_ENV, ("1", "2", "4", "8")) or 1)
    claim_block = claim_block if claim_passes > 1 else 1
    # diagonal-only partial tiles: off until the H200 A/B (env ..._FWD_DIAGONAL_PARTIALS=1)
    diagonal_partials = env_flag(DIAGONAL_PARTIALS_ENV) and mask_columns is not None
    # Q descriptors from the warpgroup's uniform slice: off until the H200 A/B (env ..._UNIFORM_Q=1)
    uniform_q = env_choice(UNIFORM_Q_ENV, ("0", "1")) == "1"
    # lazy O rescale (env ..._RESCALE_THRESHOLD=8 / 0 forces it): the measured rule of
    # default_rescale_threshold (session 15)
    rescale_threshold = float(env_choice(RESCALE_THRESHOLD_ENV, ("0", "8"))
                              or default_rescale_threshold(head_dim, causal, mask_columns))
    # the scan before the Q wait: on since the H200 A/B of session 14 (env ..._EARLY_SCAN=0: after)
    early_scan = env_choice(EARLY_SCAN_ENV, ("0", "1")) != "0"
    edge_pass = default_edge_pass(head_dim)
    mask_pred_chain = default_mask_pred_chain(head_dim)
    row_max_chains = default_row_max_chains(head_dim, causal, mask_columns)
    row_max_rowwise = default_row_max_rowwise()
    row_sum_chains = default_row_sum_chains(head_dim, causal, mask_columns)
    stage_first = default_stage_first()
    pingpong = default_pingpong(head_dim)
    if not fast:
        tile_n, stages = {64: (128, 3), 96: (128, 2), 128: (128, 2), 192: (112, 2),
                          256: (64, 2)}.get(head_dim, (128, 2))
        return FwdConfig(dtype, head_dim, dv, bool(causal), mask_columns, bool(has_sink),
                         128, tile_n, stages, work_order=bool(work_order),
                         tile_ranges=tile_ranges, dynamic_schedule=dynamic_schedule,
                         claim_passes=claim_passes, claim_block=claim_block,
                         diagonal_partials=diagonal_partials,
                         uniform_q=uniform_q, rescale_threshold=rescale_threshold,
                         early_scan=early_scan, mask_pred_chain=mask_pred_chain,
                         row_max_chains=row_max_chains, row_max_rowwise=row_max_rowwise,
                         row_sum_chains=row_sum_chains, stage_first=stage_first)
        # edge_pass: measured on the fast path only
    tile_n, stages, q_stages = {64: (128, 3, 2), 96: (128, 2, 2), 128: (128, 2, 1),
                                192: (112, 2, 1), 256: (64, 2, 1)}.get(head_dim, (128, 2, 1))
    if head_dim == 128 and env_choice(D128_TILE_ENV, ("112", "128")) == "112":
        tile_n, q_stages = 112, 2  # the session-3 shape: 128x112 with a double-buffered Q
    config = FwdConfig(dtype, head_dim, dv, bool(causal), mask_columns, bool(has_sink),
                       128, tile_n, stages, q_stages, intra_wg_overlap=True, pingpong=pingpong,
                       tma_store_o=head_dim <= 128, producer_regs=32, consumer_regs=232,
                       work_order=bool(work_order), tile_ranges=tile_ranges,
                       dynamic_schedule=dynamic_schedule, partial_overlap=bool(partial_overlap),
                       claim_passes=claim_passes, claim_block=claim_block,
                         diagonal_partials=diagonal_partials,
                       uniform_q=uniform_q, rescale_threshold=rescale_threshold,
                       early_scan=early_scan, edge_pass=edge_pass,
                       mask_pred_chain=mask_pred_chain, row_max_chains=row_max_chains,
                       row_max_rowwise=row_max_rowwise, row_sum_chains=row_sum_chains,
                       stage_first=stage_first)
    # FA4's tile shapes at d256 (128x80) and d64 (192x128): on since the H200 A/B of session 10
    # (forward 1-10 % faster on every mask of the zoo); env "64" / "128" restores the old shapes
    if head_dim == 256 and (env_choice(D256_TILE_ENV, ("64", "80")) or "80") == "80":
        config = _widest_fitting_tile(config, 80)
    if head_dim == 64 and (env_choice(D64_TILE_M_ENV, ("128", "192")) or "192") == "192":
        config = with_consumer_warpgroups(config, 3)
    if config.edge_pass and config.consumer_regs < 232:  # d64's three warpgroups: it spills
        config = dataclasses.replace(config, edge_pass=False)
    return config


# (producer, consumer) registers per thread after setmaxnreg, by consumer warpgroups
_REGISTER_SPLIT = {2: (32, 232), 3: (32, 160)}


def with_consumer_warpgroups(config: FwdConfig, count: int) -> FwdConfig:
    """``config`` with ``count`` consumer warpgroups of 64 query rows each (tile_m = 64 * count)
    and the register split that fits them. Three is FA4's d64 forward (192 x 128): two
    warpgroups run their softmax while the third issues GEMMs, since at d64 a tile's softmax
    outlasts its GEMMs. 512 threads launch with 128 registers each: producer 32, consumers 160."""
    if count not in _REGISTER_SPLIT:
        raise ValueError(f"with_consumer_warpgroups count: expected one of "
                         f"{sorted(_REGISTER_SPLIT)}, found {count}")
    producer, consumer = _REGISTER_SPLIT[count]
    return dataclasses.replace(config, tile_m=64 * count, producer_regs=producer,
                               consumer_regs=consumer)


def _widest_fitting_tile(config: FwdConfig, tile_n: int) -> FwdConfig:
    """``config`` with key tiles ``tile_n`` wide if two stages of them still fit (FA4's d256 tile
    is 128x80); else ``config`` unchanged. At d256, 128x80 fits with up to two column values per
    key staged (230,400-231,424 B + 1 KB static), not with four (232,448 B)."""
    if not fits_shared_memory(_shared_memory_bytes(config, tile_n)):
        return config
    return dataclasses.replace(config, tile_n=tile_n)


def _acc_to_a_operand(acc_layout: cute.Layout) -> cute.Layout:
    """View a 16-bit wgmma accumulator ((2,2,N/8),M,N) as the A operand ((2,2,2),M,(N/16,N)).

    Both describe the same registers: two adjacent 8-column groups of C form one 16-wide K slice.
    """
    split = cute.logical_divide(acc_layout, ((None, None, 2), None, None))
    return cute.make_layout(
        ((split.shape[0][0], split.shape[0][1], split.shape[0][2][0]), split.shape[1],
         (split.shape[0][2][1], split.shape[2])),
        stride=((split.stride[0][0], split.stride[0][1], split.stride[0][2][0]), split.stride[1],
                (split.stride[0][2][1], split.stride[2])),
    )


class FlashFwdSm90:
    threads_per_wg = 128
    sched_barrier_base = 1  # named barriers 1.. one per consumer warpgroup (0 is __syncthreads)

    def __init__(self, config: FwdConfig):
        self.cfg = config
        self.dtype = _DTYPES[config.dtype]
        self.d = config.head_dim
        self.dv = config.head_dim_v
        self.tile_m = config.tile_m
        self.tile_n = config.tile_n
        self.stages = config.num_stages
        self.q_stages = config.q_stages
        self.pingpong = config.pingpong
        self.overlap = config.intra_wg_overlap
        self.producer_regs = config.producer_regs
        self.consumer_regs = config.consumer_regs
        self.tma_store_o = config.tma_store_o
        self.work_order = config.work_order
        self.tile_ranges = config.tile_ranges
        self.dynamic = config.dynamic_schedule
        self.claim_passes = config.claim_passes
        self.claim_block = config.claim_block
        self.causal = config.causal
        self.mask_columns = config.mask_columns
        self.ncols = fm_mask.num_mask_columns(config.causal, config.mask_columns)
        self.edge_tile_n = config.tile_n if config.edge_pass else 0  # mask.apply_element_mask
        self.mask_pred_chain = config.mask_pred_chain  # mask.apply_element_mask's pred_chain
        self.has_sink = config.has_sink
        self.num_consumer_wg = config.tile_m // 64
        self.num_threads = self.threads_per_wg * (1 + self.num_consumer_wg)
        # per-warpgroup epilogue barriers follow the turn barriers (3, 4 with two warpgroups)
        self.epi_barrier_base = self.sched_barrier_base + self.num_consumer_wg

    # ------------------------------------------------------------------------------------------
    # Host-side trace: tensor views, TMA descriptors, launch
    # ------------------------------------------------------------------------------------------
    @cute.jit
    def __call__(
        self,
        q_ptr: cute.Pointer,
        k_ptr: cute.Pointer,
        v_ptr: cute.Pointer,
        o_ptr: cute.Pointer,
        lse_ptr: cute.Pointer,
        idx_ptr: Optional[cute.Pointer],
        col_min_ptr: Optional[cute.Pointer],
        col_max_ptr: Optional[cute.Pointer],
        sink_ptr: Optional[cute.Pointer],
        order_ptr: Optional[cute.Pointer],
        ranges_ptr: Optional[cute.Pointer],
        counter_ptr: Optional[cute.Pointer],
        batch: Int32,
        seqlen_q: Int32,
        seqlen_k: Int32,
        num_heads: Int32,
        num_kv_heads: Int32,
        num_mask_heads: Int32,
        softmax_scale: Float32,
        num_ctas: Int32,
        stream: cuda.CUstream,
    ):
        d, dv, tm, tn = self.d, self.dv, self.tile_m, self.tile_n
        # [B, S, H, D] contiguous -> (S, D, H, B) views; batch strides in 64 bit.
        mQ = cute.make_tensor(q_ptr, cute.make_layout(
            (seqlen_q, d, num_heads, batch),
            stride=(num_heads * d, 1, d, Int64(seqlen_q) * num_heads * d)))
        mK = cute.make_tensor(k_ptr, cute.make_layout(
            (seqlen_k, d, num_kv_heads, batch),
            stride=(num_kv_heads * d, 1, d, Int64(seqlen_k) * num_kv_heads * d)))
        # V as the B operand of O = P·V: (Dv, Sk) with Dv contiguous (MN-major).
        mVt = cute.make_tensor(v_ptr, cute.make_layout(
            (dv, seqlen_k, num_kv_heads, batch),
            stride=(1, num_kv_heads * dv, dv, Int64(seqlen_k) * num_kv_heads * dv)))
        # Row stride in 64 bit too: the direct-store epilogue computes row * H * Dv, which passes
        # 2^31 at S = 128K, H = 64, Dv = 256 (TMA addresses by coordinates and needs no such care).
        mO = cute.make_tensor(o_ptr, cute.make_layout(
            (seqlen_q, dv, num_heads, batch),
            stride=(Int64(num_heads) * dv, 1, dv, Int64(seqlen_q) * num_heads * dv)))
        mLSE = cute.make_tensor(lse_ptr, cute.make_layout(
            (seqlen_q, num_heads, batch), stride=(1, seqlen_q, Int64(seqlen_q) * num_heads)))
        num_k_tiles = (seqlen_k + tn - 1) // tn
        mIdx, mColMin, mColMax = None, None, None
        if cutlass.const_expr(self.mask_columns is not None):
            c = self.mask_columns
            mIdx = cute.make_tensor(idx_ptr, cute.make_layout(
                (c, seqlen_k, num_mask_heads, batch),
                stride=(1, c, seqlen_k * c, Int64(seqlen_k) * num_mask_heads * c)))
            mColMin, mColMax = fm_mask.summary_tensors(col_min_ptr, col_max_ptr, c, num_k_tiles,
                                                       num_mask_heads, batch)
        mSink = None
        if cutlass.const_expr(self.has_sink):
            mSink = cute.make_tensor(sink_ptr, cute.make_layout((num_heads,)))
        mRanges = None  # per query tile [n_lo, n_hi) (tile_range_kernel.ranges_tensor)
        if cutlass.const_expr(self.tile_ranges):
            mRanges = ranges_tensor(ranges_ptr, (seqlen_q + tm - 1) // tm, num_mask_heads, batch)
        mCounter = None  # next work tile of the dynamic schedule (zeroed by the host per launch)
        if cutlass.const_expr(self.dynamic):
            mCounter = cute.make_tensor(counter_ptr, cute.make_layout((1,)))
        mOrder = None  # work items, heaviest first (tile_scheduler.work_tile)
        if cutlass.const_expr(self.work_order):
            mOrder = cute.make_tensor(order_ptr, cute.make_layout(
                (((seqlen_q + tm - 1) // tm) * num_heads * batch,)))

        tiled_mma_qk = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.K,
            Float32, atom_layout_mnk=(self.num_consumer_wg, 1, 1), tiler_mn=(64, tn))
        tiled_mma_pv = sm90_utils.make_trivial_tiled_mma(
            self.dtype, self.dtype, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN,
            Float32, atom_layout_mnk=(self.num_consumer_wg, 1, 1), tiler_mn=(64, dv),
            a_source=warpgroup.OperandSource.RMEM)

        sQ_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (tm, tn, d), self.dtype,
                                                  self.q_stages)
        sK_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (tm, tn, d), self.dtype,
                                                  self.stages)
        sVt_layout = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (tm, dv, tn), self.dtype,
                                                   self.stages)
        sQ_one = cute.slice_(sQ_layout, (None, None, 0))
        sK_one = cute.slice_(sK_layout, (None, None, 0))
        sVt_one = cute.slice_(sVt_layout, (None, None, 0))
        g2s = cpasync.CopyBulkTensorTileG2SOp()
        tma_q, tma_mQ = cpasync.make_tiled_tma_atom(g2s, mQ, sQ_one, (tm, d))
        tma_k, tma_mK = cpasync.make_tiled_tma_atom(g2s, mK, sK_one, (tn, d))
        tma_v, tma_mVt = cpasync.make_tiled_tma_atom(g2s, mVt, sVt_one, (dv, tn))
        self.q_bytes = cute.size_in_bytes(self.dtype, sQ_one)
        self.k_bytes = cute.size_in_bytes(self.dtype, sK_one)
        self.v_bytes = cute.size_in_bytes(self.dtype, sVt_one)
        # O epilogue: each consumer warpgroup owns a 64-row slab, stored by TMA (rows >= Sq are
        # clipped by the TMA unit).
        sO_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (64, tn, dv), self.dtype,
                                                  self.num_consumer_wg)
        tma_o, tma_mO = None, None
        o_elems = 0
        if cutlass.const_expr(self.tma_store_o):
            tma_o, tma_mO = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(), mO, cute.slice_(sO_layout, (None, None, 0)),
                (64, dv))
            o_elems = cute.cosize(sO_layout)

        stages, ncols, q_stages = self.stages, self.ncols, self.q_stages

        @cute.struct
        class SharedStorage:
            mbar_q: cute.struct.MemRange[Int64, q_stages * 2]
            mbar_k: cute.struct.MemRange[Int64, stages * 2]
            mbar_v: cute.struct.MemRange[Int64, stages * 2]
            meta: cute.struct.MemRange[Int32, stages * 2]
            work: cute.struct.MemRange[Int32, q_stages]  # work tile of each Q stage (dynamic)
            bounds: cute.struct.Align[cute.struct.MemRange[Int32, stages * tn * ncols], 16]
            sQ: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sQ_layout)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sK_layout)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sVt_layout)], 1024]
            sO: cute.struct.Align[cute.struct.MemRange[self.dtype, o_elems], 1024]

        self.shared_storage = SharedStorage
        self.smem_bytes = SharedStorage.size_in_bytes()
        num_m_blocks = (seqlen_q + tm - 1) // tm
        self.kernel(
            tiled_mma_qk, tiled_mma_pv, tma_q, tma_mQ, tma_k, tma_mK, tma_v, tma_mVt,
            mO, tma_o, tma_mO, mLSE, mIdx, mColMin, mColMax, mSink, mOrder, mRanges, mCounter,
            sQ_layout, sK_layout, sVt_layout, sO_layout,
            seqlen_q, seqlen_k, num_heads, num_kv_heads, num_mask_heads,
            softmax_scale, num_m_blocks, batch,
        ).launch(
            grid=[num_ctas, 1, 1],
            block=[self.num_threads, 1, 1],
            smem=SharedStorage.size_in_bytes(),
            stream=stream,
            min_blocks_per_mp=1,
        )

    # ------------------------------------------------------------------------------------------
    # Device
    # ------------------------------------------------------------------------------------------
    @cute.kernel
    def kernel(
        self,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        tma_q: cute.CopyAtom,
        mQ: cute.Tensor,
        tma_k: cute.CopyAtom,
        mK: cute.Tensor,
        tma_v: cute.CopyAtom,
        mVt: cute.Tensor,
        mO: cute.Tensor,
        tma_o: Optional[cute.CopyAtom],
        tma_mO: Optional[cute.Tensor],
        mLSE: cute.Tensor,
        mIdx: Optional[cute.Tensor],
        mColMin: Optional[cute.Tensor],
        mColMax: Optional[cute.Tensor],
        mSink: Optional[cute.Tensor],
        mOrder: Optional[cute.Tensor],
        mRanges: Optional[cute.Tensor],
        mCounter: Optional[cute.Tensor],
        sQ_layout: cute.ComposedLayout,
        sK_layout: cute.ComposedLayout,
        sVt_layout: cute.ComposedLayout,
        sO_layout: cute.ComposedLayout,
        seqlen_q: Int32,
        seqlen_k: Int32,
        num_heads: Int32,
        num_kv_heads: Int32,
        num_mask_heads: Int32,
        softmax_scale: Float32,
        num_m_blocks: Int32,
        batch: Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg_idx = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        num_consumer_warps = self.num_consumer_wg * 4
        producer_group = pipeline.CooperativeGroup(pipeline.Agent.Thread, 1)
        consumer_group = pipeline.CooperativeGroup(pipeline.Agent.Thread, num_consumer_warps)
        pipe_q = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_q.data_ptr(), num_stages=self.q_stages,
            producer_group=producer_group, consumer_group=consumer_group,
            tx_count=self.q_bytes, defer_sync=True)
        pipe_k = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_k.data_ptr(), num_stages=self.stages,
            producer_group=producer_group, consumer_group=consumer_group,
            tx_count=self.k_bytes, defer_sync=True)
        pipe_v = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_v.data_ptr(), num_stages=self.stages,
            producer_group=producer_group, consumer_group=consumer_group,
            tx_count=self.v_bytes, defer_sync=True)

        sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
        sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
        sVt = storage.sV.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)
        sO = None
        if cutlass.const_expr(self.tma_store_o):
            sO = storage.sO.get_tensor(sO_layout.outer, swizzle=sO_layout.inner)
        s_meta = storage.meta.get_tensor(cute.make_layout((2, self.stages)))
        s_work = storage.work.get_tensor(cute.make_layout((self.q_stages,)))
        s_bounds = storage.bounds.get_tensor(cute.make_layout(
            (self.tile_n, self.ncols, self.stages),
            stride=(self.ncols, 1, self.tile_n * self.ncols)))

        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_q)
            cpasync.prefetch_descriptor(tma_k)
            cpasync.prefetch_descriptor(tma_v)
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        diag_offset = seqlen_k - seqlen_q
        if wg_idx == 0:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp_idx == 0:
                self.producer(tma_q, mQ, tma_k, mK, tma_v, mVt, sQ, sK, sVt, s_meta, s_bounds,
                              mIdx, mColMin, mColMax, pipe_q, pipe_k, pipe_v, seqlen_q,
                              seqlen_k, diag_offset, num_heads, num_kv_heads, num_mask_heads,
                              num_m_blocks, batch, mOrder, mRanges, mCounter, s_work)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            self.consumer(tiled_mma_qk, tiled_mma_pv, sQ, sK, sVt, sO, s_meta, s_bounds, mO,
                          tma_o, tma_mO, mLSE,
                          mSink, pipe_q, pipe_k, pipe_v, tidx - self.threads_per_wg, seqlen_q,
                          seqlen_k, diag_offset, softmax_scale, num_heads, num_m_blocks, batch,
                          mOrder, s_work)

    @cute.jit
    def producer(self, tma_q, mQ, tma_k, mK, tma_v, mVt, sQ, sK, sVt, s_meta, s_bounds,
                 mIdx, mColMin, mColMax, pipe_q, pipe_k, pipe_v, seqlen_q, seqlen_k, diag_offset,
                 num_heads, num_kv_heads, num_mask_heads, num_m_blocks: Int32, num_batch: Int32,
                 mOrder: Optional[cute.Tensor], mRanges: Optional[cute.Tensor],
                 mCounter: Optional[cute.Tensor], s_work: cute.Tensor):
        tn = self.tile_n
        lane = cute.arch.lane_idx()
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.q_stages)
        k_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        v_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        num_k_tiles = (seqlen_k + tn - 1) // tn
        total = sched.total_work(num_m_blocks, num_heads, num_batch)
        t = sched.first_work()
        block = self.claim_block
        if cutlass.const_expr(self.dynamic):
            t = sched.claim_work(mCounter, lane, block)
        passes = self.claim_passes
        # loop-invariant arguments: of produce_work_tile after the item, of visited_key_tiles
        tile_args = (total, tma_q, mQ, tma_k, mK, tma_v, mVt, sQ, sK, sVt, s_meta, s_bounds,
                     mIdx, mColMin, mColMax, pipe_q, pipe_k, pipe_v, seqlen_q, seqlen_k,
                     diag_offset, num_heads, num_kv_heads, num_mask_heads, num_m_blocks,
                     num_batch, mOrder, mRanges, s_work, num_k_tiles, lane)
        scan_args = (total, mOrder, mRanges, seqlen_q, diag_offset, num_heads, num_mask_heads,
                     num_m_blocks, num_batch, num_k_tiles)
        while t < total * passes:
            if cutlass.const_expr(block > 1):
                # The block's classes first (range reads with no production between them, one
                # bit per item), then its items of this pass (one copy of the producer code
                # each loop); claims past the list end are nobody's pass (t // total >= passes).
                takes = Int32(0)
                for j in cutlass.range(block, unroll=1):
                    tj = t + j
                    visited = self.visited_key_tiles(tj - (tj // total) * total, *scan_args)
                    if sched.claim_pass(visited, num_k_tiles, passes) == tj // total:
                        takes = takes | (Int32(1) << j)
                for j in cutlass.range(block, unroll=1):
                    if (takes >> j) & 1 != 0:
                        tj = t + j
                        q_state, k_state, v_state = self.produce_work_tile(
                            tj - (tj // total) * total, *tile_args, q_state, k_state, v_state)
            else:
                item = t
                if cutlass.const_expr(passes > 1):
                    item = t - (t // total) * total
                if cutlass.const_expr(self.dynamic and self.work_order):
                    item = sched.claimed_item(mOrder, t)  # the item itself is published
                if cutlass.const_expr(passes > 1):
                    if sched.claim_pass(self.visited_key_tiles(item, *scan_args), num_k_tiles,
                                        passes) == t // total:
                        q_state, k_state, v_state = self.produce_work_tile(
                            item, *tile_args, q_state, k_state, v_state)
                else:
                    q_state, k_state, v_state = self.produce_work_tile(
                        item, *tile_args, q_state, k_state, v_state)
            if cutlass.const_expr(self.dynamic):
                t = sched.claim_work(mCounter, lane, block)
            else:
                t = sched.next_work(t)
        if cutlass.const_expr(self.dynamic):
            # End of the schedule: a Q stage with no data whose work tile is past the end.
            pipe_q.sync_object_empty.wait(q_state.index, q_state.phase)
            if lane == 0:
                s_work[q_state.index] = total
            cute.arch.sync_warp()
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive(pipe_q.producer_get_barrier(q_state))

    @cute.jit
    def produce_work_tile(self, item, total, tma_q, mQ, tma_k, mK, tma_v, mVt, sQ, sK, sVt,
                          s_meta, s_bounds, mIdx, mColMin, mColMax, pipe_q, pipe_k, pipe_v,
                          seqlen_q, seqlen_k, diag_offset, num_heads, num_kv_heads,
                          num_mask_heads, num_m_blocks, num_batch, mOrder, mRanges, s_work,
                          num_k_tiles, lane, q_state, k_state, v_state):
        """Producer: Q and the visited K/V tiles of work tile ``item`` (its index published with
        the Q stage under the dynamic schedule), then the end-of-tile sentinel; returns the
        advanced Q, K and V pipeline states (assigned by the caller, so a branch carries them)."""
        tm, tn = self.tile_m, self.tile_n
        m_block, head, batch = sched.work_tile(mOrder, item, total, num_m_blocks, num_heads,
                                               num_batch, self.dynamic)
        kv_head = head // (num_heads // num_kv_heads)
        mask_head = head // (num_heads // num_mask_heads)
        row_begin = m_block * tm
        row_end = cutlass.min(row_begin + tm, seqlen_q)

        gQ = cute.local_tile(mQ[None, None, head, batch], (tm, self.d), (m_block, 0))
        tQsQ, tQgQ = cpasync.tma_partition(tma_q, 0, cute.make_layout(1),
                                           cute.group_modes(sQ, 0, 2),
                                           cute.group_modes(gQ, 0, 2))
        gK = cute.local_tile(mK[None, None, kv_head, batch], (tn, self.d), (None, 0))
        tKsK, tKgK = cpasync.tma_partition(tma_k, 0, cute.make_layout(1),
                                           cute.group_modes(sK, 0, 2),
                                           cute.group_modes(gK, 0, 2))
        gVt = cute.local_tile(mVt[None, None, kv_head, batch], (self.dv, tn), (0, None))
        tVsV, tVgV = cpasync.tma_partition(tma_v, 0, cute.make_layout(1),
                                           cute.group_modes(sVt, 0, 2),
                                           cute.group_modes(gVt, 0, 2))

        scan_args = (m_block, mask_head, batch, row_begin, row_end, mRanges, mColMin, mColMax,
                     seqlen_q, seqlen_k, diag_offset, num_k_tiles, lane)
        if cutlass.const_expr(self.cfg.early_scan):
            # before the wait for a free Q stage, which ends only when the consumers finish the
            # previous work tile: the scan's global loads then no longer delay this tile's first
            # K/V load behind it
            n_begin, n_end, todo, partial_bits, band_bits = self.start_scan(*scan_args)

        if cutlass.const_expr(self.dynamic):
            # The work tile travels with its Q stage: written before the producer's arrive,
            # which completes the stage's barrier together with Q's bytes.
            pipe_q.sync_object_empty.wait(q_state.index, q_state.phase)
            q_bar = pipe_q.producer_get_barrier(q_state)
            with cute.arch.elect_one():
                cute.arch.mbarrier_expect_tx(q_bar, self.q_bytes)
            cute.copy(tma_q, tQgQ, tQsQ[None, q_state.index], tma_bar_ptr=q_bar)
            if lane == 0:
                s_work[q_state.index] = item
            cute.arch.sync_warp()
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive(q_bar)
        else:
            pipe_q.producer_acquire(q_state)
            cute.copy(tma_q, tQgQ, tQsQ[None, q_state.index],
                      tma_bar_ptr=pipe_q.producer_get_barrier(q_state))
        q_state.advance()

        if cutlass.const_expr(not self.cfg.early_scan):
            n_begin, n_end, todo, partial_bits, band_bits = self.start_scan(*scan_args)
        for chunk in cutlass.range(n_begin // 32, (n_end + 31) // 32, unroll=1):
            # Visit only the set bits of the chunk, lowest first: a chunk of skipped tiles
            # (most chunks of a document mask) costs one ballot, not 32 loop trips.
            while todo != Uint32(0):
                lowest = todo & (Uint32(0) - todo)
                todo = todo ^ lowest
                bit = Int32(31) - Int32(cute.arch.clz(lowest))
                n_block = chunk * 32 + bit
                is_partial = (partial_bits >> bit) & 1
                if cutlass.const_expr(self.cfg.diagonal_partials):
                    # kind 2: partial, but the bands touch no row: diagonal and edge only
                    is_partial = is_partial * (Int32(2) - Int32((Uint32(band_bits) >> bit) & 1))
                # K and V loads start first; the tile's metadata and bounds are staged
                # while they fly. The K stage's full barrier completes only after both
                # the TMA bytes and the arrive below, which follows the staging, so the
                # bounds still travel in lockstep with K.
                pipe_k.sync_object_empty.wait(k_state.index, k_state.phase)
                k_bar = pipe_k.producer_get_barrier(k_state)
                with cute.arch.elect_one():
                    cute.arch.mbarrier_expect_tx(k_bar, self.k_bytes)
                cute.copy(tma_k, tKgK[None, n_block], tKsK[None, k_state.index],
                          tma_bar_ptr=k_bar)
                pipe_v.producer_acquire(v_state)
                cute.copy(tma_v, tVgV[None, n_block], tVsV[None, v_state.index],
                          tma_bar_ptr=pipe_v.producer_get_barrier(v_state))
                if lane == 0:
                    s_meta[0, k_state.index] = n_block
                    s_meta[1, k_state.index] = is_partial
                if cutlass.const_expr(self.mask_columns is not None):
                    if is_partial == 1:  # kind 2 needs no column values
                        self.stage_bounds(mIdx, s_bounds, k_state.index, n_block,
                                          mask_head, batch, seqlen_k, lane)
                cute.arch.sync_warp()
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive(k_bar)
                k_state.advance()
                v_state.advance()
            # the next chunk's classification; none after the last chunk, whose summary read
            # and ballots would only delay the sentinel
            if chunk + 1 < (n_end + 31) // 32:
                todo, partial_bits, band_bits = self.classify_chunk(
                    mColMin, mColMax, chunk + 1, lane, n_begin, n_end, row_begin, row_end,
                    seqlen_q, seqlen_k, diag_offset, mask_head, batch)
        # Sentinel: a K stage with no data and key-tile index -1 ends this work tile.
        pipe_k.sync_object_empty.wait(k_state.index, k_state.phase)
        if lane == 0:
            s_meta[0, k_state.index] = -1
            s_meta[1, k_state.index] = 0
        cute.arch.sync_warp()
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive(pipe_k.producer_get_barrier(k_state))
        k_state.advance()
        return q_state, k_state, v_state

    @cute.jit
    def start_scan(self, m_block, mask_head, batch, row_begin, row_end, mRanges, mColMin, mColMax,
                   seqlen_q, seqlen_k, diag_offset, num_k_tiles, lane):
        """The producer's key-tile scan of a query tile and its first chunk's classification:
        ``(n_begin, n_end, visit_bits, partial_bits, band_bits)`` (:meth:`key_tile_scan`,
        :meth:`classify_chunk`); the scan loop classifies each next chunk at the end of the one
        before."""
        n_begin, n_end = self.key_tile_scan(m_block, mask_head, batch, row_end, mRanges,
                                            diag_offset, num_k_tiles)
        todo, partial_bits, band_bits = Uint32(0), Int32(0), Int32(-1)
        if n_end > n_begin:  # an empty scan reads no summary (its probe would be out of range)
            todo, partial_bits, band_bits = self.classify_chunk(
                mColMin, mColMax, n_begin // 32, lane, n_begin, n_end, row_begin, row_end,
                seqlen_q, seqlen_k, diag_offset, mask_head, batch)
        return n_begin, n_end, todo, partial_bits, band_bits

    def classify_chunk(self, mColMin, mColMax, chunk, lane, n_begin, n_end, row_begin, row_end,
                       seqlen_q, seqlen_k, diag_offset, mask_head, batch):
        """``(visit_bits, partial_bits, band_bits)`` of key-tile chunk ``chunk`` of the producer's
        scan (``fm_mask.chunk_visit_bits``); ``band_bits`` only with ``diagonal_partials``, else
        all set (every partial tile needs its column values); typed as the scan's loop carries them."""
        if cutlass.const_expr(self.cfg.diagonal_partials):
            todo, partial_bits, band_bits = fm_mask.chunk_visit_bits(
                mColMin, mColMax, chunk, lane, n_begin, n_end, row_begin, row_end, self.tile_n,
                seqlen_q, seqlen_k, diag_offset, mask_head, batch, self.causal,
                self.mask_columns, True)
            return Uint32(todo), Int32(partial_bits), Int32(band_bits)
        todo, partial_bits = fm_mask.chunk_visit_bits(
            mColMin, mColMax, chunk, lane, n_begin, n_end, row_begin, row_end, self.tile_n,
            seqlen_q, seqlen_k, diag_offset, mask_head, batch, self.causal, self.mask_columns)
        return Uint32(todo), Int32(partial_bits), Int32(-1)

    def key_tile_scan(self, m_block, mask_head, batch, row_end, mRanges, diag_offset,
                      num_k_tiles):
        """``(n_begin, n_end)``: the key tiles the producer scans for a query tile. Those right of
        the causal diagonal of its last row are never visited; with tile ranges, neither are
        those outside the query tile's [n_lo, n_hi). ``n_begin`` is the Python int 0 without
        tile ranges (``chunk_visit_bits`` then traces no lower bound)."""
        n_end = fm_mask.key_tile_end(row_end, diag_offset, self.tile_n, num_k_tiles, self.causal)
        n_begin = 0
        if cutlass.const_expr(self.tile_ranges):
            n_begin = mRanges[0, m_block, mask_head, batch]
            n_end = cutlass.min(n_end, mRanges[1, m_block, mask_head, batch])
        return n_begin, n_end

    @cute.jit
    def visited_key_tiles(self, item, total, mOrder, mRanges, seqlen_q, diag_offset, num_heads,
                          num_mask_heads, num_m_blocks, num_batch, num_k_tiles):
        """The length of the key-tile scan of work tile ``item`` (:meth:`key_tile_scan`), the
        measure of its claim class (``claim_passes``)."""
        m_block, head, batch = sched.work_tile(mOrder, item, total, num_m_blocks, num_heads,
                                               num_batch, self.dynamic)
        row_end = cutlass.min(m_block * self.tile_m + self.tile_m, seqlen_q)
        n_begin, n_end = self.key_tile_scan(m_block, head // (num_heads // num_mask_heads),
                                            batch, row_end, mRanges, diag_offset, num_k_tiles)
        return cutlass.max(n_end - n_begin, Int32(0))

    @cute.jit
    def stage_bounds(self, mIdx: cute.Tensor, s_bounds: cute.Tensor, stage: Int32,
                     n_block: Int32, mask_head: Int32, batch: Int32, seqlen_k: Int32, lane: Int32):
        """Copy one key tile's ``tile_n * C`` column values into its shared-memory stage (one warp).

        Loads go out in batches of ``BOUNDS_BATCH`` independent loads per lane before their stores,
        so a tile costs ``ceil(tile_n * C / (32 * BOUNDS_BATCH))`` memory round trips rather than
        one per value (few live registers: the producer runs on ``producer_regs``). The last batch
        is guarded when ``tile_n * C`` is not a multiple of 32 (e.g. tile_n 112 with C = 1).
        """
        c = self.mask_columns
        total = self.tile_n * c
        col0 = n_block * self.tile_n
        per_batch = 32 * BOUNDS_BATCH
        num_batches = (total + per_batch - 1) // per_batch
        guarded = num_batches * per_batch != total
        for batch_idx in cutlass.range(num_batches, unroll=1):
            values = []
            for j in cutlass.range_constexpr(BOUNDS_BATCH):
                flat = batch_idx * per_batch + j * 32 + lane
                col = flat // c
                k = flat - col * c
                # a column past Sk (or past the tile) reads an in-bounds key; its store is
                # dropped or zeroed below (the sequence-edge rule masks such columns anyway)
                key = cutlass.min(col0 + col, seqlen_k - 1)
                values.append(mIdx[k, key, mask_head, batch])
            for j in cutlass.range_constexpr(BOUNDS_BATCH):
                flat = batch_idx * per_batch + j * 32 + lane
                col = flat // c
                k = flat - col * c
                value = values[j]
                if col0 + col >= seqlen_k:
                    value = Int32(0)
                if cutlass.const_expr(guarded):
                    if flat < total:
                        s_bounds[col, k, stage] = value
                else:
                    s_bounds[col, k, stage] = value

    @cute.jit
    def consumer(self, tiled_mma_qk, tiled_mma_pv, sQ, sK, sVt, sO, s_meta, s_bounds, mO,
                 tma_o, tma_mO, mLSE,
                 mSink, pipe_q, pipe_k, pipe_v, ctidx: Int32, seqlen_q, seqlen_k, diag_offset,
                 softmax_scale: Float32, num_heads: Int32, num_m_blocks: Int32, num_batch: Int32,
                 mOrder: Optional[cute.Tensor], s_work: cute.Tensor):
        tm, tn = self.tile_m, self.tile_n
        thr_qk = tiled_mma_qk.get_slice(ctidx)
        thr_pv = tiled_mma_pv.get_slice(ctidx)
        thr_q = thr_qk
        if cutlass.const_expr(self.cfg.uniform_q):  # Q's descriptors depend on the WG only
            thr_q = tiled_mma_qk.get_slice(
                cute.arch.make_warp_uniform(ctidx // self.threads_per_wg) * self.threads_per_wg)
        tSrQ = thr_q.make_fragment_A(thr_q.partition_A(sQ))
        tSrK = thr_qk.make_fragment_B(thr_qk.partition_B(sK))
        tOrVt = thr_pv.make_fragment_B(thr_pv.partition_B(sVt))
        acc_S = thr_qk.make_fragment_C(thr_qk.partition_shape_C((tm, tn)))
        acc_O = thr_pv.make_fragment_C(thr_pv.partition_shape_C((tm, self.dv)))
        tOrP = cute.make_rmem_tensor(_acc_to_a_operand(acc_S.layout), self.dtype)
        tOrP_as_acc = cute.make_tensor(tOrP.iterator, acc_S.layout)
        tScS_mn = acc_mn_view(thr_qk.partition_C(cute.make_identity_tensor((tm, tn))))
        tOcO = thr_pv.partition_C(cute.make_identity_tensor((tm, self.dv)))
        tOcO_mn = acc_mn_view(tOcO)
        num_rows = cute.size(tScS_mn, mode=[0])
        scale_log2 = softmax_scale * Float32(LOG2_E)
        row_max = cute.make_rmem_tensor(cute.make_layout(num_rows), Float32)
        row_sum = cute.make_rmem_tensor(cute.make_layout(num_rows), Float32)
        row_scale = cute.make_rmem_tensor(cute.make_layout(num_rows), Float32)
        lse = cute.make_rmem_tensor(cute.make_layout(num_rows), Float32)

        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.q_stages)
        k_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        v_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        mma_qk = cute.make_mma_atom(tiled_mma_qk.op)
        mma_pv = cute.make_mma_atom(tiled_mma_pv.op)
        mma_pv.set(warpgroup.Field.ACCUMULATE, True)

        total = sched.total_work(num_m_blocks, num_heads, num_batch)
        cwg = ctidx // self.threads_per_wg
        # three warpgroups: the one this one hands the turn to, computed once here (computed per
        # turn it costs the loop a register, and at 160 the d64 C=2 + sink variant spills)
        next_wg = cwg
        if cutlass.const_expr(self.pingpong and self.num_consumer_wg > 2):
            next_wg = cute.arch.make_warp_uniform((cwg + 1) % self.num_consumer_wg)
        # Same per-thread C fragment as thr_pv, but over this warpgroup's own 64-row slab.
        thr_pv_wg = None
        if cutlass.const_expr(self.tma_store_o):
            tiled_mma_pv_wg = sm90_utils.make_trivial_tiled_mma(
                self.dtype, self.dtype, warpgroup.OperandMajorMode.K,
                warpgroup.OperandMajorMode.MN, Float32, atom_layout_mnk=(1, 1, 1),
                tiler_mn=(64, self.dv), a_source=warpgroup.OperandSource.RMEM)
            # stmatrix: one 16-byte smem address per 8x8 block pair instead of one per element.
            store_atom = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4),
                                             self.dtype)
            thr_pv_wg = cute.make_tiled_copy_C(store_atom, tiled_mma_pv_wg).get_slice(
                ctidx % self.threads_per_wg)
        if cutlass.const_expr(self.pingpong):
            if cwg == 0:  # the first consumer warpgroup takes the first turn
                cute.arch.barrier_arrive(barrier_id=self.sched_barrier_base,
                                         number_of_threads=2 * self.threads_per_wg)
        t = sched.first_work()
        if cutlass.const_expr(self.dynamic):
            pipe_q.consumer_wait(q_state)  # the work tile arrives with its Q stage
            t = s_work[q_state.index]
        while t < total:
            m_block, head, batch = sched.work_tile(mOrder, t, total, num_m_blocks, num_heads,
                                                   num_batch, self.dynamic)
            row_base = m_block * tm
            row_max.fill(-Float32.inf)
            row_sum.fill(0.0)
            acc_O.fill(0.0)
            if cutlass.const_expr(not self.dynamic):
                pipe_q.consumer_wait(q_state)
            q_idx = q_state.index
            pipe_k.consumer_wait(k_state)
            n_block = s_meta[0, k_state.index]
            is_partial = s_meta[1, k_state.index]
            if cutlass.const_expr(not self.overlap):
                while n_block >= 0:
                    # One key tile at a time: S, mask (partial only), softmax, O += P·V.
                    self.issue_qk(mma_qk, acc_S, tSrQ, tSrK, q_idx, k_state.index)
                    warpgroup.wait_group(0)
                    self.mask_scores(acc_S, tScS_mn, s_bounds, k_state.index, is_partial,
                                     row_base, n_block, seqlen_q, seqlen_k, diag_offset)
                    pipe_k.consumer_release(k_state)
                    k_state.advance()
                    moved = fm_softmax.online_update(acc_S, row_max, row_sum, row_scale,
                                                     scale_log2, self.cfg.rescale_threshold,
                                                     self.cfg.row_max_chains,
                                                     self.cfg.row_max_rowwise,
                                                     self.cfg.row_sum_chains)
                    self.rescale_o(acc_O, row_scale, moved)
                    tOrP_as_acc.store(acc_S.load().to(self.dtype))
                    pipe_v.consumer_wait(v_state)
                    self.issue_pv(mma_pv, acc_O, tOrP, tOrVt, v_state.index)
                    warpgroup.wait_group(0)
                    pipe_v.consumer_release(v_state)
                    v_state.advance()
                    pipe_k.consumer_wait(k_state)
                    n_block = s_meta[0, k_state.index]
                    is_partial = s_meta[1, k_state.index]
            else:
                if n_block >= 0:
                    # First key tile: S, mask, softmax; its P·V is issued with the next tile's S.
                    self.issue_qk(mma_qk, acc_S, tSrQ, tSrK, q_idx, k_state.index)
                    warpgroup.wait_group(0)
                    self.mask_scores(acc_S, tScS_mn, s_bounds, k_state.index, is_partial, row_base,
                                     n_block, seqlen_q, seqlen_k, diag_offset)
                    pipe_k.consumer_release(k_state)
                    k_state.advance()
                    fm_softmax.online_update(acc_S, row_max, row_sum, row_scale, scale_log2,
                                             self.cfg.rescale_threshold, self.cfg.row_max_chains,
                                             self.cfg.row_max_rowwise, self.cfg.row_sum_chains)
                    fm_softmax.convert_pairs(acc_S, tOrP_as_acc)
                    pipe_k.consumer_wait(k_state)
                    n_block = s_meta[0, k_state.index]
                    is_partial = s_meta[1, k_state.index]
                    while n_block >= 0:
                        # Overlap: the tensor cores run S_j = Q·K_jᵀ and O += P_{j-1}·V_{j-1}
                        # while this warpgroup masks and exponentiates S_j.
                        self.turn_wait(cwg)
                        self.issue_qk(mma_qk, acc_S, tSrQ, tSrK, q_idx, k_state.index)
                        pipe_v.consumer_wait(v_state)
                        self.issue_pv(mma_pv, acc_O, tOrP, tOrVt, v_state.index)
                        self.turn_pass(cwg, next_wg)
                        if cutlass.const_expr(self.cfg.partial_overlap):
                            # S_j's group is the older one: complete after wait_group(1), while
                            # P_{j-1}·V_{j-1} still runs under the mask code
                            warpgroup.wait_group(1)
                            self.mask_scores(acc_S, tScS_mn, s_bounds, k_state.index, is_partial,
                                             row_base, n_block, seqlen_q, seqlen_k, diag_offset)
                        elif is_partial != 0:
                            # Partial tile: let P·V drain first so the mask code does not compete
                            # with the registers pinned by an in-flight wgmma.
                            warpgroup.wait_group(0)
                            self.mask_scores(acc_S, tScS_mn, s_bounds, k_state.index, is_partial,
                                             row_base, n_block, seqlen_q, seqlen_k, diag_offset)
                        else:
                            warpgroup.wait_group(1)
                        pipe_k.consumer_release(k_state)
                        k_state.advance()
                        moved = fm_softmax.online_update(acc_S, row_max, row_sum, row_scale,
                                                         scale_log2, self.cfg.rescale_threshold,
                                                         self.cfg.row_max_chains,
                                                     self.cfg.row_max_rowwise,
                                                     self.cfg.row_sum_chains)
                        # ptxas hoists this wait (with K's release) to the start of the row max
                        # when the lazy rescale's branch is the first reader of O. Keeping both
                        # behind the exponentials (K's release made data-dependent on the sum)
                        # was 6-11 % slower on every mask (H200 call 155): keep the early wait.
                        warpgroup.wait_group(0)
                        pipe_v.consumer_release(v_state)
                        v_state.advance()
                        self.rescale_o(acc_O, row_scale, moved)
                        fm_softmax.convert_pairs(acc_S, tOrP_as_acc)
                        pipe_k.consumer_wait(k_state)
                        n_block = s_meta[0, k_state.index]
                        is_partial = s_meta[1, k_state.index]
                    pipe_v.consumer_wait(v_state)
                    self.issue_pv(mma_pv, acc_O, tOrP, tOrVt, v_state.index)
                    warpgroup.wait_group(0)
                    pipe_v.consumer_release(v_state)
                    v_state.advance()
            pipe_k.consumer_release(k_state)  # the sentinel stage
            k_state.advance()
            pipe_q.consumer_release(q_state)
            q_state.advance()

            sink = None
            if cutlass.const_expr(self.has_sink):
                sink = Float32(mSink[head])
            fm_softmax.finalize(acc_O, row_max, row_sum, lse, softmax_scale, sink)
            if cutlass.const_expr(self.tma_store_o):
                self.store_output_tma(acc_O, thr_pv_wg, sO, tma_o, tma_mO, cwg, m_block, head,
                                      batch)
                self.store_lse(tOcO_mn, lse, mLSE, row_base, head, batch, seqlen_q)
            else:
                self.store_output(acc_O, tOcO, tOcO_mn, lse, mO, mLSE, row_base, head, batch,
                                  seqlen_q)
            if cutlass.const_expr(self.dynamic):
                pipe_q.consumer_wait(q_state)
                t = s_work[q_state.index]
            else:
                t = sched.next_work(t)
        if cutlass.const_expr(self.tma_store_o):
            if ctidx % self.threads_per_wg == 0:
                cute.arch.cp_async_bulk_wait_group(0)  # stores must land before the CTA exits

    @cute.jit
    def rescale_o(self, acc_O, row_scale, moved):
        """O *= each row's rescale; with a rescale threshold only where a row of this warp moved
        its max (otherwise every rescale is exactly 1)."""
        if cutlass.const_expr(self.cfg.rescale_threshold > 0.0):
            if cute.arch.vote_any_sync(moved):
                fm_softmax.rescale_o(acc_O, row_scale)
        else:
            fm_softmax.rescale_o(acc_O, row_scale)

    @cute.jit
    def turn_wait(self, cwg: Int32):
        """Ping-pong: wait until it is this warpgroup's turn to issue GEMMs (its softmax then
        overlaps the other warpgroup's GEMMs)."""
        if cutlass.const_expr(self.pingpong):
            cute.arch.barrier(barrier_id=self.sched_barrier_base + cwg,
                              number_of_threads=2 * self.threads_per_wg)

    @cute.jit
    def turn_pass(self, cwg: Int32, next_wg: Int32):
        """Hand the turn to the next consumer warpgroup (round robin; ``next_wg`` is used with
        three warpgroups)."""
        if cutlass.const_expr(self.pingpong):
            if cutlass.const_expr(self.num_consumer_wg == 2):
                cute.arch.barrier_arrive(barrier_id=self.sched_barrier_base + 1 - cwg,
                                         number_of_threads=2 * self.threads_per_wg)
            else:
                cute.arch.barrier_arrive(barrier_id=self.sched_barrier_base + next_wg,
                                         number_of_threads=2 * self.threads_per_wg)

    @cute.jit
    def issue_qk(self, mma_qk, acc_S, tSrQ, tSrK, q_idx, k_idx):
        warpgroup.fence()
        mma_qk.set(warpgroup.Field.ACCUMULATE, False)
        if cutlass.const_expr(self.cfg.stage_first):
            rQ, rK = tSrQ[None, None, None, q_idx], tSrK[None, None, None, k_idx]
        for kb in cutlass.range_constexpr(cute.size(tSrQ, mode=[2])):
            if cutlass.const_expr(self.cfg.stage_first):
                cute.gemm(mma_qk, acc_S, rQ[None, None, kb], rK[None, None, kb], acc_S)
            else:
                cute.gemm(mma_qk, acc_S, tSrQ[None, None, kb, q_idx],
                          tSrK[None, None, kb, k_idx], acc_S)
            mma_qk.set(warpgroup.Field.ACCUMULATE, True)
        warpgroup.commit_group()

    @cute.jit
    def issue_pv(self, mma_pv, acc_O, tOrP, tOrVt, v_idx):
        warpgroup.fence()
        if cutlass.const_expr(self.cfg.stage_first):
            rVt = tOrVt[None, None, None, v_idx]
        for kb in cutlass.range_constexpr(cute.size(tOrP, mode=[2])):
            if cutlass.const_expr(self.cfg.stage_first):
                cute.gemm(mma_pv, acc_O, tOrP[None, None, kb], rVt[None, None, kb], acc_O)
            else:
                cute.gemm(mma_pv, acc_O, tOrP[None, None, kb], tOrVt[None, None, kb, v_idx],
                          acc_O)
        warpgroup.commit_group()

    @cute.jit
    def mask_scores(self, acc_S, tScS_mn, s_bounds, stage, is_partial, row_base, n_block,
                    seqlen_q, seqlen_k, diag_offset):
        """Element mask for partial tiles only; full tiles skip this code at run time. With
        ``diagonal_partials`` a kind-2 tile (bands touch none of its rows) is masked by the
        causal diagonal and the sequence edge only, without its column values."""
        if cutlass.const_expr(self.cfg.diagonal_partials):
            col_base = n_block * self.tile_n
            if is_partial == 1:
                fm_mask.apply_element_mask(acc_mn_view(acc_S), tScS_mn,
                                           s_bounds[None, None, stage], row_base, col_base,
                                           seqlen_q, seqlen_k, diag_offset, self.causal,
                                           self.ncols, False, self.edge_tile_n,
                                           self.mask_pred_chain)
            elif is_partial == 2:  # no column values: one column limit per row
                fm_mask.apply_element_mask(acc_mn_view(acc_S), tScS_mn, None, row_base,
                                           col_base, seqlen_q, seqlen_k, diag_offset, self.causal,
                                           self.ncols, True)
        elif is_partial != 0:
            bounds = None
            if cutlass.const_expr(self.mask_columns is not None):
                bounds = s_bounds[None, None, stage]
            fm_mask.apply_element_mask(
                acc_mn_view(acc_S), tScS_mn, bounds, row_base, n_block * self.tile_n, seqlen_q,
                seqlen_k, diag_offset, self.causal, self.ncols, False, self.edge_tile_n,
                self.mask_pred_chain)

    @cute.jit
    def store_output_tma(self, acc_O, thr_pv_wg, sO, tma_o, tma_mO, cwg, m_block, head, batch):
        """Registers -> this warpgroup's smem slab -> TMA store of 64 rows x Dv."""
        wg_barrier = self.epi_barrier_base + cwg
        leader = (cute.arch.thread_idx()[0] % self.threads_per_wg) == 0
        sO_wg = sO[None, None, cwg]
        if leader:
            cute.arch.cp_async_bulk_wait_group(0, read=True)  # previous store done reading
        cute.arch.barrier(barrier_id=wg_barrier, number_of_threads=self.threads_per_wg)
        rO = cute.make_rmem_tensor(acc_O.layout, self.dtype)
        rO.store(acc_O.load().to(self.dtype))
        cute.copy(thr_pv_wg, thr_pv_wg.retile(rO), thr_pv_wg.partition_D(sO_wg))
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=wg_barrier, number_of_threads=self.threads_per_wg)
        if leader:
            gO = cute.local_tile(tma_mO[None, None, head, batch], (64, self.dv),
                                 (m_block * self.num_consumer_wg + cwg, 0))
            tOsO_tma, tOgO_tma = cpasync.tma_partition(
                tma_o, 0, cute.make_layout(1), cute.group_modes(sO_wg, 0, 2),
                cute.group_modes(gO, 0, 2))
            cute.copy(tma_o, tOsO_tma, tOgO_tma)
            cute.arch.cp_async_bulk_commit_group()

    @cute.jit
    def store_lse(self, tOcO_mn, lse, mLSE, row_base, head, batch, seqlen_q):
        if tOcO_mn[0, 0][1] == 0:
            for r in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[0])):
                row = row_base + tOcO_mn[r, 0][0]
                if row < seqlen_q:
                    mLSE[row, head, batch] = lse[r]

    @cute.jit
    def store_output(self, acc_O, tOcO, tOcO_mn, lse, mO, mLSE, row_base, head, batch,
                     seqlen_q):
        rO = cute.make_rmem_tensor(acc_O.layout, self.dtype)
        rO.store(acc_O.load().to(self.dtype))
        gO = mO[None, None, head, batch]
        for i in cutlass.range_constexpr(cute.size(rO)):
            row = row_base + tOcO[i][0]
            if row < seqlen_q:
                gO[row, tOcO[i][1]] = rO[i]
        if tOcO_mn[0, 0][1] == 0:
            for r in cutlass.range_constexpr(cute.size(tOcO_mn, mode=[0])):
                row = row_base + tOcO_mn[r, 0][0]
                if row < seqlen_q:
                    mLSE[row, head, batch] = lse[r]


# ----------------------------------------------------------------------------------------------
# Host API
# ----------------------------------------------------------------------------------------------

def _placeholder_ptr(dtype, align: int):
    return cute.runtime.make_ptr(dtype, 1 << 12, cute.AddressSpace.gmem, assumed_align=align)


class CompiledForward:
    """A compiled forward variant. Call it with cute tensors (``cute.runtime.from_dlpack``):

    ``fwd(q, k, v, out, lse, startend_row_indices, col_min, col_max, learnable_sink,
    softmax_scale, stream, num_sms)``

    q ``[B,Sq,H,D]``, k ``[B,Sk,Hk,D]``, v ``[B,Sk,Hk,Dv]``, out ``[B,Sq,H,Dv]`` (bf16/fp16,
    contiguous, 16-byte aligned), lse fp32 ``[B,H,Sq]``; ``startend_row_indices`` int32
    ``[B,Hm,Sk,C]`` and ``col_min``/``col_max`` int32 ``[B,Hm,ceil(Sk/tile_n),C]`` (the tile
    summary with ``tile_n = config.tile_n``), or None for plain attention; learnable_sink fp32
    ``[H]`` or None. ``stream`` is a CUDA stream handle (int or ``CUstream``); ``num_sms`` sizes
    the persistent grid. ``work_order`` (only with ``config.work_order``): int32
    ``[B * H * ceil(Sq / tile_m)]`` from ``work_order_kernel`` on the same stream.
    """

    def __init__(self, config: FwdConfig, compiled):
        self.config = config
        self.compiled = compiled

    def __call__(self, q, k, v, out, lse, startend_row_indices, col_min, col_max,
                 learnable_sink, softmax_scale: float, stream, num_sms: int = 132,
                 work_order=None, tile_ranges=None, schedule_counter=None) -> None:
        cfg = self.config
        b, sq, h, sk, hk, hm = check_variant_call(
            q, k, v, startend_row_indices, learnable_sink, head_dim=cfg.head_dim,
            head_dim_v=cfg.head_dim_v, mask_columns=cfg.mask_columns, has_sink=cfg.has_sink)
        if sq == 0 or b == 0 or h == 0:
            return
        if sk == 0:  # a TMA descriptor cannot describe an empty K/V; the answer needs no kernel
            raise ValueError("seqlen_k: expected >= 1 for the cute forward kernel, found 0 (the "
                             "caller fills out = 0 and lse = -inf, or = sink, for Sk == 0)")
        dt = _DTYPES[cfg.dtype]
        ptr = gmem_ptr
        i32 = int32_arg  # one Int32 object per value (launch_args.int32_arg)

        num_m_blocks = -(-sq // cfg.tile_m)
        if (work_order is None) == cfg.work_order:
            raise ValueError(f"work_order: expected {'an int32 buffer' if cfg.work_order else 'None'}"
                             f" for this variant (work_order={cfg.work_order}), found "
                             f"{type(work_order).__name__}")
        if work_order is not None and hasattr(work_order, "shape"):
            length = math.prod(int(x) for x in work_order.shape)
            if length != b * h * num_m_blocks:
                raise ValueError(f"work_order: expected {b * h * num_m_blocks} items "
                                 f"(B * H * ceil(Sq / tile_m)), found {length}")
        if (tile_ranges is None) == cfg.tile_ranges:
            raise ValueError(f"tile_ranges: expected {'an int32 buffer' if cfg.tile_ranges else 'None'}"
                             f" for this variant (tile_ranges={cfg.tile_ranges}), found "
                             f"{type(tile_ranges).__name__}")
        if (schedule_counter is None) == cfg.dynamic_schedule:
            raise ValueError(f"schedule_counter: expected "
                             f"{'an int32 buffer of >= 1 element' if cfg.dynamic_schedule else 'None'}"
                             f" for this variant (dynamic_schedule={cfg.dynamic_schedule}), found "
                             f"{type(schedule_counter).__name__}")
        grid = sched.grid_size(num_m_blocks, h, b, num_sms)
        if not isinstance(stream, cuda.CUstream):
            stream = cuda.CUstream(int(stream))
        if schedule_counter is not None:  # the dynamic schedule starts at work tile 0
            sched.reset_counter(schedule_counter, stream)
        launch(
            self.compiled,
            ptr(q, dt, 16), ptr(k, dt, 16), ptr(v, dt, 16), ptr(out, dt, 16),
            ptr(lse, Float32, 4), ptr(startend_row_indices, Int32, 4), ptr(col_min, Int32, 4),
            ptr(col_max, Int32, 4), ptr(learnable_sink, Float32, 4), ptr(work_order, Int32, 4),
            ptr(tile_ranges, Int32, 4), ptr(schedule_counter, Int32, 4), i32(b),
            i32(sq), i32(sk), i32(h), i32(hk), i32(hm),
            float32_arg(float(softmax_scale)), i32(grid), stream)


def compile_forward(config: FwdConfig) -> CompiledForward:
    """Compile one forward variant (no GPU needed with ``CUTE_DSL_ARCH=sm_90a``)."""
    dt = _DTYPES[config.dtype]
    has_mask = config.mask_columns is not None
    kernel = FlashFwdSm90(config)
    args = (
        _placeholder_ptr(dt, 16), _placeholder_ptr(dt, 16), _placeholder_ptr(dt, 16),
        _placeholder_ptr(dt, 16), _placeholder_ptr(Float32, 4),
        _placeholder_ptr(Int32, 4) if has_mask else None,
        _placeholder_ptr(Int32, 4) if has_mask else None,
        _placeholder_ptr(Int32, 4) if has_mask else None,
        _placeholder_ptr(Float32, 4) if config.has_sink else None,
        _placeholder_ptr(Int32, 4) if config.work_order else None,
        _placeholder_ptr(Int32, 4) if config.tile_ranges else None,
        _placeholder_ptr(Int32, 4) if config.dynamic_schedule else None,
        Int32(1), Int32(128), Int32(128), Int32(1), Int32(1), Int32(1), Float32(1.0), Int32(1),
        cuda.CUstream(0),
    )
    compiled = cute.compile(kernel, *args)
    if kernel.smem_bytes > config.shared_memory_bytes():  # FwdConfig's check relies on it
        raise RuntimeError(f"compile_forward: {config} traced {kernel.smem_bytes} B of shared "
                           f"memory, more than FwdConfig.shared_memory_bytes() "
                           f"{config.shared_memory_bytes()} B: update _shared_memory_bytes")
    result = CompiledForward(config, compiled)
    result.smem_bytes = kernel.smem_bytes
    return result
