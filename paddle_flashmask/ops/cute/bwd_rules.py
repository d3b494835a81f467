"""The SM90 backward's host rules: which ``BwdConfig`` options a call gets (``default_*``), the
environment switches that force them, and the config transforms the host applies
(``with_tile_m``, ``with_two_pds_stages``). Each rule's docstring carries the H200 measurement it
rests on. Host code only: nothing here is traced into a kernel.

The host (interface, compile_check, the claim list) imports them from here; ``flash_bwd_sm90``
re-exports the public names for the tests, which read them beside ``BwdConfig``.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from . import tile_scheduler as sched
from .flash_bwd_prepost import ROWS_PER_CTA

if TYPE_CHECKING:
    from .flash_bwd_sm90 import BwdConfig


# Query rows per tile: 64, or 80 (FlashAttention-4's SM90 tile for bidirectional masks at D = 128:
# 20 % fewer trips per key tile, dQ computed transposed since its M must be a multiple of 64)
TILE_M_CHOICES = (ROWS_PER_CTA, 80, 128)
TILE_M_ENV = "PADDLE_FLASHMASK_BWD_TILE_M"


def default_tile_m(head_dim: int, causal: bool, num_columns: Optional[int], deterministic: bool,
                   has_sink: bool) -> int:
    """``BwdConfig.tile_m`` wanted without a sink: 128 at D = 64 (every mask, MHA and GQA,
    deterministic or not), 80 at D = 128 on bidirectional masks without columns (full attention)
    or with two (documents, prefix-LM; deterministic or not), else 64.

    * ``128`` (FA4's D = 64 tile, in FA4's form with two dS^T stages: ``default_tall_two_pds``,
      and with LSE / delta spread over the lanes: ``default_shfl_stats``): half the per-tile
      rendezvous and hand-offs per query row. Session 31 (calls 193-194, an H100; whole
      backward, interleaved, against the session-30 default): MHA B=4 S=8K H=16 full 0.901x,
      causal 0.898x, documents 0.909x, causal documents 0.933x, sliding window 0.952x, shared
      question 0.952x, prefix-LM 0.858x; GQA 32/8 B=4 full 0.852x, causal 0.882x, causal
      documents 0.903x. Oracle 35/35 with shfl_stats forced (64-row tiles elsewhere), 4/4 on the
      D = 64 cases with both. Session 30 (calls 179, 182-184, H100) had measured the tile with
      per-column global stat loads: full / causal 0.957-0.963x, GQA full 1.025x, masks with
      columns 1.019-1.043x (then off there); with one dS^T stage (``with_tile_m``'s form)
      1.12-1.17x slower everywhere (call 179). The deterministic mode since session 33 (call
      207, an H100, B=2 S=8K H=16, deterministic / default): 1.056-1.129x on six MHA masks
      against 1.232-1.321x on 64-row tiles; GQA 16/8 1.105-1.170x against 1.248-1.340x;
      oracle 4/4 and the 10-rerun bit identity on every D = 64 case and the 32K-token runs.
    * ``80`` (FA3/FA4's full-attention tile at D = 128, in FA4's form: two dS^T stages with
      LSE / delta staged, dQ^T staged in thread order, each warpgroup's block handed off on its
      own: ``default_tall_two_pds``, ``with_dq_by_thread``). Session 33 (calls 208-210, an
      H100, whole backward interleaved against the 64-row tile): MHA B=4 S=8K H=16 full 0.910x
      (5 rounds; 0.949-0.960x in two other calls with two more of FA4's pieces, which do not
      help: ``with_ds_query_major``, ``dk_after_dv``), GQA 32/8 B=4 0.929x, GQA 16/8 B=2
      0.890-0.900x, MHA B=1 S=32K 0.960x; oracle 6/6 (three calls). With two columns
      (documents, prefix-LM) since session 35, with LSE / delta staged and each column pair
      read where it is used (``_tall_staged_columns``) and the first writer of a query tile
      storing its dQ (``with_tall_first_store``): call 218 (an H100, whole backward,
      interleaved, against the 64-row tile) MHA B=4 S=8K H=16 documents 0.969x, prefix-LM
      0.911x, GQA 32/8 documents 0.929x (call 217, stats staged, without the first store:
      GQA prefix-LM 0.962x); oracle 7/7 with both forced. With global or lane-shuffled stats
      there the tile had measured 1.15-1.19x (calls 215, 209). In the deterministic mode since
      session 37, with its dQ handed over under the dK GEMM (``default_det_dq_early``): calls
      228-231 (an H100, whole backward, deterministic / default) MHA B=4 S=8K H=16 full 1.077x
      (64 rows: 1.163x), documents 1.101x (1.101x), prefix-LM 1.077x (1.131x); GQA 16/8 B=2
      full 1.120x (1.183x), documents 1.187x (1.209x), prefix-LM 1.151x (1.172x); oracle 3/3
      and the 10-rerun bit identity (6 runs, 32K tokens among them). Without ``dq_early`` it
      had measured 1.163-1.249x against 1.150-1.246x on 64 rows (call 224). Sessions 24 and
      32 had measured the tile slower without FA4's dQ^T staging or with it handed off as one
      block (calls 137-138, 201, 204-205: 0.98-1.16x).

    Env ``PADDLE_FLASHMASK_BWD_TILE_M=64|80|128`` forces a height where it applies
    (``BwdConfig.tall_tile_applies``: not with a sink, the tile's own head dim; 80 only for
    bidirectional masks without columns or with two; ``deterministic_has_tile_m``); elsewhere
    64."""
    from .launch_args import env_choice

    forced = env_choice(TILE_M_ENV, tuple(str(t) for t in TILE_M_CHOICES))
    if has_sink:
        return ROWS_PER_CTA
    if forced:
        wanted = int(forced)
    else:  # each head dim's taller tile (80 rows: full attention only), then where it applies
        wanted = tall_tile_for_head_dim(head_dim)
    if deterministic and not deterministic_has_tile_m(wanted):
        return ROWS_PER_CTA
    if tall_tile_head_dim(wanted) != head_dim:
        return ROWS_PER_CTA
    if wanted == 80 and (causal or num_columns not in (None, 2)):
        return ROWS_PER_CTA
    return wanted


def deterministic_has_tile_m(tile_m: int) -> bool:
    """Whether the deterministic mode has a path for ``tile_m`` query rows: 64, 128 (its
    semaphores counted in the kernel's own tiles since session 32) and, since session 35, 80
    (dQ^T staged by thread in per-warpgroup blocks: the writer adds both blocks of a tile after
    its chain turn and publishes the tile once both adds completed, as for dq_per_wg; the
    accumulator zeroed, no first store). 80 rows by default since session 37 (with
    ``default_det_dq_early``; ``default_tile_m`` has the numbers)."""
    return tile_m in (ROWS_PER_CTA, 80, 128)


def tall_tile_head_dim(tile_m: int) -> Optional[int]:
    """The head dim a query tile of ``tile_m`` rows (other than 64) is built for: 80 rows at
    D = 128 (dQ computed transposed), 128 rows at D = 64."""
    return {80: 128, 128: 64}.get(tile_m)


def tall_tile_for_head_dim(head_dim: int) -> int:
    """The taller query tile built for ``head_dim`` (``tall_tile_head_dim``'s inverse), else 64."""
    return {128: 80, 64: 128}.get(head_dim, ROWS_PER_CTA)


def with_tile_m(cfg: "BwdConfig", tile_m: int) -> "BwdConfig":
    """``cfg`` with ``tile_m`` query rows where that can apply (``BwdConfig.tall_tile_applies``:
    the options the taller tile has no path for are dropped, a second dS^T stage among them, and
    the D = 64 stats prefetch, which spills at 128 rows), else ``cfg`` unchanged."""
    if (tile_m == cfg.tile_m or not cfg.tall_tile_form
            or tall_tile_head_dim(tile_m) != cfg.head_dim
            or (cfg.deterministic and not deterministic_has_tile_m(tile_m))):
        return cfg
    if cfg.dkv_bulk and tile_m == 80:
        # the deterministic GQA sums by bulk ops (env DET_DKV_CHAIN=bulk, measured on 64-row
        # tiles) stage a whole fp32 dK / dV tile where sP, sdS and sdQ lie: 62,720 B at 80 rows
        # in FA4's form, 65,536 B needed; such a config keeps its 64-row tile
        return cfg
    # H200 (calls 137-138): one dS^T stage with padded dQ rows measured faster than FA3/FA4's
    # form (two stages, which fit only beside the swizzled unpadded tile and without staged
    # stats): 1.03-1.07x against 1.12-1.16x of the 64-row default's time
    return replace(cfg, tile_m=tile_m, pds_stages=1, dq_first_store=False, dq_swizzle=False,
                   dq_per_wg=False, prefetch_stats=False)


TALL_TWO_PDS_ENV = "PADDLE_FLASHMASK_BWD_TALL_TWO_PDS"


def default_tall_two_pds(tile_m: int) -> bool:
    """Whether a taller query tile takes FA3/FA4's form (``with_two_pds_stages``) instead of
    ``with_tile_m``'s: on for every taller tile. 128 rows at D = 64 is FA4's own D = 64 form
    (session 30, calls 179 and 184, H100: 0.957-0.963x of the 64-row default on full / causal,
    against 1.15-1.17x with one dS^T stage); 80 rows at D = 128 is FA4's full-attention form,
    a win once its dQ^T is staged in thread order (``with_dq_by_thread``; session 33, calls
    209-210: 0.89-0.93x of the 64-row tile, against 1.01-1.02x without that staging and
    1.12-1.16x in ``with_tile_m``'s one-stage form, call 138). Env
    ``PADDLE_FLASHMASK_BWD_TALL_TWO_PDS=1`` / ``0`` forces it."""
    from .launch_args import env_choice

    forced = env_choice(TALL_TWO_PDS_ENV, ("0", "1"))
    return forced == "1" if forced else tile_m in (80, 128)


def with_two_pds_stages(cfg: "BwdConfig", staged_stats: bool = True,
                        staged_columns: Optional[bool] = None) -> "BwdConfig":
    """A taller tile in FA3/FA4's form: two dS^T stages, which fit only beside the swizzled,
    unpadded dQ tile. LSE / delta stay staged with Q / dO where ``staged_stats`` (False when
    ``with_shfl_stats`` replaces them next), ``cfg`` staged them, the mask has no columns and
    they fit (80 rows at D = 128: 231,696 B of 232,448, as FA4's own tile; session 32 corrected the
    smem account by the 1 KB the driver reserves outside that limit), else they load from
    global (delta after the mask for multi-column masks). Session 24 measured this form with
    global stats slower than ``with_tile_m``'s (call 138)."""
    two = replace(cfg, pds_stages=2, dq_swizzle=True, dq_uniform_rows=False, stage_stats=False,
                  late_loads=(cfg.num_columns or 0) >= 2)
    # staged where they fit, on the 80-row tile without columns (with two columns the early
    # column values and staged stats spill 12 B; at D = 64's 128 rows, with the stats not
    # shuffled, 4 B: those keep the global loads)
    if staged_columns is None:
        staged_columns = _tall_staged_columns(cfg.tile_m)
    if staged_stats and cfg.stage_stats and (cfg.num_columns is None or staged_columns):
        staged = replace(two, stage_stats=True, late_loads=False)
        if staged.dq_in_smem:
            return staged
    return two


TALL_STAGED_COLUMNS_ENV = "PADDLE_FLASHMASK_BWD_TALL_STAGED_COLUMNS"


def _tall_staged_columns(tile_m: int) -> bool:
    """Whether a taller tile of ``tile_m`` rows stages LSE / delta for masks with columns too
    (each column's pair read from shared memory where it is used, not held:
    ``flash_bwd_sm90``'s ``at_use``): on at 80 rows, the only tile measured with it. Session 34
    (call 217, an H100, B=4 S=8K D=128, whole backward against the 64-row tile): main kernel
    -4.4 % MHA documents, -7.8 % GQA 32/8; with the first store (call 218) the whole backward
    0.911-0.969x. With global or lane-shuffled stats instead the 80-row documents form measured
    1.15-1.16x (call 215). Env ``PADDLE_FLASHMASK_BWD_TALL_STAGED_COLUMNS=1`` / ``0`` forces
    it."""
    from .launch_args import env_choice

    forced = env_choice(TALL_STAGED_COLUMNS_ENV, ("0", "1"))
    return forced == "1" if forced else tile_m == 80


def default_tile_n(head_dim: int) -> int:
    """Keys per CTA: 128 (each consumer WG owns 64 key rows) up to D = 128, else 64 (the WGs split
    the head dim of dK/dV so the fp32 accumulators fit in registers)."""
    return 128 if head_dim <= 128 else 64


ROW_RANGES_ENV = "PADDLE_FLASHMASK_BWD_ROW_RANGES"


RS_DKV_ENV = "PADDLE_FLASHMASK_BWD_RS_DKV"


def default_rs_dkv(head_dim: int) -> bool:
    """dV/dK wgmma with P^T/dS^T from registers where the tile allows it (tile_n 128, D <= 128):
    spill-free, and on the H200 6-7 % faster on full/causal, 3 % on causal documents (every check
    passed); env ``PADDLE_FLASHMASK_BWD_RS_DKV=0`` turns it off."""
    from .launch_args import env_flag

    return default_tile_n(head_dim) == 128 and env_flag(RS_DKV_ENV, default="1")


GQA_IN_CTA_ENV = "PADDLE_FLASHMASK_BWD_GQA_IN_CTA"
PERSISTENT_ENV = "PADDLE_FLASHMASK_BWD_PERSISTENT"
D256_STAGES_ENV = "PADDLE_FLASHMASK_BWD_D256_STAGES"


def default_qdo_stages(head_dim: int) -> int:
    """``BwdConfig.qdo_stages``: 2, but 1 for D = 256 (dQ through smem and the bulk reduce instead
    of per-thread atomics: the fp32 staging buffer only fits next to one Q/dO stage; H200, B=4
    S=8K: forward+backward 219 -> 428 TFLOP/s on full attention, 178 -> 339 on causal documents).
    Env ``PADDLE_FLASHMASK_BWD_D256_STAGES=2`` gives D = 256 two stages again (A/B runs)."""
    from .launch_args import env_choice

    return 2 if head_dim != 256 or env_choice(D256_STAGES_ENV, ("1", "2")) == "2" else 1


DET_CHAINS_ENV = "PADDLE_FLASHMASK_BWD_DET_CHAINS"
LAZY_RELEASE_ENV = "PADDLE_FLASHMASK_BWD_DET_LAZY_RELEASE"


def default_lazy_release(deterministic: bool) -> bool:
    """``BwdConfig.lazy_release`` wanted: off until the H200 A/B; env
    ``PADDLE_FLASHMASK_BWD_DET_LAZY_RELEASE=1`` (used where dQ is staged in smem)."""
    from .launch_args import env_flag

    return deterministic and env_flag(LAZY_RELEASE_ENV)


def default_dq_chains(deterministic: bool, causal: bool = True,
                      num_columns: Optional[int] = None) -> int:
    """``BwdConfig.dq_chains`` wanted for a deterministic backward: 2 for bidirectional masks with
    columns (documents), else 1. Session 16's interleaved whole-backward times
    (``bench/kernel_ab.py``, B=2 S=8K, deterministic / default): documents 1.225 -> 1.176x
    (1.233 -> 1.185x in a second run) with two chains; every causal mask slower with them (causal
    1.12 -> 1.15x, sliding window 1.07 -> 1.16x, shared question 1.19 -> 1.25x, full equal).
    Env ``PADDLE_FLASHMASK_BWD_DET_CHAINS=1``/``2`` forces it (used where dQ is staged in
    smem)."""
    from .launch_args import env_choice

    if not deterministic:
        return 1
    forced = env_choice(DET_CHAINS_ENV, ("1", "2"))
    if forced:
        return int(forced)
    return 2 if (not causal and num_columns is not None) else 1


FUSED_DQ_ENV = "PADDLE_FLASHMASK_BWD_FUSED_DQ"


def default_fused_dq() -> bool:
    """``BwdConfig.fused_dq`` wanted where it applies (persistent grid, dQ staged in smem): off,
    since the H200 A/B of session 6 (correct, but the document mask's main kernel ~15 % slower,
    more than the postprocess it saves); env ``PADDLE_FLASHMASK_BWD_FUSED_DQ=1``."""
    from .launch_args import env_flag

    return env_flag(FUSED_DQ_ENV)


DQ_SWIZZLE_ENV = "PADDLE_FLASHMASK_BWD_DQ_SWIZZLE"


def default_dq_swizzle(head_dim: int) -> bool:
    """``BwdConfig.dq_swizzle`` wanted where it applies (dQ staged in smem, D in {64, 128, 256},
    no fused_dq): on for D = 64 only. H200, session 8 (same-GPU A/B, with dq_first_store):
    D = 64 8K backward +3-9 % (full 364 -> 396 TFLOP/s); D = 128 1-4 % slower (its main kernel
    +3 % on 16 documents at 8K). D = 256 was not measured. Env
    ``PADDLE_FLASHMASK_BWD_DQ_SWIZZLE=1``/``0`` forces it on/off for every D."""
    from .launch_args import env_choice

    forced = env_choice(DQ_SWIZZLE_ENV, ("0", "1"))
    return forced == "1" if forced else head_dim == 64


DQ_PER_WG_ENV = "PADDLE_FLASHMASK_BWD_DQ_PER_WG"


def _measured_two_option_form(head_dim: int, causal: bool, num_columns: Optional[int]) -> bool:
    """The forms where ``stage_stats`` and ``dq_per_wg`` are defaults together, at D = 128: causal
    masks without columns or with one (every causal mask of the zoo; session 21's A/Bs) and full
    attention (no mask, not causal; session 25). Together they remove the two consumer waits that
    Nsight Compute's stall sampling of the full backward found and FA4's kernel lacks (H200 call
    144: 16 % of our consumer warps' samples; the LSE global load behind the S GEMM, and the two
    warpgroups meeting at the shared dQ buffer's barrier); each alone was within noise. Full
    attention, whole backward, both / default (calls 145-146): MHA B=4 S=8K H=16 0.956x, 0.926x;
    GQA 32/8 B=4 0.975x, 16/8 B=2 0.975x; MHA B=1 S=32K 0.985x; stage_stats alone 0.984-0.986x,
    dq_per_wg alone 0.993-1.041x. Bidirectional masks with columns lose with both (documents
    1.007x / 1.015x at 32/8, prefix-LM 1.013x), and causal C = 2 was not measured (its MHA kernel
    spills 4 B with both)."""
    if head_dim != 128:
        return False
    return num_columns in (None, 1) if causal else num_columns is None


def _d64_causal_columns_form(head_dim: int, causal: bool, num_columns: Optional[int],
                             per_head_ctas: bool, deterministic: bool) -> bool:
    """Where ``stage_stats`` and ``dq_per_wg`` are defaults together at D = 64: causal masks with
    columns, MHA (``per_head_ctas``: no GQA head walk, no GQA partials), outside the
    deterministic mode (not measured there). Session 30 (calls 184 and 186, on an H100; whole
    backward, interleaved, MHA B=4 S=8K H=16, both / default): causal documents 0.972 / 0.972x,
    sliding window 0.976x, shared question 0.972x, global + sliding window 0.975x; causal
    without columns 0.985x (its 128-row tile is faster: ``default_tile_m``), full 1.007x,
    documents 1.003x, prefix-LM 1.004x (off); staged stats alone 0.994-0.999x, prefix-LM 1.028x.
    Oracle 5/5 on the D = 64 cases with both forced (call 185). Since session 31 these forms
    default to 128-row tiles (``default_tile_m``: 0.933x and better against this form), which
    drop both options; the rule holds where the tile stays at 64 rows (env ``TILE_M=64``)."""
    return (head_dim == 64 and causal and num_columns is not None and per_head_ctas
            and not deterministic)


def default_dq_per_wg(head_dim: int, causal: bool, num_columns: Optional[int],
                      deterministic: bool = False, gqa: bool = False) -> bool:
    """``BwdConfig.dq_per_wg`` wanted where it applies (with dq_swizzle, which it turns on: dQ
    staged in smem, no fused_dq): at D = 128 for causal masks without columns or with one (every
    causal mask of the zoo) and, since session 25, full attention, both together with
    ``stage_stats`` (``_measured_two_option_form``; MHA and the GQA head walk; the deterministic
    mode on MHA only); off for bidirectional masks with columns, causal C = 2 (not measured; with
    staged stats its MHA kernel spills 4 B), other head dims and deterministic GQA. Deterministic, session 22 (call 124, oracle 29/29
    and bit-identical reruns 8/8 with it forced; deterministic / default, the default already
    with it): MHA B=4 S=8K H=16 causal 1.082 -> 1.046, causal documents 1.147 -> 1.098,
    sliding window 1.139 -> 1.094, shared question 1.159 -> 1.113, global + sliding window
    1.135 -> 1.091 (-3.5 .. -4 % each); GQA 16/8 B=2 causal 1.127 -> 1.087 but packed SFT
    1.262 -> 1.280, causal documents 1.217 -> 1.232, sliding window 1.161 -> 1.183, so
    deterministic GQA keeps the staged-row hand-off. Interleaved whole-backward times
    (``bench/kernel_ab.py``) against the default with ``dv_early`` and ``stage_stats`` on causal
    masks, session 21: MHA B=4 S=8K H=16 (calls 122-123) causal -3.1 %, causal documents -2.9 %,
    sliding window -3.6 %, shared question -2.6 %, global + sliding window -2.3 %; full -0.3 /
    +0.1 %, documents +0.5 %, prefix-LM +1.0 % (bidirectional: off); GQA head walk (call 118)
    16/8 B=2 packed SFT -1.7 %, causal documents -2.1 %, sliding window -1.8 %, shared question
    -2.1 %, global + sliding window -2.2 %, causal -1.8 %, 32/8 B=4 causal documents -2.4 %,
    sliding window -1.9 %, causal +1.0 % (its base spread 6 %). Before causal masks had staged
    stats it was slower on most of them (call 115: MHA +0.9 .. +3.7 %, GQA causal +3.7 %;
    sessions 13 and 15, before ``dv_early``: no gain to +8 %). Env
    ``PADDLE_FLASHMASK_BWD_DQ_PER_WG=1``/``0`` forces it; unforced, it yields to an explicit
    choice of the hand-off (``PADDLE_FLASHMASK_BWD_DQ_UNIFORM_ROWS=1`` or
    ``PADDLE_FLASHMASK_BWD_DQ_SWIZZLE`` set), which then gets exactly what it names."""
    from .launch_args import env_choice

    forced = env_choice(DQ_PER_WG_ENV, ("0", "1"))
    if forced:
        return forced == "1"
    if (env_choice(DQ_UNIFORM_ROWS_ENV, ("0", "1")) == "1"
            or env_choice(DQ_SWIZZLE_ENV, ("0", "1"))):
        return False
    if _d64_causal_columns_form(head_dim, causal, num_columns, not gqa, deterministic):
        return True
    return (_measured_two_option_form(head_dim, causal, num_columns)
            and not (deterministic and gqa))


MASK_BITS_ENV = "PADDLE_FLASHMASK_BWD_MASK_BITS"


def default_mask_bits() -> bool:
    """``BwdConfig.mask_bits`` wanted: on. H200, call 86 (``bench/kernel_ab.py --pass bwd``, S=8K,
    bits / per-element compares): MHA B=4 0.981-0.993x on six masks with columns, causal 1.002x
    (noise); GQA 16/8 B=2 0.981-0.993x; deterministic 0.97-0.98x; backward oracle 27/27 and
    determinism 5/5 with it on. Env ``PADDLE_FLASHMASK_BWD_MASK_BITS=0`` gives the compares."""
    from .launch_args import env_choice

    return env_choice(MASK_BITS_ENV, ("0", "1")) != "0"


DQ_UNIFORM_ROWS_ENV = "PADDLE_FLASHMASK_BWD_DQ_UNIFORM_ROWS"


def default_dq_uniform_rows(head_dim: int, gqa_in_cta: bool, num_columns: Optional[int]) -> bool:
    """``BwdConfig.dq_uniform_rows`` wanted where it applies (dQ staged in smem, one bulk op per
    row): on at D = 128. Session 11 (B=4 S=8K, forward+backward): document 5.63 -> 5.35 ms,
    causal documents -1.3 %, causal -0.9 %, full -0.4 %; oracle 27/27 and determinism with it on
    at every head dim. With the GQA head walk (``gqa_in_cta``) and mask columns the walk's extra
    state makes the producer's 24 registers spill 8-36 B, so until session 15 it stayed off
    there; session 15's interleaved kernel times (B=2 S=8K GQA 16/8, ``bench/kernel_ab.py``) have
    it faster anyway: the end-to-end step's packed documents -3 %, causal documents -2 %,
    documents -3.5 % (the per-lane waterfall of the row adds costs more than the spill). Off at
    the other head dims (not measured). Env ``PADDLE_FLASHMASK_BWD_DQ_UNIFORM_ROWS=1``/``0``
    forces it on/off wherever it applies."""
    from .launch_args import env_choice

    forced = env_choice(DQ_UNIFORM_ROWS_ENV, ("0", "1"))
    if forced:
        return forced == "1"
    return head_dim == 128


FIRST_STORE_ENV = "PADDLE_FLASHMASK_BWD_FIRST_STORE"


def default_dq_first_store() -> bool:
    """``BwdConfig.dq_first_store`` wanted where it applies (not deterministic, dQ staged in
    smem, no fused_dq): on since the H200 check of session 8 (oracle 27/27; the 16-document 8K
    preprocess 141 -> 72 us, backward B=2 S=8K causal documents 0.847 -> 0.805 ms, GQA 0.847 ->
    0.795 ms, full unchanged); env ``PADDLE_FLASHMASK_BWD_FIRST_STORE=0`` turns it off."""
    from .launch_args import env_flag

    return env_flag(FIRST_STORE_ENV, default="1")


DET_FIRST_STORE_ENV = "PADDLE_FLASHMASK_BWD_DET_FIRST_STORE"


def default_det_first_store() -> bool:
    """``BwdConfig.dq_first_store`` in deterministic mode (dQ staged in smem): the first adder
    of each dQ chain stores instead of adding into a zeroed accumulator, so the preprocess no
    longer zeroes ``chains x [B, H, Sq_pad, D]`` fp32 (B=2 S=8K H=16 D=128 with two chains:
    268 MB written). Env ``PADDLE_FLASHMASK_BWD_DET_FIRST_STORE=0`` turns it off."""
    from .launch_args import env_flag

    return env_flag(DET_FIRST_STORE_ENV, default="1")


VECTOR_DKV_ENV = "PADDLE_FLASHMASK_BWD_VECTOR_DKV"


def default_vector_dkv() -> bool:
    """``BwdConfig.vector_dkv``: on; env ``PADDLE_FLASHMASK_BWD_VECTOR_DKV=0`` for the A/B."""
    from .launch_args import env_flag

    return env_flag(VECTOR_DKV_ENV, default="1")


INTERIOR_DKV_ENV = "PADDLE_FLASHMASK_BWD_INTERIOR_DKV"


def default_interior_dkv() -> bool:
    """``BwdConfig.interior_dkv``: off. Measured on the H200 (session 28, call 168, whole
    backward, variants interleaved): MHA B=4 S=8K sliding window 1.017x, causal documents
    1.018x, documents 1.008x, shared question 1.021x, global + sliding window 1.018x, full 0.989x
    (wide spread); GQA 16/8 B=2 packed SFT 1.006x, causal documents 1.005x, sliding window
    1.010x: fewer epilogue instructions, a slower backward (not profiled). Oracle 31/31 and
    bit-identical reruns 8/8 with it forced. Env ``PADDLE_FLASHMASK_BWD_INTERIOR_DKV=1`` turns
    it on (other values than 0 / 1 are an error that names the variable)."""
    from .launch_args import env_choice

    return env_choice(INTERIOR_DKV_ENV, ("0", "1")) == "1"


DET_SYNC_ENV = "PADDLE_FLASHMASK_BWD_DET_SYNC"
# how the deterministic dQ writer waits for its turn and hands the query tile on (BwdConfig.det_sync)
DET_SYNC_MODES = ("acquire", "fence", "relaxed")


def default_det_sync(deterministic: bool) -> str:
    """``BwdConfig.det_sync`` wanted (used where dQ is staged in smem): "relaxed", the fastest on
    the H200 (session 7, B=2 S=8K: deterministic / default 1.02-1.12x against 1.24-1.39x with
    "acquire", bit-exact); env ``PADDLE_FLASHMASK_BWD_DET_SYNC`` picks another mode."""
    from .launch_args import env_choice

    if not deterministic:
        return "acquire"
    return env_choice(DET_SYNC_ENV, DET_SYNC_MODES) or "relaxed"


LATE_LOADS_ENV = "PADDLE_FLASHMASK_BWD_LATE_LOADS"


def default_late_loads() -> bool:
    """``BwdConfig.late_loads`` wanted: off until the H200 check (SASS-checked only); env
    ``PADDLE_FLASHMASK_BWD_LATE_LOADS=1``."""
    from .launch_args import env_flag

    return env_flag(LATE_LOADS_ENV)


DQ_COUNT_LAG_ENV = "PADDLE_FLASHMASK_BWD_DQ_COUNT_LAG"


def default_dq_count_lag() -> int:
    """``BwdConfig.dq_count_lag``: 2; env ``PADDLE_FLASHMASK_BWD_DQ_COUNT_LAG`` = 1, 2 or 3."""
    from .launch_args import env_choice

    return int(env_choice(DQ_COUNT_LAG_ENV, ("1", "2", "3")) or 2)


KEY_MAJOR_ENV = "PADDLE_FLASHMASK_BWD_KEY_MAJOR"


def default_key_major(num_columns: Optional[int] = None, claim_passes: int = 1,
                      gqa_in_cta: bool = False, head_dim: int = 128, causal: bool = False,
                      deterministic: bool = False) -> bool:
    """``BwdConfig.key_major`` (the persistent grid claims key tile n of every head before n + 1)
    wanted, for masks with columns only (plain causal and full: +1.1 / +1.2 %):

    * per-query-head CTAs (no GQA head walk): when the list is claimed in one pass. Session 15's
      interleaved kernel times (``bench/kernel_ab.py``, B=4 S=8K H=16 D=128, 4,096 items):
      global + sliding window -15 %, shared question -4.6 %, causal documents -3 %, documents
      -2.3 %, sliding window 0, prefix-LM +1.2 % (within its spread). With claims by work class
      forced there it loses (session 16: +1.4 to +4.8 % against one pass, head-major).
    * the GQA head walk (``gqa_in_cta``): at D = 128, causal masks, with claims by work class
      (:func:`default_claim_passes`, the few-items-per-CTA grids). Session 16, B=2 S=8K GQA 16/8
      (1,024 items, 3 passes): causal documents -2.6 %, the end-to-end step's packed documents
      -0.5 %, bidirectional documents +0.8 % (so not there). The walk's per-head state plus the
      key-major decode spill 16-28 B in the producer's 24 registers at D = 64 / 256; at D = 128
      it stays within the uniform-row writer's allowance (causal C=1 8 B, C=2 28 B).

    The deterministic mode's persistent grid (``PADDLE_FLASHMASK_BWD_DET_PERSISTENT``) keeps the
    head-major list unless forced (either order keeps its dQ chains deadlock-free: key tiles are
    claimed last first per head). Env ``PADDLE_FLASHMASK_BWD_KEY_MAJOR=1``/``0`` forces it."""
    from .launch_args import env_choice

    forced = env_choice(KEY_MAJOR_ENV, ("0", "1"))
    if forced:
        return forced == "1"
    if num_columns is None or deterministic:
        return False
    if gqa_in_cta:
        return head_dim == 128 and causal and claim_passes > 1
    return claim_passes == 1


CLAIM_PASSES_ENV = "PADDLE_FLASHMASK_BWD_CLAIM_PASSES"


def default_claim_passes(work_items: Optional[int] = None, grid_ctas: Optional[int] = None
                         ) -> int:
    """``BwdConfig.claim_passes`` wanted for a persistent grid of ``grid_ctas`` CTAs over
    ``work_items`` key tiles (None: not known yet, the compile-time default).

    3 (claims by work class) when the grid gets fewer than
    :data:`~paddle_flashmask.ops.cute.tile_scheduler.FEW_ITEMS_PER_CTA` items per CTA,
    else 1 (the list once, in order). The end-to-end step's backward (B=2 S=8K, GQA 16/8 in the
    CTA: 1,024 key tiles over 132 CTAs) left the SMs idle 18 % of its time with one pass and
    3-pass claims took its kernel from 806-809 to 735-739 us (H200, session 13); the schedule
    model (``bench/schedule_sim.py --backward``) puts that tail at 1.23x -> 1.04x, and at
    16-31 items per CTA at 1.06-1.12x -> 1.01x, where the extra claims' cost (session 10:
    B=4 S=8K H=16, 31 per CTA, causal documents 1-5 % slower) eats the gain. Env
    ``PADDLE_FLASHMASK_BWD_CLAIM_PASSES`` = 1-4 overrides the rule, except in deterministic mode,
    which always claims in one pass (class passes would reorder its dQ chains' list and could
    deadlock it: ``default_persistent_ctas``)."""
    from .launch_args import env_choice

    forced = env_choice(CLAIM_PASSES_ENV, ("1", "2", "3", "4"))
    if forced:
        return int(forced)
    if work_items is None or grid_ctas is None:
        return 1
    return 3 if sched.few_items_per_cta(work_items, grid_ctas) else 1


CLAIM_LIST_ENV = "PADDLE_FLASHMASK_BWD_CLAIM_LIST"


def default_claim_list() -> bool:
    """``BwdConfig.claim_list`` wanted wherever claims go by work class (``claim_passes`` > 1:
    the default mode's few-items-per-CTA grids, the deterministic class chains): the class-sorted
    list built before the main kernel, claimed in one pass. Env
    ``PADDLE_FLASHMASK_BWD_CLAIM_LIST=0`` gives the per-pass claims."""
    from .launch_args import env_flag

    return env_flag(CLAIM_LIST_ENV, default="1")


def backward_work_items(config, batch: int, seqlen_k: int, num_heads: int,
                        num_kv_heads: int) -> int:
    """Key tiles in the persistent backward's work list (``_num_tiles``): per batch and query
    head, or per KV head when the CTA walks the query heads itself (``gqa_in_cta``)."""
    heads = num_kv_heads if config.gqa_in_cta else num_heads
    return -(-seqlen_k // config.tile_n) * heads * batch


PDS_STAGES_ENV = "PADDLE_FLASHMASK_BWD_PDS_STAGES"


def default_pds_stages() -> int:
    """``BwdConfig.pds_stages`` wanted where it applies (P^T from registers, two Q/dO stages,
    tile_n 128: D <= 128): 2 since the H200 A/B of session 10 (with ``dq_early``, backward 2-5 %
    faster on full, causal and prefix-LM masks): dS^T gets two buffers and the consumer WGs meet
    once fewer per visited query tile. Env ``PADDLE_FLASHMASK_BWD_PDS_STAGES=1``: one buffer."""
    from .launch_args import env_choice

    return int(env_choice(PDS_STAGES_ENV, ("1", "2")) or 2)


DQ_EARLY_ENV = "PADDLE_FLASHMASK_BWD_DQ_EARLY"


def default_dq_early(head_dim: int, deterministic: bool) -> bool:
    """``BwdConfig.dq_early`` wanted where it applies (dQ staged in smem): on since the H200 A/B
    of session 10 (see ``default_pds_stages``): the dQ GEMM is issued before dK and its tile
    handed over while dK runs. Env ``PADDLE_FLASHMASK_BWD_DQ_EARLY=0``: after. The
    deterministic mode also asks ``default_det_dq_early``."""
    from .launch_args import env_flag

    return env_flag(DQ_EARLY_ENV, default="1") and (not deterministic
                                                     or default_det_dq_early(head_dim))


DET_DQ_EARLY_ENV = "PADDLE_FLASHMASK_BWD_DET_DQ_EARLY"


def default_det_dq_early(head_dim: int) -> bool:
    """Whether the deterministic mode also takes ``dq_early``: at D = 64 and 128 since session
    37 (env ``PADDLE_FLASHMASK_BWD_DET_DQ_EARLY=1`` at every head dim, ``=0`` nowhere). Its
    consumers hand dQ to the writer warp as the default mode's do (the writer, not the
    consumers, waits for the chain's semaphore), so the hand-off runs under the dK GEMM here
    too. Call 226 (an H100, whole backward, deterministic / default, 64-row tiles at D = 128,
    without -> with it): MHA B=4 S=8K H=16 D=128 full 1.191 -> 1.165, causal 1.045 -> 1.034,
    documents 1.155 -> 1.094, prefix-LM 1.159 -> 1.098; GQA 16/8 B=2 full 1.281 -> 1.198,
    documents 1.251 -> 1.203; D = 64 GQA 16/8 documents 1.159 -> 1.139, causal documents
    1.140 -> 1.121. Oracle 8/8 (D = 128 and 64, MHA and GQA) and the 10-rerun bit identity
    (11 runs, 32K tokens among them); the GPU suite 34/34 with it (call 227). D = 256 (and
    96 / 192) not measured."""
    from .launch_args import env_choice

    forced = env_choice(DET_DQ_EARLY_ENV, ("0", "1"))
    if forced:
        return forced == "1"
    return head_dim in (64, 128)


DV_EARLY_ENV = "PADDLE_FLASHMASK_BWD_DV_EARLY"


def default_dv_early() -> bool:
    """``BwdConfig.dv_early`` wanted where it applies (P^T from registers, ``rs_dkv``): on since
    the H200 A/B of session 20. Why: Nsight Compute of the D=128 backward (session 11) put ours
    at ~60 % tensor-pipe use against FA4's 77 %, with both consumer warpgroups meeting at the
    dS^T rendezvous every query tile and the tensor pipe idle through it; FA4 issues its dV GEMM
    before that rendezvous, ours did after. Measured (call 110, whole backward, interleaved):
    MHA B=4 S=8K H=16 D=128 0.944-0.981x on all eight masks (full 0.968, causal 0.973, documents
    0.966, prefix-LM 0.944), GQA 16/8 B=2 0.968-0.975x (packed SFT 0.969), deterministic MHA
    0.967-0.991x; oracle 29/29 and bit-identical reruns 8/8 with it. Env
    ``PADDLE_FLASHMASK_BWD_DV_EARLY=0``: the dV GEMM after the rendezvous."""
    from .launch_args import env_flag

    return env_flag(DV_EARLY_ENV, default="1")


DK_EARLY_ENV = "PADDLE_FLASHMASK_BWD_DK_EARLY"


def default_dk_early() -> bool:
    """``BwdConfig.dk_early`` wanted where it applies (with ``dv_early``): off. Measured (call 111,
    whole backward against ``dv_early`` alone): correct (oracle 29/29, bit-identical 8/8) but
    slower, MHA B=4 causal 1.040x, causal documents 1.030x, documents 1.017x, GQA 16/8 causal
    documents 1.031x: the dQ hand-off no longer runs under the dK GEMM. Env
    ``PADDLE_FLASHMASK_BWD_DK_EARLY=1`` turns it on."""
    from .launch_args import env_flag

    return env_flag(DK_EARLY_ENV, default="0")


DK_AFTER_DV_ENV = "PADDLE_FLASHMASK_BWD_DK_AFTER_DV"


def default_dk_after_dv(head_dim: int, gqa_in_cta: bool, num_columns: Optional[int]) -> bool:
    """``BwdConfig.dk_after_dv`` wanted where it applies (``dv_early`` and ``dq_early``, not
    ``dk_early``): on the GQA head walk (``gqa_in_cta``) at D = 128 for masks with columns, off
    elsewhere (D = 64 / 256 on the walk not measured).
    Why it was built (session 25, call 144's stall sampling of the full backward): our consumers
    wait 12.4 % of their samples for the dQ GEMM to complete, FA4's ~7 % at its two waits; FA4
    issues dK only once dV has completed, so both warpgroups' dQ GEMMs reach the tensor pipe
    ahead of either dK. Measured on the H200 (whole backward against the default, interleaved;
    calls 153 and 155): on the head walk with columns faster in all seven rows, GQA 16/8 B=2
    packed SFT 0.987x / 0.988x, causal documents 0.980x / 0.986x, documents 0.999x, sliding
    window 0.987x, GQA 32/8 B=4 causal documents 0.992x, documents 0.984x; on the walk without
    columns causal 1.006x, full 1.009x; MHA B=4 0.992-1.002x with columns, full 1.015x. Env
    ``PADDLE_FLASHMASK_BWD_DK_AFTER_DV=1`` / ``0`` forces it on / off where it applies."""
    from .launch_args import env_choice

    forced = env_choice(DK_AFTER_DV_ENV, ("0", "1"))
    if forced:
        return forced == "1"
    return head_dim == 128 and gqa_in_cta and num_columns is not None


PREFETCH_STATS_ENV = "PADDLE_FLASHMASK_BWD_PREFETCH_STATS"


def default_prefetch_stats(head_dim: int) -> bool:
    """``BwdConfig.prefetch_stats`` wanted: on at D = 64 since the H200 A/B of session 10 (backward
    6-9 % faster on full and document masks, oracle checks pass), where a query tile's GEMMs are
    too short to hide the stats' global loads and the registers to hold them ahead are free.
    Env ``PADDLE_FLASHMASK_BWD_PREFETCH_STATS=0`` turns it off."""
    from .launch_args import env_flag

    return head_dim == 64 and env_flag(PREFETCH_STATS_ENV, default="1")


SHFL_STATS_ENV = "PADDLE_FLASHMASK_BWD_SHFL_STATS"


def default_shfl_stats(tile_m: int) -> bool:
    """``BwdConfig.shfl_stats`` wanted (``with_shfl_stats`` then replaces the form's prefetched
    or staged stats): on for 128-row query tiles (D = 64), off for 64 rows. Session 31 (an
    H100, whole backward, interleaved, MHA B=4 S=8K): at 128 rows (call 193) full 0.901x,
    causal 0.898x of the per-column global loads' time; at 64 rows (D = 64 with the prefetch,
    call 193-194) 0.999-1.008x; at D = 128 in place of the staged stats full 1.101x, documents
    1.029x, causal documents 1.052x (off). Env ``PADDLE_FLASHMASK_BWD_SHFL_STATS=1`` / ``0``
    forces it wherever it applies."""
    from .launch_args import env_choice

    forced = env_choice(SHFL_STATS_ENV, ("0", "1"))
    return forced == "1" if forced else tile_m == 128


def with_shfl_stats(cfg: "BwdConfig") -> "BwdConfig":
    """``cfg`` with its LSE / delta held spread over each warp's lanes and shuffled at use
    (``BwdConfig.shfl_stats``) where that can apply, else ``cfg`` unchanged."""
    if not cfg.shfl_stats_applies:
        return cfg
    return replace(cfg, shfl_stats=True, prefetch_stats=False, stage_stats=False)


DQ_FRAG_ENV = "PADDLE_FLASHMASK_BWD_DQ_FRAG"


def default_dq_frag() -> bool:
    """``BwdConfig.dq_frag`` wanted where it applies (``with_dq_frag``): off. Session 32 (H100,
    whole backward, interleaved, B=4 S=8K): D = 64 128-row tiles (call 200, oracle 4/4) MHA
    1.002-1.009x, GQA 32/8 1.004-1.007x; D = 128 per-warpgroup blocks (call 202, oracle 11/11)
    0.954-1.024x, within the base's spread. Env ``PADDLE_FLASHMASK_BWD_DQ_FRAG=1`` / ``0``
    forces it."""
    from .launch_args import env_choice

    return env_choice(DQ_FRAG_ENV, ("0", "1")) == "1"


def with_dq_frag(cfg: "BwdConfig") -> "BwdConfig":
    """``cfg`` staging dQ in the accumulator's fragment order (``BwdConfig.dq_frag``) where that
    can apply (the swizzled dQ tile, one block or two, not transposed), else unchanged."""
    return replace(cfg, dq_frag=True) if cfg.dq_frag_applies else cfg


def _with_env_switch(cfg: "BwdConfig", env: str, applies: bool, **fields) -> "BwdConfig":
    """``cfg`` with ``fields`` set where env ``<env>=1`` asks for them and ``applies``; else
    unchanged. The form of every env-only backward option (none on by default)."""
    from .launch_args import env_choice

    if env_choice(env, ("0", "1")) != "1" or not applies:
        return cfg
    return replace(cfg, **fields)


TALL_FIRST_STORE_ENV = "PADDLE_FLASHMASK_BWD_TALL_FIRST_STORE"


def with_tall_first_store(cfg: "BwdConfig") -> "BwdConfig":
    """``cfg`` with ``dq_first_store`` on a taller tile staged by thread
    (``BwdConfig.tall_first_store_applies``) unless env
    ``PADDLE_FLASHMASK_BWD_TALL_FIRST_STORE=0`` (or ``FIRST_STORE=0``) turns it off: the
    preprocess zeroes a flag per query tile instead of the fp32 accumulator. Session 35 (call
    218, an H100, B=4 S=8K D=128, whole backward): the 80-row preprocess 192 -> 99 us (MHA H=16)
    and 384 -> 195 us (GQA 32/8), the postprocess -8 / -15 us; full attention 0.953x MHA (within
    that call's noise: the same config measured 0.965x of itself) and 0.965x GQA; documents
    with staged stats 0.969 / 0.929x of the 64-row tile against 1.007 / 0.938x without it;
    oracle 7/7 forced (a case of whole unvisited query tiles among them). On D = 64's 128-row
    tiles (flags, or in the deterministic mode the chains' semaphores, per 128-row tile) since
    session 37: call 223 (an H100, B=2 S=8K H=16 D=64, whole backward, interleaved against the
    zeroed accumulator) MHA 0.967-0.992x on five masks, GQA 16/8 0.966-0.985x on four;
    deterministic 0.925-0.994x MHA and 0.963-0.995x GQA; oracle 4/4 and the 10-rerun bit
    identity with it forced. The deterministic 80-row form (``dq_by_thread``: the postprocess
    sums, per chunk, the chains whose semaphore for the chunk's tile is set) only with ``=1``
    until a GPU checks it: its zeroed accumulators cost ~47 us per chain at B=2 H=16 S=8K D=128
    (session 38, call 234's preprocess 148 us with two chains against 53 in the default mode)."""
    from .launch_args import env_choice

    forced = env_choice(TALL_FIRST_STORE_ENV, ("0", "1"))
    # unset: the measured forms, those with the swizzled dQ tile (80 rows staged by thread
    # outside the deterministic mode, D = 64's 128 rows with two dS^T stages in either mode);
    # 1: also the one-stage 128-row form (env TALL_TWO_PDS=0, never measured with it) and the
    # deterministic 80-row form (session 38: built and compile-checked, no GPU came to check it)
    untried = cfg.deterministic and cfg.dq_by_thread
    wanted = forced == "1" or (not forced and cfg.dq_swizzle and not untried)
    host_default = default_det_first_store() if cfg.deterministic else default_dq_first_store()
    if not (wanted and cfg.tall_first_store_applies and host_default):
        return cfg
    return replace(cfg, dq_first_store=True)


POST_GATHER_ENV = "PADDLE_FLASHMASK_BWD_POST_GATHER"


def with_post_gather(cfg: "BwdConfig") -> "BwdConfig":
    """``cfg`` with ``post_gather`` (the by-thread postprocess storing four adjacent dQ values
    per lane after four warp shuffles, instead of four 2-byte stores) where env
    ``PADDLE_FLASHMASK_BWD_POST_GATHER=1`` asks for it and dQ^T is staged by thread; else
    unchanged (built in session 35 after call 218 put the 80-row postprocess at 197-198 us
    against 133 us at 64 rows, MHA B=4 S=8K H=16 D=128). Off: session 37 (call 222, an H100,
    whole backward, oracle 6/6) MHA full 1.012x, documents 0.987x, prefix-LM 1.031x, GQA 32/8
    documents 0.983x."""
    return _with_env_switch(cfg, POST_GATHER_ENV, cfg.dq_by_thread, post_gather=True)


DS_QUERY_MAJOR_ENV = "PADDLE_FLASHMASK_BWD_DS_QUERY_MAJOR"


def with_ds_query_major(cfg: "BwdConfig") -> "BwdConfig":
    """``cfg`` with dS stored [queries x keys] (``BwdConfig.ds_query_major``) where env
    ``PADDLE_FLASHMASK_BWD_DS_QUERY_MAJOR=1`` asks for it and P^T comes from registers; else
    unchanged (off by default: built in session 32 for the 80-row tile, whose [keys x queries]
    dS rows get the 32-byte swizzle; session 33, calls 209-210: the 80-row default form with
    it 0.947x of the 64-row tile against 0.910x without, GQA 32/8 0.956x against 0.929x)."""
    return _with_env_switch(cfg, DS_QUERY_MAJOR_ENV, cfg.rs_dkv, ds_query_major=True)


DO_RELEASE_AFTER_DV_ENV = "PADDLE_FLASHMASK_BWD_DO_RELEASE_AFTER_DV"


def with_do_release_after_dv(cfg: "BwdConfig") -> "BwdConfig":
    """``cfg`` releasing each dO stage once dV has completed (``BwdConfig.do_release_after_dv``)
    where env ``PADDLE_FLASHMASK_BWD_DO_RELEASE_AFTER_DV=1`` asks for it and ``dk_after_dv`` is
    on; else unchanged (FA4's order; session 33, call 208, on FA4's 80-row form: full 1.268x
    MHA / 1.182x GQA 32/8 of the 64-row tile against 0.949x / 0.953x without it)."""
    return _with_env_switch(cfg, DO_RELEASE_AFTER_DV_ENV, cfg.dk_after_dv, do_release_after_dv=True)


DQ_BY_THREAD_ENV = "PADDLE_FLASHMASK_BWD_DQ_BY_THREAD"


def with_dq_by_thread(cfg: "BwdConfig") -> "BwdConfig":
    """``cfg`` staging its transposed dQ in thread order (``BwdConfig.dq_by_thread``), each
    warpgroup's block handed to the writer on its own (``dq_per_wg``), wherever it can apply
    (80-row tiles in the two-dS^T-stage form); env ``PADDLE_FLASHMASK_BWD_DQ_BY_THREAD=0``
    turns it off. Session 32: call 203 (ncu of the 80-row form on full attention) found the 40
    scalar dQ^T stores per thread holding 10 % of its samples (39 waiting on the MIO queue),
    FA4's 10 STS.128 2 %; call 204 (one block for both warpgroups, met by both and the writer at
    every tile's hand-off): no faster. Session 33 (calls 209-210, per-warpgroup hand-off, full
    attention): the 80-row form 0.89-0.93x of the 64-row tile with it, 1.01-1.02x without."""
    from .launch_args import env_choice

    if env_choice(DQ_BY_THREAD_ENV, ("0", "1")) == "0" or not cfg.dq_by_thread_applies:
        return cfg
    return replace(cfg, dq_by_thread=True, dq_per_wg=True)


STAGE_STATS_ENV = "PADDLE_FLASHMASK_BWD_STAGE_STATS"


def default_stage_stats(head_dim: int, gqa_in_cta: bool, num_columns: Optional[int],
                        causal: bool = True, gqa: bool = False,
                        deterministic: bool = False) -> bool:
    """``BwdConfig.stage_stats`` wanted: at D = 128 for causal masks without columns or with one
    (every causal mask of the zoo) and full attention (both with ``dq_per_wg``:
    ``_measured_two_option_form``), for masks with columns under the GQA head walk, and for the
    bidirectional C = 2 form (documents) with per-query-head CTAs; off for causal C = 2 and
    bidirectional C = 4 without the walk (not measured; C = 4 would spill 8 B per thread, causal
    C = 2 spills 4 B together with ``dq_per_wg``). At D = 64 (session 30), with ``dq_per_wg``, on
    MHA causal masks with columns outside the deterministic mode (``_d64_causal_columns_form``);
    off at other head dims.
    Interleaved whole-backward times (``bench/kernel_ab.py``): session 15, B=2 S=8K GQA 16/8:
    documents 2,248 -> 1,992 us, causal documents -0.8 %, packed documents -1.3 %, sliding window
    -0.8 %; B=4 S=8K H=16 (MHA): documents -1.5 % (session 15), -1.7 % (session 16). With the dV
    GEMM before the rendezvous (``dv_early``, session 21, call 115, MHA B=4 S=8K H=16): causal
    -1.7 %, causal documents -1.3 %, sliding window -1.8 %, shared question -1.5 %, global +
    sliding window -1.3 % (the old order had them within -0.8 / +1.1 %), full +1.2 % (its spread
    is 5 %; +0.8 % in session 15; with dq_per_wg -4 .. -7 %, session 25, so both are on there);
    GQA 16/8 B=2 causal (no columns) -2.0 %.
    Env ``PADDLE_FLASHMASK_BWD_STAGE_STATS=1``/``0`` forces it: each query tile's LSE/delta staged
    in shared memory with its Q/dO (every head dim; it then replaces the D = 64 prefetch)."""
    from .launch_args import env_choice

    forced = env_choice(STAGE_STATS_ENV, ("0", "1"))
    if forced:
        return forced == "1"
    if _d64_causal_columns_form(head_dim, causal, num_columns, not gqa, deterministic):
        return True
    if head_dim != 128:
        return False
    if _measured_two_option_form(head_dim, causal, num_columns):
        return True
    return num_columns is not None and (gqa_in_cta or (not causal and num_columns == 2))


DET_PERSISTENT_ENV = "PADDLE_FLASHMASK_BWD_DET_PERSISTENT"
DET_CLASS_CHAINS_ENV = "PADDLE_FLASHMASK_BWD_DET_CLASS_CHAINS"
DET_CLASS_RATIO_ENV = "PADDLE_FLASHMASK_BWD_DET_CLASS_RATIO"
DET_DKV_CHAIN_ENV = "PADDLE_FLASHMASK_BWD_DET_DKV_CHAIN"


def _dkv_chain_mode() -> str:
    """``PADDLE_FLASHMASK_BWD_DET_DKV_CHAIN``: ``0`` / unset (the partials), ``1`` (the register
    chain, ``dkv_chain``), ``red`` (the chain through L2, ``dkv_chain`` and ``dkv_red``) or
    ``bulk`` (the chain through L2 by bulk reduce-adds from shared memory, ``dkv_bulk``)."""
    from .launch_args import env_choice

    return env_choice(DET_DKV_CHAIN_ENV, ("0", "1", "red", "bulk"))


def default_dkv_chain(deterministic: bool, gqa: bool, gqa_in_cta: bool) -> bool:
    """``BwdConfig.dkv_chain`` wanted where it applies (deterministic GQA without the head walk):
    off. Correct on the H200 (call 92: oracle 28/28, bit-identical reruns 7/7, GPU deterministic
    tests 2/2 with it on) but slower: whole backward, deterministic / default, GQA 16/8 B=2 S=8K
    causal documents 1.238 -> 1.263x, packed SFT documents 1.320 -> 1.342x, documents 1.199 ->
    1.207x, causal 1.129 -> 1.145x; 32/8 B=1 SFT 1.303 -> 1.374x. The partials' traffic is not
    what the deterministic GQA loses: the epilogue's wait and fp32 reads on the consumers'
    path cost more than the postprocess they save. Env ``PADDLE_FLASHMASK_BWD_DET_DKV_CHAIN=1``
    turns it on there (``red``: through L2 reduce-adds, ``default_dkv_red``)."""
    return (_dkv_chain_mode() in ("1", "red", "bulk") and deterministic and gqa
            and not gqa_in_cta)


def default_dkv_red(deterministic: bool, gqa: bool, gqa_in_cta: bool) -> bool:
    """``BwdConfig.dkv_red`` (with ``dkv_chain``) wanted where it applies (deterministic GQA
    without the head walk): off, env ``PADDLE_FLASHMASK_BWD_DET_DKV_CHAIN=red``. Why it was
    tried (H200 call 103, whole backward split by kernel, deterministic against default): at GQA
    32/8 B=4 S=8K the per-query-head fp32 partials are most of the gap, the postprocess's
    reduction 364-366 us (a kernel the default does not run) and the main kernel +248 to +642
    us, against 3,839 us (causal documents) of default; at 16/8 B=2 the reduction is 107 us of a
    210 us gap (packed SFT). Measured (call 104): correct (oracle 28/28, bit-identical 7/7, GPU
    deterministic tests 2/2) and the reduction kernel 362 -> 123 us (106 -> 64 at 16/8), but the
    main kernel +535 us (32/8 causal documents), +533 (sliding window), +131 (16/8 packed
    SFT): 128 scalar ``red.global.add.f32`` per consumer thread, issued one query head after
    the other, each head's behind its predecessor's fence. Deterministic / default without ->
    with it: 32/8 causal documents 1.180 -> 1.258x, sliding window 1.201 -> 1.301x, documents
    1.156 -> 1.191x; 16/8 packed SFT 1.274 -> 1.394x."""
    return (_dkv_chain_mode() in ("red", "bulk") and deterministic and gqa
            and not gqa_in_cta)


def default_dkv_bulk(deterministic: bool, gqa: bool, gqa_in_cta: bool) -> bool:
    """``BwdConfig.dkv_bulk`` (with ``dkv_red``) wanted where it applies (deterministic GQA
    without the head walk, a variant whose staging region fits: ``BwdConfig.dkv_bulk_fits``):
    env ``PADDLE_FLASHMASK_BWD_DET_DKV_CHAIN=bulk``; where it does not fit, the host keeps the
    per-query-head partials. Why (H200 call 107, GQA 32/8 B=4 S=8K, whole backward split by
    kernel): the partials' reduction kernel alone is 322 us of the deterministic backward, 8-11 %
    of the default's time (sliding window 2,965 us, causal documents 3,856), and ``dkv_red``'s
    scalar reduce-adds moved that cost into the consumers (call 104). Here the consumers only
    stage each tile in shared memory; the dQ writer warp waits for the group's previous head
    and issues one bulk op per tile, so the adds meet in L2 and the postprocess only converts
    the Hk-sized sums. Measured (call 109): correct (oracle 29/29, bit-identical 8/8, GPU
    deterministic tests 2/2), the postprocess 323 -> 128 us, but the main kernel +160 to +314 us
    (each 64 KB tile read out of shared memory by the TMA before the next is staged): 32/8 B=4
    deterministic / default causal documents 1.162 -> 1.154x, documents 1.153 -> 1.171x; 16/8
    B=2 packed SFT 1.252 -> 1.267x. Off."""
    return _dkv_chain_mode() == "bulk" and deterministic and gqa and not gqa_in_cta


DET_WALK_INTERLEAVE_ENV = "PADDLE_FLASHMASK_BWD_DET_WALK_INTERLEAVE"


def default_walk_interleave(deterministic: bool, gqa: bool) -> bool:
    """Deterministic GQA through the head walk with its heads interleaved per query tile
    (``BwdConfig.walk_interleave``, and ``gqa_in_cta`` with it): off. Why it was tried (H200 calls
    97, 99): the default mode without its walk is 1.10-1.16x of the default, and the deterministic
    mode 1.03-1.11x of that; the head-by-head walk stalls on its dQ chains (1.65x on packed SFT).
    Measured (call 101, GQA 16/8 B=2 S=8K, deterministic / default, whole backward, without ->
    with it): correct (oracle 28/28, bit-identical 7/7, GPU deterministic tests 2/2), but only the
    sliding window gains (1.164 -> 1.083x); packed SFT 1.273 -> 1.267, causal 1.096 -> 1.096,
    causal documents 1.212 -> 1.235, documents 1.156 -> 1.186 (with parity chains 1.15-1.32x).
    The masks whose key tiles' walks differ in length lose what the walk saves to the longer
    items' tail. Env ``PADDLE_FLASHMASK_BWD_DET_WALK_INTERLEAVE=1`` turns it on (where the config
    allows it and, per call, the group's heads share a mask head)."""
    from .launch_args import env_choice

    return (env_choice(DET_WALK_INTERLEAVE_ENV, ("0", "1")) == "1" and deterministic and gqa)


DET_DKV_LAST_ENV = "PADDLE_FLASHMASK_BWD_DET_DKV_LAST"


def default_dkv_last(deterministic: bool, gqa: bool, gqa_in_cta: bool) -> bool:
    """``BwdConfig.dkv_last`` wanted where it applies (deterministic GQA without the head walk,
    no ``dkv_chain``): off. The postprocess's reduction of the fp32 partials (B=2 S=8K GQA 16/8:
    268 MB read) is most of what the deterministic GQA backward spends outside its main kernel
    (Nsight Compute, call 94: main kernel 790 us of a 1,015 us backward, against 688 of 776 in
    the default mode), but summing them in the main kernel's epilogue was slower (H200 call 96,
    deterministic / default, GQA 16/8 B=2 S=8K, against the partials: causal documents 1.269 ->
    1.423x, packed SFT 1.324 -> 1.556x, documents 1.350 -> 1.409x, causal 1.192 -> 1.233x,
    sliding window 1.214 -> 1.435x): every CTA's consumers wait for their partial stores
    (the fence before the arrival count) and the last one reads the group's partials with the
    next tile's K/V waiting. Env ``PADDLE_FLASHMASK_BWD_DET_DKV_LAST=1`` turns it on there."""
    from .launch_args import env_choice

    return (env_choice(DET_DKV_LAST_ENV, ("0", "1")) == "1" and deterministic and gqa
            and not gqa_in_cta)


def default_class_ratio() -> int:
    """``BwdConfig.class_ratio``: a key tile is heavy when it visits at least 1/ratio of the
    query tiles. 4, the claim classes' ratio (2 was slower on every causal mask, H200 call 88);
    env ``PADDLE_FLASHMASK_BWD_DET_CLASS_RATIO`` = 2/4/8 overrides."""
    from .launch_args import env_choice

    return int(env_choice(DET_CLASS_RATIO_ENV, ("2", "4", "8")) or sched.CLAIM_CLASS_RATIO)


def default_class_chains(deterministic: bool, persistent: bool, gqa_in_cta: bool,
                         causal: bool = True, num_columns: Optional[int] = None,
                         gqa: bool = False) -> bool:
    """``BwdConfig.class_chains`` wanted where it applies (deterministic, persistent grid, no GQA
    head walk): on for causal masks, except GQA masks with columns. H200 (calls 87-90,
    ``bench/kernel_ab.py --kernel bwd``, B=2 S=8K, deterministic / default, one chain -> class
    chains, call 90): MHA global + sliding window 1.355 -> 1.151x, prefix-LM causal 1.143 ->
    1.132x, shared question 1.155 -> 1.145x, causal 1.113 -> 1.088x, but causal documents 1.139 ->
    1.151x and sliding window 1.050 -> 1.142x: the worst causal mask goes from 1.36x to 1.15x.
    GQA 16/8: causal 1.153 -> 1.129x, but causal documents 1.241 -> 1.257x and packed SFT
    documents 1.317 -> 1.376x, so not there. Bidirectional masks keep parity chains (documents
    1.161 -> 1.197x with class chains, call 87) or one chain (full 1.097 -> 1.104x). Env
    ``PADDLE_FLASHMASK_BWD_DET_CLASS_CHAINS=0``/``1`` forces it where it applies; a chain count
    forced by ``PADDLE_FLASHMASK_BWD_DET_CHAINS`` keeps its own rule (one chain, or parity)."""
    from .launch_args import env_choice

    forced = env_choice(DET_CLASS_CHAINS_ENV, ("0", "1"))
    chains = env_choice(DET_CHAINS_ENV, ("1", "2"))
    if forced == "1" and chains == "1":
        raise ValueError(f"{DET_CLASS_CHAINS_ENV}=1: expected two dQ chains, found "
                         f"{DET_CHAINS_ENV}=1")
    if not (deterministic and persistent and not gqa_in_cta):
        return False
    if forced:
        return forced == "1"
    if chains:
        return False
    return causal and not (gqa and num_columns is not None)


def default_persistent_ctas(deterministic: bool, num_sms: int) -> int:
    """``BwdConfig.persistent_ctas``: one CTA per SM, else 0 (one CTA per key tile). On since the
    H200 check (bwd_check 27/27; causal documents 0.96 -> 0.89 ms, causal -2 %, full equal); env
    ``PADDLE_FLASHMASK_BWD_PERSISTENT=0`` turns it off.

    Deterministic too since session 16: the persistent grid claims each (b, head)'s key tiles last
    first, in one pass (the dQ chain's order, ``_tile_of``), so the lowest claimed unfinished
    tile never waits on an unclaimed one. Oracle 27/27 and determinism 5/5 with it (H200, call
    84); whole-backward times (``bench/kernel_ab.py``, B=2 S=8K, deterministic / default) 0.1-1.8 %
    lower than one CTA per key tile over the MHA zoo, 1-3 % without the GQA head walk. Env
    ``PADDLE_FLASHMASK_BWD_DET_PERSISTENT=0`` gives one CTA per key tile, launched last first."""
    from .launch_args import env_flag

    if not env_flag(PERSISTENT_ENV, default="1"):
        return 0
    if deterministic and not env_flag(DET_PERSISTENT_ENV, default="1"):
        return 0
    return num_sms


def default_gqa_in_cta(gqa: bool, deterministic: bool = False) -> bool:
    """GQA: one CTA per KV head walking its query heads (``BwdConfig.gqa_in_cta``), no fp32 dK/dV
    partials. On since the H200 check (bwd_check 27/27; causal documents 16/8 heads 0.99 -> 0.90
    ms), except in deterministic mode: there a walking CTA holds each query tile's dQ chain for
    its heads one after the other, and per-query-head CTAs were faster on every mask measured
    (session 16, B=2 S=8K GQA 16/8, deterministic / default: causal documents 1.36 -> 1.26x,
    documents 1.43 -> 1.28x, causal 1.18 -> 1.16x, packed SFT documents 1.34 -> 1.34x). Env
    ``PADDLE_FLASHMASK_BWD_GQA_IN_CTA=0``/``1`` forces it."""
    from .launch_args import env_choice

    forced = env_choice(GQA_IN_CTA_ENV, ("0", "1"))
    if forced:
        return gqa and forced == "1"
    return gqa and not deterministic


def default_row_ranges(num_columns: Optional[int]) -> bool:
    """Query-tile ranges per key tile: on for masks (H200, causal documents 8 % faster, every
    check passed), off for plain causal / full; env ``PADDLE_FLASHMASK_BWD_ROW_RANGES=0`` turns
    them off."""
    from .launch_args import env_flag

    return num_columns is not None and env_flag(ROW_RANGES_ENV, default="1")


# every environment switch the default_* functions above read: the host keys its cached choice of
# variant on their values (interface.backward_config), so a switch flipped between calls counts
ENV_SWITCHES = tuple(value for name, value in list(globals().items()) if name.endswith("_ENV"))
