"""Host-side rules of the SM90 forward: :class:`FwdConfig` (the kernel's compile-time parameters
and their checks), the env switches, the shared-memory and register budgets, and the defaults
(``default_*``, :func:`default_config`) with the measurements behind each. The kernel itself
(``flash_fwd_sm90``) re-exports these names; the backward's counterpart is ``bwd_rules``."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

import cutlass

from paddle_flashmask.ops.cute import mask as fm_mask
from paddle_flashmask.ops.cute import tile_scheduler as sched
from paddle_flashmask.ops.cute.launch_args import env_choice, env_flag

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
    # tile); the backward slices this way already. The host's choice: default_uniform_q (on at
    # D = 64 since session 30).
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
    # with it 11 and 480; FA4's loop 453). The host's choice: default_stage_first (on at D = 64
    # since session 30).
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


def default_stage_first(head_dim: int, has_sink: bool = False) -> bool:
    """``FwdConfig.stage_first`` without an env choice: on at D = 64, with ``uniform_q``
    (``default_uniform_q``). Session 30 (calls 180 and 182, on an H100: the device tool lent no
    H200 that session; forward kernel, both together against neither, interleaved, B=4 S=8K
    H=16): D = 64 full 0.965 / 0.971x, documents 0.969x, causal documents 0.965x, sliding window
    0.970x, shared question 0.967x, prefix-LM 0.964x, global + sliding window 0.966x, causal
    1.000x; D = 128 1.001-1.014x slower on all eight masks (off); D = 256 mixed (full 1.029 /
    0.962x in two calls, causal 0.994 / 1.007x, documents 0.990 / 0.987x: off). Forward oracle
    24/24 with both forced at every head dim (call 180); the GPU suite 34/34 with them forced
    (call 181). Not with a sink (the D = 64 bidirectional C = 4 kernel then spills 8 B). Env
    ``PADDLE_FLASHMASK_FWD_STAGE_FIRST=1`` / ``0`` forces it."""
    forced = env_choice(STAGE_FIRST_ENV, ("0", "1"))
    return _d64_loop_pair(head_dim, has_sink) if not forced else forced == "1"


def default_uniform_q(head_dim: int, has_sink: bool = False) -> bool:
    """``FwdConfig.uniform_q`` without an env choice: on at D = 64 (measured together with
    ``stage_first``: ``default_stage_first``'s numbers), without a sink; env ``PADDLE_FLASHMASK_FWD_UNIFORM_Q=1``
    / ``0`` forces it."""
    forced = env_choice(UNIFORM_Q_ENV, ("0", "1"))
    return _d64_loop_pair(head_dim, has_sink) if not forced else forced == "1"


def _d64_loop_pair(head_dim: int, has_sink: bool) -> bool:
    """Where ``stage_first`` and ``uniform_q`` are defaults (measured together): D = 64 without a
    sink (with one, the bidirectional C = 4 kernel spills 8 B with both)."""
    return head_dim == 64 and not has_sink


def default_pingpong(head_dim: int) -> bool:
    """``FwdConfig.pingpong`` on the fast path without an env choice: on at every head dim (the
    default since session 2). FA4's SM90 forward takes turns only up to D = 128 (with its
    intra-warpgroup overlap); whether D = 192 / 256 are faster without the turns here is
    ``scripts/gpu_session.sh call176``'s question (compiled spill-free on the CPU in session 29,
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
    uniform_q = default_uniform_q(head_dim, has_sink)
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
    stage_first = default_stage_first(head_dim, has_sink)
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
