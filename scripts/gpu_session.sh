#!/usr/bin/env bash
# The H200 validation session as a checklist: each `callN` prints the arguments of ONE call of the
# agent's `run` tool (it is a tool, not a shell command) as JSON: kind, timeout_s, carry, command.
# Copy them into `run` in order, each right after the previous one returns (the machine stays warm
# only ~30 s; a cold one must be staged again). docs/gpu_session.md explains order, budgets, outputs.
#
#   scripts/gpu_session.sh all            print every call (0-4, 4b on nvidia-h200; 5a/5b on nvidia-h200-x2)
#   scripts/gpu_session.sh call3          print one call
#   GS_QUICK=1 scripts/gpu_session.sh call2   the shrunk variant of a call (short budget)
#   GS_KIND=nvidia-h200-x2 scripts/gpu_session.sh all; scripts/gpu_session.sh call5   plan B (all on 2 GPUs)
#   scripts/gpu_session.sh check [FILE]   static checks (no GPU): sizes, flags, every program under timeout,
#                                         timeouts summing to less than the call's limit
#   scripts/gpu_session.sh collect DIR    copy a call's returned files (files_at) into bench/results/
#   scripts/gpu_session.sh summary        key numbers and issue-6 targets from bench/results/
#   scripts/gpu_session.sh appendix       rewrite the calls listed at the end of docs/gpu_session.md
#
# Every GPU program runs under `timeout` (SIGINT first, so Python writes what it has; SIGKILL after
# the grace period): a hang costs a bounded, known number of device seconds.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
RESULTS=${GPU_SESSION_RESULTS:-bench/results}   # where collect puts JSON/PNG and summary reads them
LOGS=${GPU_SESSION_LOGS:-out/gpu_session}       # logs: read, not committed (out/ is ignored)
DOC=${GPU_SESSION_DOC:-docs/gpu_session.md}     # whose appendix lists the calls

# --- pieces shared by the commands (kept literal: $OUT and $PWD expand on the GPU machine) --------
PRELUDE='export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1; set -o pipefail
source .devtools/cutedsl-env.sh || exit $?'
# Nsight Compute's sections for an instruction / stall comparison of two kernels (calls 41, 53)
NCU_SECTIONS='--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section InstructionStats --section SchedulerStats'
# the FA4 wheels installed from the carried .whl/ (PEERS_INSTALL), then an import check (PEERS)
PEERS_INSTALL='[ -d .peers/flash_attn ] || timeout 60 python3 -m pip install -q --no-index --no-deps --target "$PWD/.peers" .whl/*.whl || exit 5
export PYTHONPATH="$PWD/.peers:$PYTHONPATH" FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1'
PEERS="$PEERS_INSTALL"'
timeout 45 python3 -c "import flash_attn.cute as f; print(\"fa4 ok\", f.__file__)" || echo "FA4 NOT importable: its rows will be errors"'
# case 0 runs every peer (issue 3's floor is FlexAttention in the same run); the 32K case, short of
# time, runs the issue-5/6 peers: FA4 native/varlen and FA4 mask_mod
BENCH_SYSTEMS_8K='paddle_flashmask,fa4,fa4_mask_mod,flex_attention,sdpa_cudnn'
BENCH_SYSTEMS='paddle_flashmask,fa4,fa4_mask_mod'
# GS_QUICK=1: the shrunk calls for a short budget (docs/gpu_session.md, "Budget and order")
# GS_KIND=nvidia-h200-x2: plan B, calls 0-4b on the 2-GPU machine, then call5 without re-staging
QUICK=${GS_QUICK:-0}
KIND1=${GS_KIND:-nvidia-h200}
if [ "$QUICK" = 1 ]; then
  FWD_FLAGS=' --quick'; BWD_FLAGS=' --quick --bench'; E2E_FLAGS=' --steps 5 --warmup 2'
else
  FWD_FLAGS=''; BWD_FLAGS=' --bench'; E2E_FLAGS=''
fi

emit() {  # emit TITLE KIND TIMEOUT_S CARRY_JSON COMMAND
  TITLE=$1 KIND=$2 TIMEOUT_S=$3 CARRY=$4 CMD=$5 python3 - <<'PY'
import json, os
print("### " + os.environ["TITLE"])
print(json.dumps({"kind": os.environ["KIND"], "timeout_s": int(os.environ["TIMEOUT_S"]),
                  "carry": json.loads(os.environ["CARRY"]), "command": os.environ["CMD"]}))
print()
PY
}

call0() {
  emit "call 0 - nvidia-h200: start the machine, stage CuTe DSL part a (exit 3 = 'part b MISSING' is expected) [~1.5-2 min incl. start]" \
    "$KIND1" 180 '[".cutedsl/a", ".devtools"]' \
'source .devtools/cutedsl-env.sh; rc=$?
timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
exit $rc'
}

call1() {
  emit "call 1 - stage part b, precompile every GPU-test kernel into the disk cache, GPU test suite -> gpu_report.json [<= 9 min]" \
    "$KIND1" 580 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
timeout -s INT -k 10 110 python3 tests/gpu/precompile.py --jobs 14 2>&1 | tee $OUT/precompile.log | tail -n 4
PT=""; python3 -c "import pytest_timeout" 2>/dev/null && PT="--timeout 240"
timeout -s INT -k 20 420 python3 -m pytest -v -rfE --durations=15 -p no:cacheprovider $PT tests/gpu 2>&1 | tee $OUT/pytest_gpu.log
echo "pytest exit $?"; ls -la $OUT'
}

call2() {
  emit "call 2 - kernel checks vs fp32 dense oracles: forward (default, --fast), backward --bench (incl. S=32K deterministic) [<= 9.5 min]" \
    "$KIND1" 590 '[".devtools"]' \
"$PRELUDE"'
timeout -s INT -k 10 140 python3 tests/gpu/fwd_check.py'"$FWD_FLAGS"' --json-name fwd_check.json 2>&1 | tee $OUT/fwd_check.log | tail -n 8
timeout -s INT -k 10 120 python3 tests/gpu/fwd_check.py --fast'"$FWD_FLAGS"' --json-name fwd_check_fast.json 2>&1 | tee $OUT/fwd_check_fast.log | tail -n 8
timeout -s INT -k 10 270 python3 tests/gpu/bwd_check.py'"$BWD_FLAGS"' 2>&1 | tee $OUT/bwd_check.log
echo "bwd exit $?"; ls -la $OUT'
}

call2b() {
  emit "call 2b (optional, after call 4 if budget allows) - the forward's work-ordered scheduler, as docs/kernels_fwd.md asks [<= 5.5 min]" \
    "$KIND1" 330 '[".devtools"]' \
"$PRELUDE"'
timeout -s INT -k 10 150 python3 tests/gpu/fwd_check.py --work-order --json-name wo_cases.json 2>&1 | tee $OUT/wo_cases.log | tail -n 6
timeout -s INT -k 10 70 python3 tests/gpu/fwd_check.py --work-order --fast --json-name wo_fast.json --only causal_d128,causal_doc_C1,random_C4,d256_causal_window_sink 2>&1 | tee $OUT/wo_fast.log | tail -n 6
timeout -s INT -k 10 60 python3 tests/gpu/fwd_check.py --work-order --bench --json-name wo_bench.json --only causal_d128 2>&1 | tee $OUT/wo_bench.log | tail -n 6
ls -la $OUT'
}

call3() {
  emit "call 3 - same-run attention benchmark vs FA4 (issue 6 item 3): case 0 (B=4 S=8K), case 1 (B=1 S=32K) [<= 9.5 min]" \
    "$KIND1" 590 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 320 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag cases0 2>&1 | tee $OUT/bench_cases0.log | tail -n 30'"$(
  [ "$QUICK" = 1 ] || printf '\n%s' 'timeout -s INT -k 10 120 python3 bench/bench_attention.py --cases 1 --systems '"$BENCH_SYSTEMS"' --tag cases1 2>&1 | tee $OUT/bench_cases1.log | tail -n 16')"'
ls -la $OUT'
}

call4() {
  emit "call 4 - end-to-end training step (issue 6 item 4): flashmask vs SDPA dense mask vs FA4 varlen [<= 9.5 min]" \
    "$KIND1" 590 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 20 450 python3 bench/e2e_step.py --impl-timeout 140'"$E2E_FLAGS"' 2>&1 | tee $OUT/e2e_step.log | tail -n 16
ls -la $OUT'
}

call4b() {
  emit "call 4b (optional, if budget_left_s >= 700 after call 4) - the extra attention shapes: GQA 32/8, D=64, D=256 [<= 9.5 min]" \
    "$KIND1" 580 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 440 python3 bench/bench_attention.py --cases 2,3,4 --systems paddle_flashmask,fa4 --tag cases2_3_4 2>&1 | tee $OUT/bench_cases234.log | tail -n 40
ls -la $OUT'
}

call5a() {
  emit "call 5a - nvidia-h200-x2 (gives the 1-GPU machine back, starts a bare 2-GPU one): stage part a [~2 min incl. start]" \
    nvidia-h200-x2 180 '[".cutedsl/a", ".devtools"]' \
'source .devtools/cutedsl-env.sh; rc=$?
timeout 30 nvidia-smi --query-gpu=index,name,memory.used --format=csv
exit $rc'
}

# the CP scaling run of calls 5b and 5 (NCCL_NVLS_ENABLE=0 on the torchrun line itself as well)
CP_RUN='NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 420 python3 -m torch.distributed.run --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality,lpt --equal-chunks 1,0 --chunk-sizes 2048,1024 2>&1 | tee $OUT/cp_scaling.log | tail -n 40
ls -la $OUT'

call5b() {
  emit "call 5b - nvidia-h200-x2: stage part b, context-parallel scaling on 2 GPUs (NCCL, NVLink multicast off) [<= 8 min]" \
    nvidia-h200-x2 500 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
$CP_RUN"
}

call5() {
  emit "call 5 - plan B only (GS_KIND=nvidia-h200-x2, calls 0-4 already ran on this staged 2-GPU machine): context-parallel scaling [<= 8 min]" \
    nvidia-h200-x2 460 '[".devtools"]' \
"$PRELUDE
$CP_RUN"
}

call6() {
  emit "call 6 (next session, first after call 1) - forward tile ranges and backward row ranges vs oracle, forward A/B, host time per call at HEAD [<= 8.5 min]" \
    "$KIND1" 510 '[".devtools"]' \
"$PRELUDE"'
timeout -s INT -k 10 150 python3 tests/gpu/fwd_check.py --tile-ranges --json-name fwd_check_ranges.json 2>&1 | tee $OUT/fwd_check_ranges.log | tail -n 6
timeout -s INT -k 10 100 python3 tests/gpu/fwd_check.py --tile-ranges --bench --only causal_doc_C1 --json-name ranges_bench.json 2>&1 | tee $OUT/ranges_bench.log | tail -n 10
timeout -s INT -k 10 70 python3 tests/gpu/bwd_check.py --quick --row-ranges --json-name ranges_bwd.json 2>&1 | tee $OUT/ranges_bwd.log | tail -n 4
timeout -s INT -k 10 100 python3 bench/profile_call.py --masks full,sliding_window,causal_document --cprofile 2>&1 | tee $OUT/profile_call.log | tail -n 60
ls -la $OUT'
}

call7() {
  emit "call 7 (session 4, first after call 1) - the prepared options vs oracle + A/B: persistent and GQA-in-CTA backward, partial-tile overlap and the d128 128x128 tile in the forward, skipping test with the persistent backward [<= 9.5 min]" \
    "$KIND1" 580 '[".devtools"]' \
"$PRELUDE"'
timeout -s INT -k 10 120 python3 tests/gpu/bwd_check.py --persistent --bench --json-name bwd_persistent.json 2>&1 | tee $OUT/bwd_persistent.log | tail -n 6
timeout -s INT -k 10 100 python3 tests/gpu/bwd_check.py --gqa-in-cta --bench --json-name bwd_gqa_in_cta.json 2>&1 | tee $OUT/bwd_gqa_in_cta.log | tail -n 6
timeout -s INT -k 10 100 python3 tests/gpu/fwd_check.py --partial-overlap --bench --json-name fwd_partial_overlap.json 2>&1 | tee $OUT/fwd_partial_overlap.log | tail -n 8
timeout -s INT -k 10 100 python3 tests/gpu/fwd_check.py --d128-override "{\"tile_n\": 128, \"q_stages\": 1}" --tile-shapes --bench --json-name fwd_tile_shapes.json 2>&1 | tee $OUT/fwd_tile_shapes.log | tail -n 10
PADDLE_FLASHMASK_BWD_PERSISTENT=1 PFM_GPU_REPORT=$OUT/skip_persistent.json timeout -s INT -k 10 90 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_skipping.py 2>&1 | tail -n 4'"
$(pack_logs 7)"
}

# two benchmark runs side by side, one per GPU of an x2 machine, then their rows: $1 timeout,
# $2 bench_attention.py arguments, $3 / $4 tags of GPU 0 (defaults) and GPU 1 (env assignments $5)
bench_ab() {
  printf '%s\n' \
    "( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 $1 python3 bench/bench_attention.py $2 --tag $3 > \$OUT/bench_$3.log 2>&1 ) &" \
    "( export CUDA_VISIBLE_DEVICES=1 $5; timeout -s INT -k 10 $1 python3 bench/bench_attention.py $2 --tag $4 > \$OUT/bench_$4.log 2>&1 ) &" \
    "wait" \
    "grep -h -E \"paddle_flashmask|fa4 \" \$OUT/bench_$3.log \$OUT/bench_$4.log | grep -v \"^{\""
}

# an A/B on the same GPU, twice: GPU 0 runs A then B, GPU 1 B then A (the two GPUs of one x2
# machine differ by up to ~5 %, so each GPU compares only its own runs): $1 timeout per run,
# $2 bench_attention.py arguments, $3 / $4 tags of A (defaults) and B (env assignments $5)
bench_ab_same_gpu() {
  printf '%s\n' \
    "ab() { timeout -s INT -k 10 $1 python3 bench/bench_attention.py $2 --tag \$1 > \$OUT/bench_\$1.log 2>&1; }" \
    "( export CUDA_VISIBLE_DEVICES=0; ab g0_$3; $5 ab g0_$4 ) &" \
    "( export CUDA_VISIBLE_DEVICES=1; $5 ab g1_$4; ab g1_$3 ) &" \
    "wait" \
    "grep -H -E \"paddle_flashmask \" \$OUT/bench_g*_$3.log \$OUT/bench_g*_$4.log | sed \"s/.*bench_//\""
}

# the logs and A/B plots as one file (at most 8 files come back per call), then the listing:
# $1 = call number
# `bwd_oracle LIMIT_S JSON LOG [PREFIX]`: the backward oracle with determinism (tests/gpu/bwd_check.py),
# its last line printed; the call stops on its failure. PREFIX (e.g. 'env $R ') goes before it
bwd_oracle() {
  printf '%s' "${4:-}timeout -s INT -k 10 $1 python3 tests/gpu/bwd_check.py --json-name $2 > \$OUT/$3 2>&1; rc=\$?; tail -n 1 \$OUT/$3 | cut -c1-300; [ \$rc = 0 ] || exit \$rc"
}

# sampling_nc PROFILE_S SOURCE_S DETAILS_S TARGET_ARGS: a shell function `nc REGEX SYSTEM TAG` that
# takes Nsight Compute's full set with per-instruction warp-state samples of one kernel of
# bench/ncu_target.py and keeps the per-SASS-instruction CSV (gzipped) and the details page
# (calls 152, 154; read with scripts/ncu_stall_sites.py)
sampling_nc() {
  printf '%s' "nc() { timeout $1 ncu --clock-control none -k regex:\$1 --launch-skip 1 --launch-count 1 --set full --import-source yes -o \$OUT/rep_\$3 python3 bench/ncu_target.py --system \$2 $4 > \$OUT/ncu_\$3.log 2>&1; tail -n 2 \$OUT/ncu_\$3.log; timeout $2 ncu -i \$OUT/rep_\$3.ncu-rep --page source --csv --print-source sass > \$OUT/sass_\$3.csv 2> \$OUT/sass_\$3.log; timeout $3 ncu -i \$OUT/rep_\$3.ncu-rep --page details > \$OUT/details_\$3.log 2>&1; gzip -f \$OUT/sass_\$3.csv; rm -f \$OUT/rep_\$3.ncu-rep; }"
}

pack_logs() {  # pack_logs N [GLOB]: logs, plots (and GLOB's files) into one tarball: <= 8 files return
  local extra=${2:+ $2}
  printf '%s' "cd \$OUT && tar czf /tmp/logs$1.tgz \$(ls *.log *.png$extra 2>/dev/null) && rm -f *.log *.png$extra && mv /tmp/logs$1.tgz . ; ls -la \$OUT"
}

# det_oracle ENV TIMEOUT_S JSON LOG [EXTRA_ARGS]: the backward oracle and the 10-rerun bit identity
# on the cases in $C with env ENV (stops the call on failure), as calls 207, 223 and 224 run it
det_oracle() {
  printf '%s' "env $1 timeout -s INT -k 10 $2 python3 tests/gpu/bwd_check.py --only \$C --det-cases \$C${5:+ $5} --json-name $3 > \$OUT/$4 2>&1; rc=\$?; tail -n 1 \$OUT/$4 | cut -c1-200; grep -c \"\\\"bit_identical\\\": true\" \$OUT/$4; [ \$rc = 0 ] || exit \$rc"
}
# the D = 64 cases of those checks (calls 207, 223)
D64_DET_CASES=d64_causal_doc_gqa_partial,d64_doc_C2_sq_gt_sk,d64_empty_rows_C4_sq_lt_sk,d64_full
# session 37's short warm calls (228-231): the prelude they ran with, and their A/B command $A
DET80E_PRELUDE='export PYTHONUNBUFFERED=1 PADDLE_FLASHMASK_BWD_DET_DQ_EARLY=1; set -o pipefail
source .devtools/cutedsl-env.sh || exit $?
K=PADDLE_FLASHMASK_BWD'
DET80E_AB='A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --head-dim 128 --variant base: --variant dete:deterministic=1 --variant dete80:deterministic=1,${K}_TILE_M=80"'

# the skipping test as a shell function `skip TAG` (JSON + log under $OUT), for A/B calls
SKIP_FN='skip() { PFM_GPU_REPORT=$OUT/skip_$1.json timeout -s INT -k 10 60 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_skipping.py -k causal_document > $OUT/skip_$1.log 2>&1; }'

# `bench VALUE TAG`: the 8K/32K benchmark of our kernels with env $1=VALUE; $1 = the switch
bench_fn() {
  printf '%s' "bench() { $1=\$1 timeout -s INT -k 10 70 python3 bench/bench_attention.py --cases 0,1 --masks full,causal,causal_document,document --systems paddle_flashmask --tag \$2 > \$OUT/bench_\$2.log 2>&1; }"
}

# GPU 1 runs the skipping test four times with switch $1 on/off in the order $2 (tags on_*/off_*)
skip_loop() {
  printf '%s' "( export CUDA_VISIBLE_DEVICES=1; for r in $2; do $1=\$([ \${r%_?} = on ] && echo 1 || echo 0) skip \$r; done ) &"
}

call10() {
  emit "call 10 (session 5, right after call 5a on nvidia-h200-x2) - stage part b; CP (native causal local phase, locality planner variants); skipping test with the caching workspace pool (GPU 0) || D=256 one-stage backward vs oracle (GPU 1); the 8K/32K causal A/B (session 3 forward config) and the D=256 one-stage A/B next to FA4 [<= 9.5 min]" \
    nvidia-h200-x2 570 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 170 python3 -m torch.distributed.run --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 1,0 --chunk-sizes 2048,1024 --comm-sms 0,4 --balance-tolerances 0.02,0.05 > $OUT/cp_scaling.log 2>&1; tail -n 12 $OUT/cp_scaling.log
( export CUDA_VISIBLE_DEVICES=0 PFM_GPU_REPORT=$OUT/skip.json; timeout -s INT -k 10 110 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_skipping.py > $OUT/skip.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 80 python3 tests/gpu/bwd_check.py --d256-stages 1 --only d256_causal_window_sink,d256_full --json-name bwd_d256_one_stage.json > $OUT/d256.log 2>&1 ) &
wait; tail -n 3 $OUT/skip.log $OUT/d256.log'"
$(pack_logs 10)"
}

call11() {
  emit "call 11 (session 5, right after call 10, same warm machine) - the 8K/32K causal A/B (session 3 forward config vs default) and the D=256 one-stage backward A/B, next to FA4, one GPU each [<= 5 min]" \
    nvidia-h200-x2 500 '[".devtools"]' \
"$PRELUDE
$PEERS
$(bench_ab 100 "--cases 0,1 --masks full,causal,causal_document --systems paddle_flashmask,fa4" default s3config \
    "PADDLE_FLASHMASK_FWD_D128_TILE_N=112 PADDLE_FLASHMASK_FWD_PARTIAL_OVERLAP=0")
$(bench_ab 70 "--cases 4 --systems paddle_flashmask,fa4" d256_two_stages d256_one_stage \
    "PADDLE_FLASHMASK_BWD_D256_STAGES=1")
$(pack_logs 11)"
}

call12() {
  emit "call 12 (session 5, right after call 5a on nvidia-h200-x2) - stage part b; CP with remote phases on their visible rows only (per-rank kernel profile); skipping test with do_bench-style timing + GPU timeline, default (GPU 0) vs key-major backward claims (GPU 1, then its oracle check); D=256 benchmark rows next to FA4 (GPU 0); precompile the GPU suite (GPU 1) [<= 9.5 min]" \
    nvidia-h200-x2 600 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 120 python3 -m torch.distributed.run --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 0,1 --chunk-sizes 1024 --comm-sms 4 --balance-tolerances 0.02,0.05 --profile > $OUT/cp_scaling.log 2>&1; tail -n 5 $OUT/cp_scaling.log
( export CUDA_VISIBLE_DEVICES=0; PFM_GPU_REPORT=$OUT/skip.json timeout -s INT -k 10 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_skipping.py > $OUT/skip.log 2>&1; timeout -s INT -k 10 150 python3 bench/bench_attention.py --cases 4 --systems paddle_flashmask,fa4 --tag cases4 > $OUT/bench_cases4.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1 PADDLE_FLASHMASK_BWD_KEY_MAJOR=1; PFM_GPU_REPORT=$OUT/skip_key_major.json timeout -s INT -k 10 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_skipping.py > $OUT/skip_km.log 2>&1; timeout -s INT -k 10 70 python3 tests/gpu/bwd_check.py --quick --json-name bwd_key_major.json > $OUT/bwd_km.log 2>&1; timeout -s INT -k 10 110 python3 tests/gpu/precompile.py --jobs 14 > $OUT/precompile.log 2>&1 ) &
wait; tail -n 2 $OUT/skip.log $OUT/skip_km.log $OUT/bwd_km.log $OUT/precompile.log; grep -h -E "paddle_flashmask|fa4 " $OUT/bench_cases4.log | grep -v "^{"'"
$(pack_logs 12)"
}

call13() {
  emit "call 13 (session 5, right after call 12, same warm machine) - GPU suite at the session-5 defaults (GPU 1) || backward check with timings and determinism (GPU 0) [<= 8 min]" \
    nvidia-h200-x2 480 '[".devtools"]' \
"$PRELUDE"'
( export CUDA_VISIBLE_DEVICES=1; PT=""; python3 -c "import pytest_timeout" 2>/dev/null && PT="--timeout 240"; timeout -s INT -k 20 420 python3 -m pytest -v -rfE --durations=15 -p no:cacheprovider $PT tests/gpu > $OUT/pytest_gpu.log 2>&1; echo "pytest exit $?" >> $OUT/pytest_gpu.log ) &
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 250 python3 tests/gpu/bwd_check.py --bench > $OUT/bwd_check.log 2>&1 ) &
wait; tail -n 25 $OUT/pytest_gpu.log; tail -n 3 $OUT/bwd_check.log'"
$(pack_logs 13)"
}

call14() {
  emit "call 14 (session 5, right after call 5a on nvidia-h200-x2) - stage part b; CP with row sets as slices (per-rank profile); Nsight Compute of the 32K causal-document (GPU 0) and full (GPU 1) backward kernels [<= 7 min]" \
    nvidia-h200-x2 420 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 120 python3 -m torch.distributed.run --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 0,1 --chunk-sizes 1024 --comm-sms 4 --balance-tolerances 0.02 --profile > $OUT/cp_scaling.log 2>&1; tail -n 3 $OUT/cp_scaling.log
NCU="--clock-control none -k regex:bwd_sm90 --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats"
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 200 ncu $NCU python3 bench/ncu_target.py --mask causal_document --batch 1 --seqlen 32768 > $OUT/ncu_bwd_causal_document_32k.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 200 ncu $NCU python3 bench/ncu_target.py --mask full --batch 1 --seqlen 32768 > $OUT/ncu_bwd_full_32k.log 2>&1 ) &
wait; grep -h -E "Duration|Compute \(SM\) Throughput|Eligible Warps|Issued Warp|No Eligible" $OUT/ncu_*.log'"
$(pack_logs 14)"
}

call15() {
  emit "call 15 (session 5, right after call 5a on nvidia-h200-x2) - stage part b; CP with SMs left to the reduce-scatters in the backward too (0/4/8 SMs, equal/unequal chunks, per-rank profile) [<= 4 min]" \
    nvidia-h200-x2 240 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 180 python3 -m torch.distributed.run --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 1,0 --chunk-sizes 1024 --comm-sms 0,4,8 --balance-tolerances 0.02 --profile > $OUT/cp_scaling.log 2>&1; tail -n 3 $OUT/cp_scaling.log'"
$(pack_logs 15)"
}

call16() {
  emit "call 16 (session 5, right after call 5a on nvidia-h200-x2) - stage part b; CP (per-rank compute idle gaps) with NCCL's default protocol choice and with NCCL_PROTO=Simple; then the e2e training step (eager) on GPU 0 [<= 9.5 min]" \
    nvidia-h200-x2 600 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 80 python3 -m torch.distributed.run --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 0,1 --chunk-sizes 1024 --balance-tolerances 0.02 --profile > $OUT/cp_scaling.log 2>&1; tail -n 2 $OUT/cp_scaling.log
NCCL_PROTO=Simple NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 80 python3 -m torch.distributed.run --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 0,1 --chunk-sizes 1024 --balance-tolerances 0.02 --profile --out $OUT/cp_scaling_simple.json > $OUT/cp_scaling_simple.log 2>&1; tail -n 2 $OUT/cp_scaling_simple.log
CUDA_VISIBLE_DEVICES=0 timeout -s INT -k 20 250 python3 bench/e2e_step.py --impl-timeout 75 > $OUT/e2e.log 2>&1; tail -n 12 $OUT/e2e.log'"
$(pack_logs 16)"
}

# the backward check with timings side by side, one per GPU of an x2 machine: $1 timeout, $2 / $4
# tags of GPU 0 / GPU 1, $3 / $5 their env assignments (may be empty)
bwd_check_ab() {
  printf '%s\n' \
    "( export CUDA_VISIBLE_DEVICES=0 $3; timeout -s INT -k 10 $1 python3 tests/gpu/bwd_check.py --bench --json-name bwd_$2.json > \$OUT/bwd_$2.log 2>&1 ) &" \
    "( export CUDA_VISIBLE_DEVICES=1 $5; timeout -s INT -k 10 $1 python3 tests/gpu/bwd_check.py --bench --json-name bwd_$4.json > \$OUT/bwd_$4.log 2>&1 ) &" \
    "wait; tail -n 2 \$OUT/bwd_$2.log \$OUT/bwd_$4.log"
}

call17() {
  emit "call 17 (session 5, right after call 5a on nvidia-h200-x2) - stage part b; deterministic backward with two dQ chains (GPU 1) vs one (GPU 0): every case vs the oracle, determinism, det/default timings [<= 5 min]" \
    nvidia-h200-x2 300 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
$(bwd_check_ab 240 det_chains1 "" det_chains2 PADDLE_FLASHMASK_BWD_DET_CHAINS=2)
$(pack_logs 17)"
}

call18() {
  emit "call 18 (session 5, right after call 5a on nvidia-h200-x2) - stage part b; deterministic backward with the lazy release, one chain (GPU 0) and two chains (GPU 1): every case vs the oracle, determinism, det/default timings [<= 5 min]" \
    nvidia-h200-x2 300 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
$(bwd_check_ab 240 det_lazy PADDLE_FLASHMASK_BWD_DET_LAZY_RELEASE=1 det_lazy_chains2 "PADDLE_FLASHMASK_BWD_DET_LAZY_RELEASE=1 PADDLE_FLASHMASK_BWD_DET_CHAINS=2")
$(pack_logs 18)"
}

call19() {
  emit "call 19 (session 5, right after call 5a on nvidia-h200-x2) - stage part b; Nsight Compute of the deterministic (GPU 0) and default (GPU 1) backward, full attention B=2 S=8K: where the deterministic one waits [<= 4 min]" \
    nvidia-h200-x2 240 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
NCU="--clock-control none -k regex:bwd_sm90 --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --metrics regex:smsp__warp_issue_stalled_.*_per_warp_active.pct"
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 180 ncu $NCU python3 bench/ncu_target.py --mask full --batch 2 --deterministic > $OUT/ncu_bwd_full_det.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 180 ncu $NCU python3 bench/ncu_target.py --mask full --batch 2 > $OUT/ncu_bwd_full_default.log 2>&1 ) &
wait; grep -h -E "Duration|Compute \(SM\) Throughput|Eligible Warps|Issued Warp|Stall|stall" $OUT/ncu_*.log | head -40'"
$(pack_logs 19)"
}

call20() {
  emit "call 20 (session 5, right after call 5a on nvidia-h200-x2) - stage part b; CP with the planner's remote-pair penalty 0 / 0.35 (equal and unequal chunk counts), per-rank profile [<= 3 min]" \
    nvidia-h200-x2 200 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 150 python3 -m torch.distributed.run --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 1,0 --chunk-sizes 1024 --remote-penalties 0,0.35 --profile > $OUT/cp_scaling.log 2>&1; tail -n 2 $OUT/cp_scaling.log'"
$(pack_logs 20)"
}

call21() {
  emit "call 21 (session 6, right after call 5a on nvidia-h200-x2) - stage part b; dQ converted in the main backward kernel (BwdConfig.fused_dq): a smoke case first, then every case vs the oracle + determinism with it (GPU 0) || the skipping test with it, then without (GPU 1); then the backward bench A/B off / on, one GPU each [<= 9 min]" \
    nvidia-h200-x2 560 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
timeout -s INT -k 5 90 python3 tests/gpu/bwd_check.py --fused-dq --only causal_doc_C1 --json-name bwd_fused_smoke.json > $OUT/bwd_fused_smoke.log 2>&1; rc=$?; tail -n 2 $OUT/bwd_fused_smoke.log; [ $rc = 0 ] || exit 7
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 240 python3 tests/gpu/bwd_check.py --fused-dq --bench --json-name bwd_fused_dq.json > $OUT/bwd_fused.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; for f in 1 0; do PADDLE_FLASHMASK_BWD_FUSED_DQ=$f PFM_GPU_REPORT=$OUT/skip_fused$f.json timeout -s INT -k 10 110 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_skipping.py -k causal_document > $OUT/skip_fused$f.log 2>&1; done ) &
wait; tail -n 2 $OUT/bwd_fused.log $OUT/skip_fused1.log $OUT/skip_fused0.log'"
$(bench_ab 110 "--cases 0,1 --masks full,causal,causal_document,document --systems paddle_flashmask" fused0 fused1 PADDLE_FLASHMASK_BWD_FUSED_DQ=1)
$(pack_logs 21)"
}

call22() {
  emit "call 22 (session 6, right after call 5a on nvidia-h200-x2) - stage part b; fused dQ with its count-down lag (BwdConfig.dq_count_lag): every case vs the oracle + determinism + bench at lag 2, then the skipping test at lag 3 (GPU 0) || the skipping test without fused dQ, at lag 1, at lag 2, without again (GPU 1, one after the other) [<= 6 min]" \
    nvidia-h200-x2 360 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
$SKIP_FN"'
( export CUDA_VISIBLE_DEVICES=0 PADDLE_FLASHMASK_BWD_DQ_COUNT_LAG=2; timeout -s INT -k 10 200 python3 tests/gpu/bwd_check.py --fused-dq --bench --json-name bwd_fused_lag2.json > $OUT/bwd_fused_lag2.log 2>&1; PADDLE_FLASHMASK_BWD_FUSED_DQ=1 PADDLE_FLASHMASK_BWD_DQ_COUNT_LAG=3 skip lag3 ) &
( export CUDA_VISIBLE_DEVICES=1; PADDLE_FLASHMASK_BWD_FUSED_DQ=0 skip off_a; PADDLE_FLASHMASK_BWD_FUSED_DQ=1 PADDLE_FLASHMASK_BWD_DQ_COUNT_LAG=1 skip lag1; PADDLE_FLASHMASK_BWD_FUSED_DQ=1 PADDLE_FLASHMASK_BWD_DQ_COUNT_LAG=2 skip lag2; PADDLE_FLASHMASK_BWD_FUSED_DQ=0 skip off_b ) &
wait; tail -n 1 $OUT/bwd_fused_lag2.log; timeout 30 python3 scripts/skip_summary.py $OUT/skip_*.json'"
$(pack_logs 22)"
}

call23() {
  emit "call 23 (session 6, right after call 5a on nvidia-h200-x2) - stage part b; fused dQ with the converter queue and double-buffered copies, relaxed count-down: a smoke case, then every case vs the oracle + determinism + bench (GPU 0) || skipping test off / on / off / on (GPU 1); then the benchmark off then on (GPU 0) and on then off (GPU 1) [<= 8 min]" \
    nvidia-h200-x2 540 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
$SKIP_FN
$(bench_fn PADDLE_FLASHMASK_BWD_FUSED_DQ)"'
timeout -s INT -k 5 90 python3 tests/gpu/bwd_check.py --fused-dq --only causal_doc_C1 --json-name bwd_fused_smoke.json > $OUT/smoke.log 2>&1 || { tail -n 3 $OUT/smoke.log; exit 7; }
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 200 python3 tests/gpu/bwd_check.py --fused-dq --bench --json-name bwd_fused_queue.json > $OUT/bwd_fused.log 2>&1 ) &
'"$(skip_loop PADDLE_FLASHMASK_BWD_FUSED_DQ 'off_a on_a off_b on_b')"'
wait; tail -n 1 $OUT/bwd_fused.log; timeout 30 python3 scripts/skip_summary.py $OUT/skip_*.json
( export CUDA_VISIBLE_DEVICES=0; bench 0 g0_off; bench 1 g0_on ) &
( export CUDA_VISIBLE_DEVICES=1; bench 1 g1_on; bench 0 g1_off ) &
wait; grep -H -E "paddle_flashmask " $OUT/bench_*.log'"
$(pack_logs 23)"
}

call24() {
  emit "call 24 (session 6, right after call 5a on nvidia-h200-x2) - stage part b; CP with NCCL held to 4 / 2 CTAs (NCCL_MAX_CTAS) so that the SMs the persistent kernels leave free (--comm-sms) are enough for the collectives to overlap them [<= 6 min]" \
    nvidia-h200-x2 360 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
cprun() { NCCL_MAX_CTAS=$1 NCCL_MIN_CTAS=1 timeout -s INT -k 20 160 python3 -m torch.distributed.run --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 0 --chunk-sizes 1024 --comm-sms $2 --profile --out $OUT/cp_ctas$1.json > $OUT/cp_ctas$1.log 2>&1; tail -n 4 $OUT/cp_ctas$1.log; }
cprun 4 0,4,8; cprun 2 2,4'"
$(pack_logs 24)"
}

call25() {
  emit "call 25 (session 6, right after call 5a on nvidia-h200-x2) - stage part b; vector dK/dV stores (BwdConfig.vector_dkv): every case vs the oracle + determinism + bench with them (GPU 0) || skipping test on / off / on / off (GPU 1); then the benchmark on then off (GPU 0) and off then on (GPU 1) [<= 8 min]" \
    nvidia-h200-x2 540 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
$SKIP_FN
$(bench_fn PADDLE_FLASHMASK_BWD_VECTOR_DKV)"'
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 200 python3 tests/gpu/bwd_check.py --bench --json-name bwd_vector_dkv.json > $OUT/bwd_vector.log 2>&1 ) &
'"$(skip_loop PADDLE_FLASHMASK_BWD_VECTOR_DKV 'on_a off_a on_b off_b')"'
wait; tail -n 1 $OUT/bwd_vector.log; timeout 30 python3 scripts/skip_summary.py $OUT/skip_*.json
( export CUDA_VISIBLE_DEVICES=0; bench 1 g0_on; bench 0 g0_off ) &
( export CUDA_VISIBLE_DEVICES=1; bench 0 g1_off; bench 1 g1_on ) &
wait; grep -H -E "paddle_flashmask " $OUT/bench_*.log | sed "s/.*bench_//"'"
$(pack_logs 25)"
}

call26() {
  emit "call 26 (for session 7, right after call 5a on nvidia-h200-x2) - stage part b; the deterministic backward's options, now applied by bwd_check (it builds every variant from backward_config): default with late_loads (its oracle check: the non-deterministic multi-column cases) (GPU 0) || relaxed semaphores (GPU 1), then two dQ chains (GPU 0) || lazy release (GPU 1), each every case vs the oracle + bit-exactness + det/default timings; then the multi-column late_loads A/B in the benchmark (each GPU runs both) [<= 9 min]" \
    nvidia-h200-x2 560 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
$(bwd_check_ab 170 det_default_late_loads PADDLE_FLASHMASK_BWD_LATE_LOADS=1 det_relaxed PADDLE_FLASHMASK_BWD_DET_SYNC=relaxed)
$(bwd_check_ab 170 det_chains2 PADDLE_FLASHMASK_BWD_DET_CHAINS=2 det_lazy PADDLE_FLASHMASK_BWD_DET_LAZY_RELEASE=1)
$(bench_ab_same_gpu 60 "--cases 0 --masks sliding_window,shared_question,prefix_lm_causal,global_sliding_window --systems paddle_flashmask" late_loads0 late_loads1 PADDLE_FLASHMASK_BWD_LATE_LOADS=1)
$(pack_logs 26)"
}

call27() {
  emit "call 27 (for session 7, right after call 5a on nvidia-h200-x2) - stage part b; CP with retiring CTAs while collectives are in flight (comm_retire), NCCL streams at normal / high priority, next to the default in the same runs, with the per-rank profile of the best [<= 6 min]" \
    nvidia-h200-x2 360 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
cprun() { timeout -s INT -k 20 150 python3 -m torch.distributed.run --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 0 --chunk-sizes 1024 --comm-sms 0,retire --profile $2 --out $OUT/cp_$1.json > $OUT/cp_$1.log 2>&1; tail -n 4 $OUT/cp_$1.log; }
cprun retire ""; cprun retire_hiprio --nccl-high-priority'"
$(pack_logs 27)"
}

call28() {
  emit "call 28 (for session 8, right after call 5a on nvidia-h200-x2) - stage part b; the final kernels: precompile + the whole GPU suite (GPU 0) || forward and backward oracle checks with timings (GPU 1); then the skipping test three more times (GPU 0) [<= 7 min]" \
    nvidia-h200-x2 420 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
$SKIP_FN"'
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 90 python3 tests/gpu/precompile.py --jobs 12 > $OUT/precompile.log 2>&1; PFM_GPU_REPORT=$OUT/gpu_report.json timeout -s INT -k 20 150 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu > $OUT/pytest_gpu.log 2>&1; for r in a b c; do skip final_$r; done ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 120 python3 tests/gpu/bwd_check.py --bench --json-name bwd_check.json > $OUT/bwd.log 2>&1; timeout -s INT -k 10 150 python3 tests/gpu/fwd_check.py --json-name fwd_check.json > $OUT/fwd.log 2>&1 ) &
wait; tail -n 3 $OUT/pytest_gpu.log; tail -n 1 $OUT/bwd.log $OUT/fwd.log; timeout 30 python3 scripts/skip_summary.py $OUT/gpu_report.json $OUT/skip_*.json'"
$(pack_logs 28)"
}

call29() {
  emit "call 29 (for session 8, on the still-warm machine of call 28, FA4 wheels carried) - the side-by-side benchmark at the final kernels: 8K with every peer (GPU 0) || 32K with FA4 native/varlen and mask_mod (GPU 1) [<= 7.5 min]" \
    nvidia-h200-x2 450 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 320 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s8_cases0 > $OUT/bench0.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 220 python3 bench/bench_attention.py --cases 1 --systems '"$BENCH_SYSTEMS"' --tag s8_cases1 > $OUT/bench1.log 2>&1 ) &
wait; grep -h -E "^\S+ +(paddle_flashmask|fa4|fa4_mask_mod|flex_attention|sdpa_cudnn) " $OUT/bench*.log | head -80'"
$(pack_logs 29)"
}

call29b() {
  emit "call 29b (for session 8, optional, on a warm machine with FA4 installed by call 29) - issue 5's extra rows: GQA 32/8 and D=64, then the host time per call with cProfile (GPU 0; CP's gaps are host-bound) || D=256 (GPU 1), paddle_flashmask vs FA4 [<= 7 min]" \
    nvidia-h200-x2 420 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 170 python3 bench/bench_attention.py --cases 2,3 --systems paddle_flashmask,fa4 --tag s8_cases2_3 > $OUT/bench23.log 2>&1; timeout -s INT -k 10 90 python3 bench/profile_call.py --masks full,causal_document --cprofile > $OUT/profile_call.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 170 python3 bench/bench_attention.py --cases 4 --systems paddle_flashmask,fa4 --tag s8_cases4 > $OUT/bench4.log 2>&1 ) &
wait; grep -h -E "^\S+ +(paddle_flashmask|fa4) " $OUT/bench*.log | head -60'"
$(pack_logs 29b)"
}

call30() {
  emit "call 30 (for session 8, on the still-warm machine of call 28) - the two prepared dQ options: one bulk op per staged dQ tile (dq_swizzle) and no accumulator zeroing (dq_first_store): every backward case vs the oracle + determinism with swizzle, both, first-store alone (GPU 0) || the skipping test default / swizzle / swizzle+first-store (GPU 1); then the benchmark A/B on both GPUs, D=128 8K/32K and D=64 8K (the weakest shape; docs/kernels_bwd.md: the writer's per-lane loop is ~15 % of its instructions) [<= 10 min]" \
    nvidia-h200-x2 590 '[".devtools"]' \
"$PRELUDE
$SKIP_FN"'
bc() { timeout -s INT -k 10 110 python3 tests/gpu/bwd_check.py --bench --json-name bwd_$1.json > $OUT/bwd_$1.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0 PADDLE_FLASHMASK_BWD_DQ_SWIZZLE=1; bc swizzle; PADDLE_FLASHMASK_BWD_FIRST_STORE=1 bc swizzle_first; PADDLE_FLASHMASK_BWD_DQ_SWIZZLE=0 PADDLE_FLASHMASK_BWD_FIRST_STORE=1 bc first ) &
( export CUDA_VISIBLE_DEVICES=1; skip base_a; PADDLE_FLASHMASK_BWD_DQ_SWIZZLE=1 skip swz_a; PADDLE_FLASHMASK_BWD_DQ_SWIZZLE=1 PADDLE_FLASHMASK_BWD_FIRST_STORE=1 skip swzfs_a ) &
wait; tail -n 1 $OUT/bwd_*.log; timeout 30 python3 scripts/skip_summary.py $OUT/skip_*.json
ab() { timeout -s INT -k 10 90 python3 bench/bench_attention.py --cases 0,1,3 --masks full,causal,causal_document,document --systems paddle_flashmask --tag $1 > $OUT/bench_$1.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; ab g0_base; PADDLE_FLASHMASK_BWD_DQ_SWIZZLE=1 PADDLE_FLASHMASK_BWD_FIRST_STORE=1 ab g0_swzfs ) &
( export CUDA_VISIBLE_DEVICES=1; PADDLE_FLASHMASK_BWD_DQ_SWIZZLE=1 PADDLE_FLASHMASK_BWD_FIRST_STORE=1 ab g1_swzfs; ab g1_base ) &
wait; grep -H -E "paddle_flashmask " $OUT/bench_g*.log | sed "s/.*bench_//"'"
$(pack_logs 30)"
}

call31() {
  emit "call 31 (for session 8, on a warm nvidia-h200-x2) - CP with K and V in one all-gather and dK and dV in one reduce-scatter (comm_fuse_kv), next to the default twice, with the second-step profile (host launch lag per gap, stream timeline) [<= 3.5 min]" \
    nvidia-h200-x2 210 '[".devtools"]' \
"$PRELUDE"'
NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 170 python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 0 --chunk-sizes 1024 --fuse-kv 0,1,0,1 --iters 20 --profile --out $OUT/cp_fuse_kv.json > $OUT/cp_fuse_kv.log 2>&1; tail -n 6 $OUT/cp_fuse_kv.log'"
$(pack_logs 31)"
}

call35() {
  emit "call 35 (for session 10, right after call 5a on nvidia-h200-x2) - stage part b; the prepared options of sessions 8-9, never GPU-run: claims by work class (PADDLE_FLASHMASK_{BWD,FWD}_CLAIM_PASSES=3; the schedule model puts the current lists' tails at 1.03-1.79x on the zoo's masks), FA4's backward iteration order (PADDLE_FLASHMASK_BWD_PDS_STAGES=2, PADDLE_FLASHMASK_BWD_DQ_EARLY=1: one rendezvous fewer per query tile, the dQ hand-off under the dK GEMM) and diagonal-only partial tiles (PADDLE_FLASHMASK_FWD_DIAGONAL_PARTIALS=1: 172 instead of 414 mask instructions per partial tile): backward oracle + determinism with claims and the order (GPU 0) || forward oracle with both forward options (GPU 1), then the benchmark (8K, 32K, every mask) on both GPUs: base / claims / claims + order (GPU 0), all / diagonal partials / base (GPU 1) [<= 9.5 min]" \
    nvidia-h200-x2 590 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
CLAIM="PADDLE_FLASHMASK_BWD_CLAIM_PASSES=3 PADDLE_FLASHMASK_FWD_CLAIM_PASSES=3"; DIAG="PADDLE_FLASHMASK_FWD_DIAGONAL_PARTIALS=1"; ORDER="PADDLE_FLASHMASK_BWD_PDS_STAGES=2 PADDLE_FLASHMASK_BWD_DQ_EARLY=1"
( export CUDA_VISIBLE_DEVICES=0; env $ORDER PADDLE_FLASHMASK_BWD_CLAIM_PASSES=3 timeout -s INT -k 10 120 python3 tests/gpu/bwd_check.py --bench --json-name bwd_claim3_order.json > $OUT/bwd_claim3_order.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1 PADDLE_FLASHMASK_FWD_CLAIM_PASSES=3 PADDLE_FLASHMASK_FWD_DIAGONAL_PARTIALS=1; timeout -s INT -k 10 120 python3 tests/gpu/fwd_check.py --json-name fwd_claim3_diag.json > $OUT/fwd_claim3_diag.log 2>&1 ) &
wait; tail -n 1 $OUT/bwd_claim3_order.log $OUT/fwd_claim3_diag.log
ab() { env $2 timeout -s INT -k 10 120 python3 bench/bench_attention.py --cases 0,1 --systems paddle_flashmask --tag $1 > $OUT/bench_$1.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; ab g0_base ""; ab g0_claim "$CLAIM"; ab g0_claim_order "$CLAIM $ORDER" ) &
( export CUDA_VISIBLE_DEVICES=1; ab g1_all "$CLAIM $ORDER $DIAG"; ab g1_diag "$DIAG"; ab g1_base "" ) &
wait; grep -H -E "paddle_flashmask " $OUT/bench_g*.log | sed "s/.*bench_//"'"
$(pack_logs 35 '*_claim3*.json')"
}

call36() {
  emit "call 36 (for session 10, on the warm nvidia-h200-x2 right after call 35) - two forward tile shapes of FA4, never GPU-run: d256 with 128x80 key tiles (PADDLE_FLASHMASK_FWD_D256_TILE_N=80; 6.8 instead of 7.9 loop instructions per key on full tiles) and d64 with 192-row query tiles on three consumer warpgroups (PADDLE_FLASHMASK_FWD_D64_TILE_M=192): forward oracle on the d256 and d64 cases (GPU 0) || the D=256 and D=64 benchmark rows next to FA4, default tile then the new one (GPU 1) [<= 5.5 min]" \
    nvidia-h200-x2 330 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
( export CUDA_VISIBLE_DEVICES=0 PADDLE_FLASHMASK_FWD_D256_TILE_N=80 PADDLE_FLASHMASK_FWD_D64_TILE_M=192; timeout -s INT -k 10 120 python3 tests/gpu/fwd_check.py --only d256_causal_window_sink,d256_full,fp16_d64_causal_doc_sink,d64_full_sink --json-name fwd_tiles_new.json > $OUT/fwd_tiles_new.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; for v in "" "PADDLE_FLASHMASK_FWD_D256_TILE_N=80 PADDLE_FLASHMASK_FWD_D64_TILE_M=192"; do t=${v:+new}; env $v timeout -s INT -k 10 130 python3 bench/bench_attention.py --cases 3,4 --systems paddle_flashmask,fa4 --tag tiles_${t:-base} > $OUT/bench_tiles_${t:-base}.log 2>&1; done ) &
wait; tail -n 2 $OUT/fwd_tiles_new.log; grep -h -E "paddle_flashmask |fa4 " $OUT/bench_tiles_*.log'"
$(pack_logs 36 '*_new*.json')"
}

call37() {
  emit "call 37 (for session 10, on the warm nvidia-h200-x2 after call 36) - the GPU suite with every prepared option on through the env (claims by work class both ways, diagonal-only partial tiles, FA4's backward order, d256 128x80, d64 192x128), so that defaults can be flipped on this evidence: precompile + the whole GPU suite + the skipping test twice (GPU 0) || backward and forward oracle checks with timings (GPU 1) [<= 7 min]" \
    nvidia-h200-x2 420 '[".devtools"]' \
"$PRELUDE
$SKIP_FN"'
export PADDLE_FLASHMASK_BWD_CLAIM_PASSES=3 PADDLE_FLASHMASK_FWD_CLAIM_PASSES=3 PADDLE_FLASHMASK_FWD_DIAGONAL_PARTIALS=1 PADDLE_FLASHMASK_FWD_D256_TILE_N=80 PADDLE_FLASHMASK_FWD_D64_TILE_M=192 PADDLE_FLASHMASK_BWD_PDS_STAGES=2 PADDLE_FLASHMASK_BWD_DQ_EARLY=1
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 90 python3 tests/gpu/precompile.py --jobs 12 > $OUT/precompile.log 2>&1; PFM_GPU_REPORT=$OUT/gpu_report_opts.json timeout -s INT -k 20 150 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu > $OUT/pytest_gpu.log 2>&1; for r in a b; do skip opts_$r; done ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 120 python3 tests/gpu/bwd_check.py --bench --json-name bwd_check_opts.json > $OUT/bwd.log 2>&1; timeout -s INT -k 10 150 python3 tests/gpu/fwd_check.py --json-name fwd_check_opts.json > $OUT/fwd.log 2>&1 ) &
wait; tail -n 3 $OUT/pytest_gpu.log; tail -n 1 $OUT/bwd.log $OUT/fwd.log; timeout 30 python3 scripts/skip_summary.py $OUT/gpu_report_opts.json $OUT/skip_*.json'"
$(pack_logs 37 'skip_*.json')"
}

call38() {
  emit "call 38 (for session 10, right after call 5a on nvidia-h200-x2, FA4 wheels carried) - stage part b; the defaults flipped after calls 35-37 (d256 128x80, d64 192x128, FA4's backward order): precompile + the whole GPU suite + the skipping test twice (GPU 0) || the side-by-side benchmark, 8K with every peer, then GQA and D=64 next to FA4 (GPU 1) [<= 9.5 min]" \
    nvidia-h200-x2 600 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS
$SKIP_FN"'
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 90 python3 tests/gpu/precompile.py --jobs 12 > $OUT/precompile.log 2>&1; PFM_GPU_REPORT=$OUT/gpu_report.json timeout -s INT -k 20 150 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu > $OUT/pytest_gpu.log 2>&1; for r in a b; do skip s10_$r; done ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 200 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s10_cases0 > $OUT/bench_s10_cases0.log 2>&1; timeout -s INT -k 10 160 python3 bench/bench_attention.py --cases 2,3 --systems paddle_flashmask,fa4 --tag s10_cases2_3 > $OUT/bench_s10_cases2_3.log 2>&1 ) &
wait; tail -n 3 $OUT/pytest_gpu.log; timeout 30 python3 scripts/skip_summary.py $OUT/gpu_report.json $OUT/skip_*.json; grep -h -E "paddle_flashmask |fa4" $OUT/bench_s10_*.log'"
$(pack_logs 38)"
}

call39() {
  emit "call 39 (for session 10, on the warm nvidia-h200-x2 after call 38) - the rest of the side-by-side benchmark at the new defaults: 32K with FA4 native/varlen and mask_mod (GPU 0) || D=256 next to FA4, then the backward and forward oracle checks with timings (GPU 1) [<= 8 min]" \
    nvidia-h200-x2 560 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 300 python3 bench/bench_attention.py --cases 1 --systems '"$BENCH_SYSTEMS"' --tag s10_cases1 > $OUT/bench_s10_cases1.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 130 python3 bench/bench_attention.py --cases 4 --systems paddle_flashmask,fa4 --tag s10_cases4 > $OUT/bench_s10_cases4.log 2>&1; timeout -s INT -k 10 120 python3 tests/gpu/bwd_check.py --bench --json-name bwd_check.json > $OUT/bwd.log 2>&1; timeout -s INT -k 10 150 python3 tests/gpu/fwd_check.py --json-name fwd_check.json > $OUT/fwd.log 2>&1 ) &
wait; tail -n 1 $OUT/bwd.log $OUT/fwd.log; grep -h -E "paddle_flashmask |fa4" $OUT/bench_s10_*.log'"
$(pack_logs 39)"
}

call40() {
  emit "call 40 (for session 11, right after call 5a on nvidia-h200-x2) - stage part b; the GPU suite at session 10's final defaults (prefetch_stats at D=64 on) and the skipping test three times (GPU 0) || stage_stats, never GPU-run: backward oracle + determinism with it on, then the D=128, D=64 and D=256 rows with it off / on (GPU 1) [<= 9.5 min]" \
    nvidia-h200-x2 590 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
$SKIP_FN"'
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 90 python3 tests/gpu/precompile.py --jobs 12 > $OUT/precompile.log 2>&1; PFM_GPU_REPORT=$OUT/gpu_report.json timeout -s INT -k 20 150 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu > $OUT/pytest_gpu.log 2>&1; for r in a b c; do skip s11_$r; done ) &
( export CUDA_VISIBLE_DEVICES=1; PADDLE_FLASHMASK_BWD_STAGE_STATS=1 timeout -s INT -k 10 130 python3 tests/gpu/bwd_check.py --bench --json-name bwd_stage_stats.json > $OUT/bwd_stage_stats.log 2>&1; for c in 0 3 4; do for v in 0 1; do PADDLE_FLASHMASK_BWD_STAGE_STATS=$v timeout -s INT -k 10 60 python3 bench/bench_attention.py --cases $c --systems paddle_flashmask --masks full,causal_document,document --tag ss${v}_c$c > $OUT/bench_ss${v}_c$c.log 2>&1; done; done ) &
wait; tail -n 3 $OUT/pytest_gpu.log; tail -n 1 $OUT/bwd_stage_stats.log; timeout 30 python3 scripts/skip_summary.py $OUT/gpu_report.json $OUT/skip_*.json; grep -H -E "paddle_flashmask " $OUT/bench_ss*.log | sed "s/.*bench_//"'"
$(pack_logs 40)"
}

call41() {
  emit "call 41 (for session 11, on the warm nvidia-h200-x2 after call 40, FA4 wheels carried) - Nsight Compute of the D=128 full backward at HEAD (last profiled in session 7), ours (GPU 0) || FA4's (GPU 1), B=4 S=8K H=16: instruction counts and stall reasons, to rank the backward's next change [<= 4 min]" \
    nvidia-h200-x2 240 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
S="'"$NCU_SECTIONS"'"
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 5 110 ncu --clock-control none -k regex:bwd_sm90F --launch-skip 1 --launch-count 1 $S python3 bench/ncu_target.py --mask full > $OUT/ncu_bwd_full_d128_s11.txt 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 5 110 ncu --clock-control none -k regex:BackwardSm90 --launch-skip 1 --launch-count 1 $S python3 bench/ncu_target.py --system fa4 --mask full > $OUT/ncu_fa4_bwd_full_d128.txt 2>&1 ) &
wait; for f in $OUT/ncu_*.txt; do echo "== $f"; grep -E "Duration|Executed Ipc Active|Executed Instructions  |No Eligible" $f | head -6; done
ls -la $OUT'
}

call42() {
  emit "call 42 (for session 11, right after call 5a on nvidia-h200-x2, FA4 wheels carried) - stage part b; CP 64K causal documents on both GPUs, per-step latency and 8 steps back to back (throughput); then the end-to-end step (GPU 0) || the host profile of one call and the D=64 benchmark next to FA4 at the current defaults (GPU 1) [<= 9.5 min]" \
    nvidia-h200-x2 590 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 170 python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 0 --chunk-sizes 1024 --pipeline 8 --out $OUT/cp_scaling.json > $OUT/cp_scaling.log 2>&1; tail -n 22 $OUT/cp_scaling.log
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 20 260 python3 bench/e2e_step.py --impl-timeout 80 > $OUT/e2e.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 90 python3 bench/profile_call.py --masks full,causal_document --cprofile > $OUT/profile_call.log 2>&1; timeout -s INT -k 10 160 python3 bench/bench_attention.py --cases 3 --systems paddle_flashmask,fa4 --tag s11_cases3 > $OUT/bench_s11_cases3.log 2>&1 ) &
wait; tail -n 12 $OUT/e2e.log; grep -h -E "paddle_flashmask |fa4" $OUT/bench_s11_cases3.log'"
$(pack_logs 42)"
}

call43() {
  emit "call 43 (for session 11, right after call 5a on nvidia-h200-x2, FA4 wheels carried) - stage part b; where the D=128 full backward's warps wait: Nsight Compute stall reasons per issued instruction and per-SASS-instruction stall samples, ours then FA4's (GPU 0) || one bulk op per staged dQ tile (dq_swizzle) at D=128 with session 10's backward order, A/B/B/A at 8K (GPU 1) [<= 7 min]" \
    nvidia-h200-x2 420 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
M="--section WarpStateStats --section SourceCounters --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
nc() { timeout -s INT -k 5 120 ncu --clock-control none -k regex:$1 --launch-skip 1 --launch-count 1 $M -f -o /tmp/rep_$2 python3 bench/ncu_target.py --system $3 --mask full > $OUT/ncu_$2.log 2>&1; timeout 60 ncu --import /tmp/rep_$2.ncu-rep --page raw --csv > $OUT/ncu_raw_$2.csv 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; nc bwd_sm90F ours paddle_flashmask; timeout 90 ncu --import /tmp/rep_ours.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > $OUT/ncu_src_ours.csv.gz; nc BackwardSm90 fa4 fa4 ) &
( export CUDA_VISIBLE_DEVICES=1; for r in 0a 1b 1c 0d; do PADDLE_FLASHMASK_BWD_DQ_SWIZZLE=${r:0:1} timeout -s INT -k 10 70 python3 bench/bench_attention.py --cases 0 --systems paddle_flashmask --masks full,causal,causal_document,document --tag sw$r > $OUT/bench_sw$r.log 2>&1; done ) &
wait; ls -la $OUT; grep -H -E "paddle_flashmask " $OUT/bench_sw*.log | sed "s/.*bench_//"'"
$(pack_logs 43 'bench-sw*.json')"
}

call44() {
  emit "call 44 (for session 11, right after call 5a on nvidia-h200-x2) - stage part b; dq_uniform_rows (the dQ writer's 64 row ops from one lane, uniform addresses; compiled only): backward oracle + determinism with it on, the skipping test twice, the D=64 oracle cases with it instead of dq_swizzle, then the GQA A/B (GPU 0) || the D=128 A/B/B/A at 8K, then D=64 with it instead of dq_swizzle (GPU 1) [<= 8 min]" \
    nvidia-h200-x2 480 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
$SKIP_FN"'
ab() { env PADDLE_FLASHMASK_BWD_DQ_UNIFORM_ROWS=$1 $4 timeout -s INT -k 10 70 python3 bench/bench_attention.py --cases $2 --systems paddle_flashmask --masks full,causal,causal_document,document --tag ur$3 > $OUT/bench_ur$3.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; PADDLE_FLASHMASK_BWD_DQ_UNIFORM_ROWS=1 timeout -s INT -k 10 140 python3 tests/gpu/bwd_check.py --bench --json-name bwd_uniform_rows.json > $OUT/bwd_uniform.log 2>&1; for r in a b; do PADDLE_FLASHMASK_BWD_DQ_UNIFORM_ROWS=1 skip ur_$r; done; PADDLE_FLASHMASK_BWD_DQ_SWIZZLE=0 PADDLE_FLASHMASK_BWD_DQ_UNIFORM_ROWS=1 timeout -s INT -k 10 70 python3 tests/gpu/bwd_check.py --only fp16_d64_causal_doc_sink,d64_full_sink,fp16_d64_causal_doc_sink_rs --json-name bwd_uniform_d64.json > $OUT/bwd_uniform_d64.log 2>&1; ab 0 2 g0; ab 1 2 g1 ) &
( export CUDA_VISIBLE_DEVICES=1; ab 0 0 0a; ab 1 0 1b; ab 1 0 1c; ab 0 0 0d; ab 0 3 d64sw; ab 1 3 d64ur PADDLE_FLASHMASK_BWD_DQ_SWIZZLE=0 ) &
wait; tail -n 1 $OUT/bwd_uniform.log $OUT/bwd_uniform_d64.log; timeout 30 python3 scripts/skip_summary.py $OUT/skip_*.json; grep -H -E "paddle_flashmask " $OUT/bench_ur*.log | sed "s/.*bench_//"'"
$(pack_logs 44 'skip_*.json bench-ur*.json')"
}

call45() {
  emit "call 45 (session 11, hand-written on the warm machine after call 44, recorded here) - call 44 hung: its dq_uniform_rows build gave the producer warp group 32 registers, and 128 x (168 - 32) < 256 x (240 - 168), so the consumers' setmaxnreg increase waited forever; every uniform-rows run was killed by its timeout. With the producer back at 24: backward oracle + determinism with dq_uniform_rows forced on (GPU 0) || D=128 8K A/B/A, on / off / on (GPU 1) [<= 3.5 min]" \
    nvidia-h200-x2 200 '[".devtools"]' \
'export PYTHONUNBUFFERED=1; source .devtools/cutedsl-env.sh || exit $?
( export CUDA_VISIBLE_DEVICES=0 PADDLE_FLASHMASK_BWD_DQ_UNIFORM_ROWS=1; timeout -s INT -k 5 150 python3 tests/gpu/bwd_check.py --bench --json-name bwd_uniform_rows.json > $OUT/bwd_uniform.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; for r in 1b 0c 1d; do PADDLE_FLASHMASK_BWD_DQ_UNIFORM_ROWS=${r:0:1} timeout -s INT -k 5 50 python3 bench/bench_attention.py --cases 0 --systems paddle_flashmask --masks full,causal,causal_document,document --tag ur$r > $OUT/bench_ur$r.log 2>&1; done ) &
wait; tail -n 2 $OUT/bwd_uniform.log; grep -H -E "paddle_flashmask " $OUT/bench_ur*.log | sed "s/.*bench_//"; rm -f $OUT/*.png'
}

call46() {
  emit "call 46 (for session 12, right after call 5a on nvidia-h200-x2) - stage part b; the GPU suite and the skipping test x3 at HEAD (dq_uniform_rows, the D=128 backward default since session 11, has only run bwd_check and an A/B) (GPU 0) || the two forward loop options, compiled only, both on (uniform_q: Q descriptors in uniform registers; rescale threshold 8: lazy O rescale): a one-case smoke that ends this side on failure, every forward case vs the oracle, then the 8K A/B/B/A against the defaults (GPU 1) [<= 9 min]" \
    nvidia-h200-x2 560 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
$SKIP_FN"'
ab() { env $1 timeout -s INT -k 10 60 python3 bench/bench_attention.py --cases 0 --systems paddle_flashmask --masks full,causal,sliding_window,causal_document,document --tag fo$2 > $OUT/bench_fo$2.log 2>&1; }
B="PADDLE_FLASHMASK_FWD_UNIFORM_Q=1 PADDLE_FLASHMASK_FWD_RESCALE_THRESHOLD=8"
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 90 python3 tests/gpu/precompile.py --jobs 12 > $OUT/precompile.log 2>&1; PFM_GPU_REPORT=$OUT/gpu_report.json timeout -s INT -k 20 150 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu > $OUT/pytest_gpu.log 2>&1; for r in a b c; do skip s12_$r; done ) &
( export CUDA_VISIBLE_DEVICES=1; env $B timeout -s INT -k 5 40 python3 tests/gpu/fwd_check.py --only causal_d128 --json-name fwd_fo_smoke.json > $OUT/fwd_fo_smoke.log 2>&1 && { env $B timeout -s INT -k 10 150 python3 tests/gpu/fwd_check.py --json-name fwd_loop_options.json > $OUT/fwd_fo.log 2>&1; ab X=0 0a; ab "$B" 1b; ab "$B" 1c; ab X=0 0d; } ) &
wait; tail -n 3 $OUT/pytest_gpu.log; tail -n 1 $OUT/fwd_fo_smoke.log $OUT/fwd_fo.log; timeout 30 python3 scripts/skip_summary.py $OUT/gpu_report.json $OUT/skip_*.json; grep -H -E "paddle_flashmask " $OUT/bench_fo*.log | sed "s/.*bench_//"'"
$(pack_logs 46 'skip_*.json bench-fo*.json')"
}

call47() {
  emit "call 47 (for session 12, on the warm machine after call 46, if both forward options passed) - each forward loop option alone against the defaults, A/B/B/A at 8K: uniform_q (GPU 0) || rescale threshold 8 (GPU 1) [<= 5 min]" \
    nvidia-h200-x2 300 '[".devtools"]' \
"$PRELUDE"'
ab() { env $1 timeout -s INT -k 10 55 python3 bench/bench_attention.py --cases 0 --systems paddle_flashmask --masks full,causal,sliding_window,causal_document,document --tag $2 > $OUT/bench_$2.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; U=PADDLE_FLASHMASK_FWD_UNIFORM_Q=1; ab X=0 uq0a; ab $U uq1b; ab $U uq1c; ab X=0 uq0d ) &
( export CUDA_VISIBLE_DEVICES=1; R=PADDLE_FLASHMASK_FWD_RESCALE_THRESHOLD=8; ab X=0 rt0a; ab $R rt1b; ab $R rt1c; ab X=0 rt0d ) &
wait; grep -H -E "paddle_flashmask " $OUT/bench_*.log | sed "s/.*bench_//"'"
$(pack_logs 47 'bench-*.json')"
}

call48() {
  emit "call 48 (session 12, right after call 5a on a fresh nvidia-h200-x2, FA4 wheels carried; run as written here, with timeout_s 420: its limits allow 430 s) - stage part b; where a context-parallel rank's time goes: the single 64K call and every rank's phases alone on one GPU (bench/cp_phase_profile.py), then 32K next to FA4 (GPU 0) || the side-by-side benchmark, 8K with every peer (GPU 1) [~4 min]" \
    nvidia-h200-x2 450 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 150 python3 bench/cp_phase_profile.py > $OUT/cp_phase.log 2>&1; timeout -s INT -k 10 200 python3 bench/bench_attention.py --cases 1 --systems paddle_flashmask,fa4 --tag s12_cases1 > $OUT/bench_s12_cases1.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 330 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s12_cases0 > $OUT/bench_s12_cases0.log 2>&1 ) &
wait; grep -E "^rank|Error|error" $OUT/cp_phase.log | cut -c1-400; grep -h -E "paddle_flashmask |fa4" $OUT/bench_s12_*.log'"
$(pack_logs 48)"
}

call49() {
  emit "call 49 (session 12, right after call 5a on a fresh nvidia-h200-x2; run as written here, with timeout_s 240 and its JSON summary without a timeout) - stage part b; CP 64K causal documents with 4 steps back to back under the profiler (--profile-steps 4): kernel sums, busy time and the compute stream's gaps per rank [~1 min]" \
    nvidia-h200-x2 280 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 200 python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 0 --chunk-sizes 1024 --pipeline 8 --iters 8 --profile --profile-steps 4 --out $OUT/cp_scaling.json > $OUT/cp_scaling.log 2>&1; tail -n 12 $OUT/cp_scaling.log | cut -c1-600
timeout 30 python3 -c "
import json;d=json.load(open(\"$OUT/cp_scaling.json\"))
print(d[\"speedup\"], d[\"context_parallel\"][0][\"rank_local_phase_fwd_bwd_s\"])
for r in d[\"profile\"][\"ranks\"]:
  print(\"rank\",r[\"rank\"],\"wall\",round(r[\"wall_span_s\"]*1e3,2),\"busy\",round(r[\"device_busy_s\"]*1e3,2),\"idle\",round(r[\"compute_idle_s\"]*1e3,2))
  for k in r[\"top_kernels\"][:12]: print(\"  \",k[\"name\"],round(k[\"time_s\"]*1e3,3),k[\"calls\"])
  for g in r[\"timeline\"][\"gaps\"][:12]: print(\"  gap\",g)
"
gzip -k $OUT/cp_scaling.log; ls -la $OUT'
}

call50() {
  emit "call 50 (session 12, on the warm machine after call 49; run as written here, with timeout_s 240 and its JSON summary without a timeout) - CP planner remote_penalty 0 / 0.1 / 0.2 / 0.3 at chunks 1024 and 2048, back to back [~1 min]" \
    nvidia-h200-x2 280 '[".devtools"]' \
"$PRELUDE"'
NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 210 python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 0 --chunk-sizes 1024,2048 --remote-penalties 0,0.1,0.2,0.3 --pipeline 8 --iters 8 --out $OUT/cp_penalty.json > $OUT/cp_penalty.log 2>&1; tail -n 3 $OUT/cp_penalty.log | cut -c1-300
timeout 30 python3 -c "
import json;d=json.load(open(\"$OUT/cp_penalty.json\"))
s=d[\"single_device\"][\"fwd_bwd\"]; print(\"single\", s[\"median_s\"], s[\"pipelined_median_s\"])
for v in d[\"context_parallel\"]:
  f=v[\"fwd_bwd\"]; print(v[\"chunk_size\"], v[\"remote_penalty\"], \"imb\", round(v[\"plan\"][\"imbalance\"],4), \"remote\", v[\"plan\"][\"rank_needed_remote_tokens\"], \"sync\", round(f[\"median_s\"]*1e3,3), \"piped\", round(f[\"pipelined_median_s\"]*1e3,3), \"x\", round(s[\"pipelined_median_s\"]/f[\"pipelined_median_s\"],3), \"local\", [round(x*1e3,2) for x in v[\"rank_local_phase_fwd_bwd_s\"]])
"; ls $OUT'
}

call51() {
  emit "call 51 (session 12, right after call 5a on a fresh nvidia-h200-x2, FA4 wheels carried; run as written here except that the GPU 1 lane wrote its three limits through a shell variable, E=\"timeout -s INT -k 20\", with 150, 80 and 150 s, and with timeout_s 450) - stage part b; dq_uniform_rows with the GQA head walk (forced on): a one-case smoke that ends this side on failure, the 13 GQA oracle cases, GQA 32/8 A/B/B/A at 8K (GPU 0) || the end-to-end step with the compiled model (all three), the same with GQA uniform rows (FlashMask only), then eager with them next to FA4 varlen (GPU 1) [~5 min]" \
    nvidia-h200-x2 480 '[".cutedsl/b", ".devtools", ".whl"]' \
'export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0; set -o pipefail
source .devtools/cutedsl-env.sh || exit $?
[ -d .peers/flash_attn ] || timeout 60 python3 -m pip install -q --no-index --no-deps --target "$PWD/.peers" .whl/*.whl || exit 5
export PYTHONPATH="$PWD/.peers:$PYTHONPATH" FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1
U=PADDLE_FLASHMASK_BWD_DQ_UNIFORM_ROWS=1
G=causal_d128,causal_d128_sq_lt_sk,causal_d128_sq_gt_sk,causal_doc_C1,causal_window_C2,causal_random_C2,random_C2,random_C4,mqa_causal_doc,causal_d128_rs,fp16_d128_random4,empty_rows_C4,empty_rows_C4_sink
( export CUDA_VISIBLE_DEVICES=0; env $U timeout -s INT -k 5 60 python3 tests/gpu/bwd_check.py --only causal_doc_C1 --json-name bwd_uq_smoke.json > $OUT/bwd_uq_smoke.log 2>&1 && { env $U timeout -s INT -k 10 150 python3 tests/gpu/bwd_check.py --only $G --json-name bwd_uq_gqa.json > $OUT/bwd_uq.log 2>&1; for t in 0a 1b 1c 0d; do env PADDLE_FLASHMASK_BWD_DQ_UNIFORM_ROWS=${t:0:1} timeout -s INT -k 10 70 python3 bench/bench_attention.py --cases 2 --systems paddle_flashmask --masks full,causal,causal_document,document --tag gq$t > $OUT/bench_gq$t.log 2>&1; done; } ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 20 130 python3 bench/e2e_step.py --impl-timeout 70 --compile-model --tag s12_compiled > $OUT/e2e_c.log 2>&1; env $U timeout -s INT -k 20 80 python3 bench/e2e_step.py --impl-timeout 70 --compile-model --impls flashmask --tag s12_compiled_uq > $OUT/e2e_cu.log 2>&1; env $U timeout -s INT -k 20 130 python3 bench/e2e_step.py --impl-timeout 70 --impls flashmask,fa4_varlen --tag s12_uq > $OUT/e2e_u.log 2>&1 ) &
wait; tail -n 1 $OUT/bwd_uq_smoke.log $OUT/bwd_uq.log; grep -h -E "paddle_flashmask " $OUT/bench_gq*.log; for f in e2e_c e2e_cu e2e_u; do echo == $f; grep -E "tokens/s|speedup|flashmask|fa4|sdpa" $OUT/$f.log | tail -n 8; done
cd $OUT && tar czf /tmp/l49.tgz $(ls *.log *.png bench-gq*.json 2>/dev/null) && rm -f *.log *.png bench-gq*.json && mv /tmp/l49.tgz . ; ls -la $OUT'
}

call52() {
  emit "call 52 (session 12, right after call 5a on a fresh nvidia-h200-x2, FA4 wheels carried) - stage part b; the end-to-end step's attention alone (bench case 5: B=2 S=8K GQA 16/8 D=128, its packed SFT rows as the opt-in zoo mask sft_documents, and plain causal) next to FA4 varlen / native (GPU 0) || the GPU suite at HEAD (dq_uniform_rows now also on for GQA without mask columns) (GPU 1) [<= 5 min]" \
    nvidia-h200-x2 340 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 200 python3 bench/bench_attention.py --cases 5 --masks causal,sft_documents --systems paddle_flashmask,fa4 --tag s12_e2e_attn > $OUT/bench_s12_e2e_attn.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 70 python3 tests/gpu/precompile.py --jobs 12 > $OUT/precompile.log 2>&1; PFM_GPU_REPORT=$OUT/gpu_report.json timeout -s INT -k 20 130 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu > $OUT/pytest_gpu.log 2>&1 ) &
wait; tail -n 3 $OUT/pytest_gpu.log; timeout 30 python3 scripts/skip_summary.py $OUT/gpu_report.json; grep -h -E "paddle_flashmask |fa4" $OUT/bench_s12_e2e_attn.log'"
$(pack_logs 52)"
}

call53() {
  emit "call 53 (for session 13, right after call 5a on nvidia-h200-x2, FA4 wheels carried; prepared in session 12, whose device time ran out before it) - stage part b; the end-to-end step's attention (B=2 S=8K GQA 16/8, sft_documents) and plain causal: kernel time per call vs host time per call, with the host functions by cProfile (bench/profile_call.py), to tell call 52's gap to FA4 varlen between our kernels and our host path (GPU 0) || Nsight Compute of the sft_documents forward, ours then FA4 varlen's: where the 0.78x comes from (GPU 1) [<= 4 min]" \
    nvidia-h200-x2 280 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
N="--clock-control none --launch-skip 1 --launch-count 1 '"$NCU_SECTIONS"'"
T="--batch 2 --kv-heads 8 --mask sft_documents"
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 110 python3 bench/profile_call.py --batch 2 --heads 16 --kv-heads 8 --masks causal,sft_documents --cprofile > $OUT/profile_call.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 5 70 ncu $N -k regex:flash_fwd_sm90 python3 bench/ncu_target.py $T > $OUT/ncu_fwd_sft_documents.txt 2>&1; timeout -s INT -k 5 70 ncu $N -k regex:Forward python3 bench/ncu_target.py $T --system fa4 > $OUT/ncu_fa4_fwd_sft_documents.txt 2>&1 ) &
wait; grep -E "^(causal|sft_documents) " $OUT/profile_call.log | cut -c1-1500; grep -h -E "Duration|Executed Instructions |Issue Slots Busy|No Eligible" $OUT/ncu_*fwd_sft_documents.txt'"
$(pack_logs 53)"
}

call54() {
  emit "call 54 (for session 13, on the warm machine after call 53) - dq_per_wg (one staged dQ block per consumer warpgroup, own barrier pair, one bulk op each; compiled only): a one-case smoke that ends that side on failure, then every backward case vs the oracle with it on (GPU 0) || a smoke, then the 8K D=128 A/B/B/A (GPU 1) [<= 6.5 min]" \
    nvidia-h200-x2 400 '[".devtools"]' \
"$PRELUDE"'
U=PADDLE_FLASHMASK_BWD_DQ_PER_WG=1
ab() { env $1 timeout -s INT -k 10 60 python3 bench/bench_attention.py --cases 0 --systems paddle_flashmask --masks full,causal,causal_document,document --tag pw$2 > $OUT/bench_pw$2.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; env $U timeout -s INT -k 5 60 python3 tests/gpu/bwd_check.py --only causal_doc_C1 --json-name bwd_pw_smoke.json > $OUT/bwd_pw_smoke.log 2>&1 && env $U timeout -s INT -k 10 200 python3 tests/gpu/bwd_check.py --json-name bwd_per_wg.json > $OUT/bwd_pw.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; env $U timeout -s INT -k 5 60 python3 tests/gpu/bwd_check.py --only full_d128_sq_ne_sk --json-name bwd_pw_smoke1.json > $OUT/bwd_pw_smoke1.log 2>&1 && { ab X=0 0a; ab "$U" 1b; ab "$U" 1c; ab X=0 0d; } ) &
wait; tail -n 1 $OUT/bwd_pw*.log; grep -H -E "paddle_flashmask " $OUT/bench_pw*.log | sed "s/.*bench_//"'"
$(pack_logs 54 'bench-pw*.json')"
}

call55() {
  emit "call 55 (session 13, right after call 5a on a fresh nvidia-h200-x2, FA4 wheels carried) - stage part b; call 53 showed the end-to-end shape's forward (B=2 S=8K GQA 16/8, sft_documents) kernel-bound, 322 vs FA4 varlen's 253 us, with our SMs idle 17 % of it (FA4 4 %): the existing forward schedule options on that shape, each alone - GPU work order, claims by work class (2, 3 passes), diagonal-only partials - between two default runs (GPU 0) || the compiled-model e2e step, default FlashMask + FA4 varlen, then FlashMask with the work order and with 3-pass claims (GPU 1) [<= 7 min]" \
    nvidia-h200-x2 420 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
F=PADDLE_FLASHMASK_FWD; WO=${F}_WORK_ORDER=1; C2=${F}_CLAIM_PASSES=2; C3=${F}_CLAIM_PASSES=3; DG=${F}_DIAGONAL_PARTIALS=1
ab() { env $1 timeout -s INT -k 10 48 python3 bench/bench_attention.py --cases 5 --masks sft_documents --systems paddle_flashmask --tag so$2 > $OUT/bench_so$2.log 2>&1; }
e2e() { env $1 timeout -s INT -k 10 $2 python3 bench/e2e_step.py --impl-timeout $(($2 - 15)) --compile-model --impls $3 --tag s13_$4 > $OUT/e2e_$4.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; ab X=0 0a; ab $WO wo; ab $C2 c2; ab $C3 c3; ab $DG dg; ab X=0 0b ) &
( export CUDA_VISIBLE_DEVICES=1; e2e X=0 140 flashmask,fa4_varlen base; e2e $WO 85 flashmask wo; e2e $C3 85 flashmask c3 ) &
wait; grep -H -E "paddle_flashmask " $OUT/bench_so*.log | sed "s/.*bench_//"; grep -h -E "tokens/s|flashmask|fa4_varlen" $OUT/e2e_*.log | tail -n 12'"
$(pack_logs 55 'bench-so*.json')"
}

call56() {
  emit "call 56 (session 13, right after call 5a on a fresh nvidia-h200-x2) - stage part b; call 55: no forward schedule option helps the end-to-end shape (B=2 S=8K GQA 16/8, sft_documents), though the schedule model puts the current order's tail at 1.15x and a heaviest-first order at 1.01x: the kernels of one call with and without the GPU work order (torch.profiler, GPU 0) || Nsight Compute of the forward with the work order: SM active cycles against call 53's 83 % (GPU 1) [<= 3 min]" \
    nvidia-h200-x2 200 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
WO=PADDLE_FLASHMASK_FWD_WORK_ORDER=1; N="--clock-control none --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section InstructionStats"
pc() { env $1 timeout -s INT -k 10 70 python3 bench/profile_call.py --batch 2 --heads 16 --kv-heads 8 --masks sft_documents --out $OUT/$2 > $OUT/profile_$2.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; mkdir -p $OUT/wo $OUT/base; pc $WO wo; pc X=0 base ) &
( export CUDA_VISIBLE_DEVICES=1; env $WO timeout -s INT -k 5 80 ncu $N -k regex:flash_fwd_sm90 python3 bench/ncu_target.py --batch 2 --kv-heads 8 --mask sft_documents > $OUT/ncu_fwd_wo.txt 2>&1 ) &
wait; grep -H -E "^sft_documents " $OUT/profile_*.log | cut -c1-900; grep -h -E "Duration|Elapsed Cycles|SM Active Cycles|Executed Instructions " $OUT/ncu_fwd_wo.txt'"
$(pack_logs 56)"
}

call57() {
  emit "call 57 (session 13, right after call 5a on a fresh nvidia-h200-x2, FA4 wheels carried) - stage part b; call 56: the static work order cut the sft_documents forward kernel 321 -> 307 us (SMs active 83 -> 88 %) but its four ordering kernels (~11 us) ran every call: now the dynamic schedule's claims walk the order (claim t takes order[t]) and the order is kept with the index tensor (once per step, not per layer): a smoke, the forward oracle with it (GPU 0), then the compiled-model e2e step with it next to FA4 varlen || a smoke, then forward A/B/B/A on the e2e shape, A/B on the 8K zoo masks with columns (GPU 1) [<= 8 min]" \
    nvidia-h200-x2 580 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
WO=PADDLE_FLASHMASK_FWD_WORK_ORDER=1; M=sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window
ab() { env $1 timeout -s INT -k 10 40 python3 bench/bench_attention.py --cases 5 --masks sft_documents --systems paddle_flashmask --tag cw5$2 > $OUT/bench_cw5$2.log 2>&1; }
ab0() { env $1 timeout -s INT -k 10 70 python3 bench/bench_attention.py --cases 0 --masks $M --systems paddle_flashmask --tag cw0$2 > $OUT/bench_cw0$2.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; env $WO timeout -s INT -k 5 45 python3 tests/gpu/fwd_check.py --work-order --dynamic --only causal_doc_C1 --json-name fwd_cw_smoke.json > $OUT/fwd_cw_smoke.log 2>&1 && env $WO timeout -s INT -k 10 150 python3 tests/gpu/fwd_check.py --work-order --dynamic --json-name fwd_claimed_order.json > $OUT/fwd_cw.log 2>&1; env $WO timeout -s INT -k 10 150 python3 bench/e2e_step.py --impl-timeout 135 --compile-model --impls flashmask,fa4_varlen --tag s13_claimed_order > $OUT/e2e_cw.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; env $WO timeout -s INT -k 5 40 python3 bench/bench_attention.py --cases 5 --masks sft_documents --systems paddle_flashmask --tag cwsmoke > $OUT/bench_cwsmoke.log 2>&1 && { ab X=0 a; ab $WO b; ab $WO c; ab X=0 d; ab0 X=0 a; ab0 $WO b; } ) &
wait; tail -n 1 $OUT/fwd_cw*.log; grep -H -E "paddle_flashmask " $OUT/bench_cw*.log | sed "s/.*bench_//" | cut -c1-80; grep -h -E "x \\(target|tokens" $OUT/e2e_cw.log | tail -n 3'"
$(pack_logs 57 'bench-cw*.json')"
}

call58() {
  emit "call 58 (session 13, right after call 5a on a fresh nvidia-h200-x2, FA4 wheels carried) - stage part b; call 57's smoke: claims over the cached work order made the sft_documents forward slower (0.345 vs 0.322 ms), so the forward schedule stays as it is; the backward of the same shape, whose schedule model puts the current order's tail at 1.11x: its kernels' SM activity, ours then FA4 varlen's (Nsight Compute, GPU 1), and the existing 2- and 3-pass claims by work class on it, A/B/B/A (GPU 0), then the compiled-model e2e step with 3-pass backward claims next to FA4 varlen (GPU 1) [<= 7 min]" \
    nvidia-h200-x2 560 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
C=PADDLE_FLASHMASK_BWD_CLAIM_PASSES; N="--clock-control none --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section InstructionStats"; T="--batch 2 --kv-heads 8 --mask sft_documents"
ab() { env $1 timeout -s INT -k 10 60 python3 bench/bench_attention.py --cases 5 --masks sft_documents --systems paddle_flashmask --tag bc$2 > $OUT/bench_bc$2.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; ab X=0 0a; ab $C=3 3b; ab $C=2 2c; ab $C=3 3d; ab X=0 0e ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 5 70 ncu $N -k regex:bwd_sm90F python3 bench/ncu_target.py $T > $OUT/ncu_bwd_sft.txt 2>&1; timeout -s INT -k 5 70 ncu $N -k regex:BackwardSm90 python3 bench/ncu_target.py $T --system fa4 > $OUT/ncu_fa4_bwd_sft.txt 2>&1; env $C=3 timeout -s INT -k 10 150 python3 bench/e2e_step.py --impl-timeout 135 --compile-model --impls flashmask,fa4_varlen --tag s13_bwd_claims3 > $OUT/e2e_bc.log 2>&1 ) &
wait; grep -H -E "paddle_flashmask " $OUT/bench_bc*.log | sed "s/.*bench_//" | cut -c1-80; grep -H -E "Duration|Elapsed Cycles|SM Active Cycles|Executed Instructions " $OUT/ncu_*bwd_sft.txt; grep -h -E "x \\(target" $OUT/e2e_bc.log'"
$(pack_logs 58 'bench-bc*.json')"
}

call59() {
  emit "call 59 (session 13, right after call 5a on a fresh nvidia-h200-x2) - stage part b; call 58: our sft_documents backward kernel 813 us vs FA4 varlen 628 us, SMs active 82 % vs 93 %; with GQA in the CTA its 1,024 work items (key tiles of 8 KV heads) put the schedule model's tail at 1.23x, 3-pass claims by work class at 1.04x; the benchmark's forward+backward there is host-bound (1.6-1.8 ms around ~1.2 ms of kernels), so: kernel times per call (torch.profiler) default / 3-pass / 3-pass / default (GPU 0) || Nsight Compute of the backward kernel with 3-pass claims, then 2- and 4-pass kernel times (GPU 1) [<= 4 min]" \
    nvidia-h200-x2 260 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
C=PADDLE_FLASHMASK_BWD_CLAIM_PASSES; N="--clock-control none --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section InstructionStats"
pc() { mkdir -p $OUT/$2; env $1 timeout -s INT -k 10 45 python3 bench/profile_call.py --batch 2 --heads 16 --kv-heads 8 --masks sft_documents --out $OUT/$2 > $OUT/profile_$2.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; pc X=0 p0a; pc $C=3 p3b; pc $C=3 p3c; pc X=0 p0d ) &
( export CUDA_VISIBLE_DEVICES=1; env $C=3 timeout -s INT -k 5 70 ncu $N -k regex:bwd_sm90F python3 bench/ncu_target.py --batch 2 --kv-heads 8 --mask sft_documents > $OUT/ncu_bwd_sft_c3.txt 2>&1; pc $C=2 p2e; pc $C=4 p4f ) &
wait; for f in $OUT/profile_p*.log; do echo "$f $(grep -o "bwd_sm90F[^,]*" $f)"; done; grep -h -E "Duration|Elapsed Cycles|SM Active Cycles|Executed Instructions " $OUT/ncu_bwd_sft_c3.txt'"
$(pack_logs 59)"
}

call60() {
  emit "call 60 (session 13, right after call 5a on a fresh nvidia-h200-x2, FA4 wheels carried) - stage part b; at the new backward rule (3-pass claims by work class where the persistent grid gets fewer than 16 key tiles per CTA; call 59: the e2e shape's backward kernel 806-809 -> 735-739 us): the compiled-model e2e step next to FA4 varlen (GPU 0) || the GPU suite, whose small problems now take the 3-pass variant (GPU 1); then context parallelism at 64K on both GPUs, whose pipelined remote chunks fall under the rule [<= 8 min]" \
    nvidia-h200-x2 540 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 170 python3 bench/e2e_step.py --impl-timeout 150 --compile-model --impls flashmask,fa4_varlen --tag s13_rule > $OUT/e2e_rule.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 60 python3 tests/gpu/precompile.py --jobs 12 > $OUT/precompile.log 2>&1; PFM_GPU_REPORT=$OUT/gpu_report.json timeout -s INT -k 20 130 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu > $OUT/pytest_gpu.log 2>&1 ) &
wait; tail -n 3 $OUT/pytest_gpu.log; timeout 30 python3 scripts/skip_summary.py $OUT/gpu_report.json; grep -h -E "x \\(target" $OUT/e2e_rule.log
NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 150 python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 0 --chunk-sizes 1024 --pipeline 8 --iters 8 --out $OUT/cp_scaling.json > $OUT/cp_scaling.log 2>&1; tail -n 8 $OUT/cp_scaling.log | cut -c1-400'"
$(pack_logs 60)"
}

call61() {
  emit "call 61 (session 13, right after call 5a on a fresh nvidia-h200-x2) - stage part b; the backward rule also reaches the benchmark's GQA row (case 2: B=4 S=8K GQA 32/8, 2,048 key tiles of KV heads, < 16 per CTA): kernel times per call (torch.profiler) with one pass forced and with the rule, in both orders on the two GPUs [<= 4.5 min]" \
    nvidia-h200-x2 250 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
C=PADDLE_FLASHMASK_BWD_CLAIM_PASSES
pc() { mkdir -p $OUT/$2; env $1 timeout -s INT -k 10 100 python3 bench/profile_call.py --batch 4 --heads 32 --kv-heads 8 --masks full,causal,sliding_window,causal_document,document --out $OUT/$2 > $OUT/profile_$2.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; pc $C=1 g1a; pc X=0 grb ) &
( export CUDA_VISIBLE_DEVICES=1; pc X=0 gra; pc $C=1 g1b ) &
wait; for f in $OUT/profile_g*.log; do echo "$f"; grep -o -E "^[a-z_]+ |bwd_sm90F[^,]*" $f | paste -sd " "; done'"
$(pack_logs 61)"
}

call62() {
  emit "call 62 (for session 14, right after call 5a on nvidia-h200-x2; prepared in session 13, whose device time ran out) - stage part b; claims over the cached work order now publish the order's item (the producer reads order[claim] once; call 57's variant had every consumer warpgroup load it again at each tile start): a smoke that ends that side on failure, the forward oracle with it (GPU 0) || forward kernel times on the e2e shape (torch.profiler), default / claimed order / static order (cached, striding) / claimed / static / default, then the 8K zoo masks with columns, default vs order (GPU 1) [<= 6 min]" \
    nvidia-h200-x2 420 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
WO=PADDLE_FLASHMASK_FWD_WORK_ORDER=1; ST=PADDLE_FLASHMASK_FWD_DYNAMIC_SCHEDULE=0; M=sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window
pc() { mkdir -p $OUT/$2; env $1 timeout -s INT -k 10 60 python3 bench/profile_call.py --batch 2 --heads 16 --kv-heads 8 --masks sft_documents --out $OUT/$2 > $OUT/profile_$2.log 2>&1; }
ab0() { env $1 timeout -s INT -k 10 90 python3 bench/bench_attention.py --cases 0 --masks $M --systems paddle_flashmask --tag co0$2 > $OUT/bench_co0$2.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; env $WO timeout -s INT -k 5 60 python3 tests/gpu/fwd_check.py --work-order --dynamic --only causal_doc_C1 --json-name fwd_co_smoke.json > $OUT/fwd_co_smoke.log 2>&1 && env $WO timeout -s INT -k 10 150 python3 tests/gpu/fwd_check.py --work-order --dynamic --json-name fwd_claimed_order.json > $OUT/fwd_co.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; pc X=0 o0a; pc $WO o1b; pc "$WO $ST" o2c; pc $WO o1d; pc "$WO $ST" o2e; pc X=0 o0f; ab0 X=0 a; ab0 $WO b ) &
wait; tail -n 1 $OUT/fwd_co*.log; for f in $OUT/profile_o*.log; do echo "$f $(grep -o "fwd_sm90F[^,]*" $f)"; done; grep -H -E "paddle_flashmask " $OUT/bench_co0*.log | sed "s/.*bench_//" | cut -c1-90'"
$(pack_logs 62 'bench-co*.json')"
}

call63() {
  emit "call 63 (for session 14, on the warm machine after call 62; prepared in session 13) - forward claims by work class with claim blocks (one atomic per 4 consecutive items, their classes read before any is produced; compiled only): a smoke with 3 passes and blocks of 4 that ends that side on failure, the forward oracle with it (GPU 0) || forward kernel times on the e2e shape (torch.profiler): default / 3-pass blocks of 4 / blocks of 8 / default (GPU 1) [<= 4 min]" \
    nvidia-h200-x2 300 '[".devtools"]' \
"$PRELUDE"'
F=PADDLE_FLASHMASK_FWD; B4="${F}_CLAIM_PASSES=3 ${F}_CLAIM_BLOCK=4"; B8="${F}_CLAIM_PASSES=3 ${F}_CLAIM_BLOCK=8"
pc() { mkdir -p $OUT/$2; env $1 timeout -s INT -k 10 50 python3 bench/profile_call.py --batch 2 --heads 16 --kv-heads 8 --masks sft_documents --out $OUT/$2 > $OUT/profile_$2.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; env $B4 timeout -s INT -k 5 60 python3 tests/gpu/fwd_check.py --only causal_doc_C1 --json-name fwd_cb_smoke.json > $OUT/fwd_cb_smoke.log 2>&1 && env $B4 timeout -s INT -k 10 150 python3 tests/gpu/fwd_check.py --json-name fwd_claim_block.json > $OUT/fwd_cb.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; pc X=0 b0a; pc "$B4" b4b; pc "$B8" b8c; pc X=0 b0d ) &
wait; tail -n 1 $OUT/fwd_cb*.log; for f in $OUT/profile_b*.log; do echo "$f $(grep -o "fwd_sm90F[^,]*" $f)"; done'"
$(pack_logs 63)"
}

call64() {
  emit "call 64 (session 14, right after call 63 or call 5a on nvidia-h200-x2, FA4 wheels carried) - stage part b (again, harmless when staged); call 62: claims over the cached work order cut the e2e shape's forward kernel 322 -> 299 us (oracle 24/24) but lost 3-16 % on the 8K B=4 zoo masks (31 items per CTA); call 63: claim blocks 305 us. The compiled-model e2e step with the claimed order forced on (every attention call of the step has the e2e shape), next to FA4 varlen, on each GPU [<= 6 min]" \
    nvidia-h200-x2 400 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
WO=PADDLE_FLASHMASK_FWD_WORK_ORDER=1
( export CUDA_VISIBLE_DEVICES=0; env $WO timeout -s INT -k 10 180 python3 bench/e2e_step.py --impl-timeout 160 --compile-model --impls flashmask,fa4_varlen --tag s14_order_g0 > $OUT/e2e_o0.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; env $WO timeout -s INT -k 10 180 python3 bench/e2e_step.py --impl-timeout 160 --compile-model --impls fa4_varlen,flashmask --tag s14_order_g1 > $OUT/e2e_o1.log 2>&1 ) &
wait; grep -h -E "x \\(target|tokens" $OUT/e2e_o*.log | tail -n 8'"
$(pack_logs 64)"
}

call65() {
  emit "call 65 (session 14, right after call 5a on nvidia-h200-x2, FA4 wheels carried) - stage part b; call 64: with the claimed order the e2e step stays at 0.99x FA4 varlen and its forward phase is still 1.3-1.6 ms longer per step (59.5-59.8 vs 58.2-58.3 ms), more than the forward kernels' difference in isolation (~0.8 ms): the compiled-model e2e step with --profile-steps 2 (GPU timeline of the forward and of the whole step, heaviest kernels), default (GPU 0) and claimed order (GPU 1), each next to FA4 varlen [<= 6 min]" \
    nvidia-h200-x2 400 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
e2e() { env $1 timeout -s INT -k 10 200 python3 bench/e2e_step.py --impl-timeout 180 --compile-model --profile-steps 2 --impls flashmask,fa4_varlen --tag s14_profile_$2 > $OUT/e2e_$2.log 2>&1; }
( export CUDA_VISIBLE_DEVICES=0; e2e X=0 default ) &
( export CUDA_VISIBLE_DEVICES=1; e2e PADDLE_FLASHMASK_FWD_WORK_ORDER=1 order ) &
wait; grep -h -E "x \\(target" $OUT/e2e_*.log'"
$(pack_logs 65)"
}

call66() {
  emit "call 66 (session 14, right after call 5a on nvidia-h200-x2, FA4 wheels carried) - stage part b; at the forward's new work-order rule (claims over the heaviest-first order below 16 query tiles per CTA, 9466d37): the GPU suite, whose small problems now take it (GPU 0) || the compiled-model e2e step with --profile-steps 2 next to FA4 varlen, then the frontend's host time with cProfile on the e2e shape (GPU 1); then context parallelism at 64K on both GPUs, whose remote phases fall under the rule [<= 7 min]" \
    nvidia-h200-x2 540 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
( export CUDA_VISIBLE_DEVICES=0; timeout -s INT -k 10 60 python3 tests/gpu/precompile.py --jobs 12 > $OUT/precompile.log 2>&1; PFM_GPU_REPORT=$OUT/gpu_report.json timeout -s INT -k 20 150 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu > $OUT/pytest_gpu.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=1; timeout -s INT -k 10 170 python3 bench/e2e_step.py --impl-timeout 150 --compile-model --profile-steps 2 --impls flashmask,fa4_varlen --tag s14_rule > $OUT/e2e_rule.log 2>&1; mkdir -p $OUT/cprof; timeout -s INT -k 10 60 python3 bench/profile_call.py --batch 2 --heads 16 --kv-heads 8 --masks sft_documents --cprofile --out $OUT/cprof > $OUT/profile_cprof.log 2>&1 ) &
wait; tail -n 3 $OUT/pytest_gpu.log; timeout 30 python3 scripts/skip_summary.py $OUT/gpu_report.json; grep -h -E "x \\(target" $OUT/e2e_rule.log
NCCL_NVLS_ENABLE=0 timeout -s INT -k 20 150 python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/cp_scaling.py --comm-groups 1 --strategies locality --equal-chunks 0 --chunk-sizes 1024 --pipeline 8 --iters 8 --out $OUT/cp_scaling.json > $OUT/cp_scaling.log 2>&1; tail -n 8 $OUT/cp_scaling.log | cut -c1-400'"
$(pack_logs 66)"
}

# the GPU suite on one GPU after a precompile, and its skipping summary (calls 66s and 69)
GPU_SUITE_1GPU='timeout -s INT -k 10 60 python3 tests/gpu/precompile.py --jobs 12 > $OUT/precompile.log 2>&1; PFM_GPU_REPORT=$OUT/gpu_report.json timeout -s INT -k 20 150 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu > $OUT/pytest_gpu.log 2>&1
tail -n 3 $OUT/pytest_gpu.log; timeout 30 python3 scripts/skip_summary.py $OUT/gpu_report.json'

call66s() {
  emit "call 66s (session 14, when only nvidia-h200 is lent: call 66 without its context-parallel part; stage parts a and b on the 1-GPU machine first, FA4 wheels carried) - at the forward's new work-order rule (9466d37): the GPU suite, whose small problems now take it, then forward kernel times at B=2 S=8K H=16 (15.5 query tiles per CTA: the rule applies) on the other zoo masks, the order forced off vs the rule, then the compiled-model e2e step with --profile-steps 2 next to FA4 varlen [<= 9.5 min]" \
    nvidia-h200 590 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL
$GPU_SUITE_1GPU"'
Z=causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window
pc() { mkdir -p $OUT/$2; env $1 timeout -s INT -k 10 60 python3 bench/profile_call.py --batch 2 --heads 16 --masks $Z --out $OUT/$2 > $OUT/profile_$2.log 2>&1; }
pc PADDLE_FLASHMASK_FWD_WORK_ORDER=0 z0; pc X=0 zr; for f in $OUT/profile_z*.log; do echo "$f"; grep -o -E "^[a-z_]+ |fwd_sm90F[^,]*" $f | paste -sd " "; done
timeout -s INT -k 10 160 python3 bench/e2e_step.py --impl-timeout 140 --compile-model --profile-steps 2 --impls flashmask,fa4_varlen --tag s14_rule > $OUT/e2e_rule.log 2>&1; grep -h -E "x \\(target" $OUT/e2e_rule.log'"
$(pack_logs 66s)"
}

call67() {
  emit "call 67 (session 14, nvidia-h200: stage parts a and b first) - call 66s: at B=2 S=8K H=16 (15.5 query tiles per CTA) the claimed work order took 3-7 % on five of six zoo masks (document -4 %), so its rule is in doubt; the other way to start heavy tiles first keeps the default order inside a class: 3-pass claims with claim blocks of 4 (305 us on the e2e shape in call 63, oracle 24/24). Forward kernel times on the e2e shape and the zoo masks at B=2 GQA 16/8, the order forced off (default) / blocks / the order's rule (claimed order) / blocks / default [<= 8 min]" \
    nvidia-h200 480 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
F=PADDLE_FLASHMASK_FWD; OFF=${F}_WORK_ORDER=0; B4="${F}_CLAIM_PASSES=3 ${F}_CLAIM_BLOCK=4"
Z=sft_documents,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window
pc() { mkdir -p $OUT/$2; env $1 timeout -s INT -k 10 70 python3 bench/profile_call.py --batch 2 --heads 16 --kv-heads 8 --masks $Z --out $OUT/$2 > $OUT/profile_$2.log 2>&1; }
timeout -s INT -k 10 60 python3 tests/gpu/precompile.py --jobs 12 > $OUT/precompile.log 2>&1; pc $OFF k0a; pc "$B4" k4b; pc X=0 krc; pc "$B4" k4d; pc $OFF k0e; for f in $OUT/profile_k*.log; do echo "$f"; grep -o -E "^[a-z_]+ |fwd_sm90F[^,]*" $f | paste -sd " "; done'"
$(pack_logs 67)"
}

call68() {
  emit "call 68 (session 14, nvidia-h200: stage parts a and b first) - the forward producer scanned a work tile's key tiles (tile ranges, summary: dependent global loads) only after its Q stage was free, i.e. after the consumers finished the previous tile, so short work tiles (packed documents: ~5 key tiles each) paid that latency before every first K/V load; FwdConfig.early_scan (env PADDLE_FLASHMASK_FWD_EARLY_SCAN=1, compiled only) scans first: a smoke that ends the call on failure, the forward oracle with it (and one case with the claimed order), then forward kernel times off / on / on / off at B=2 GQA 16/8 (the e2e shape and the zoo masks) and off / on at B=4 MHA (the benchmark's shape) [<= 9 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
ES=PADDLE_FLASHMASK_FWD_EARLY_SCAN
Z=sft_documents,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window
pc() { mkdir -p $OUT/$2; env $1 timeout -s INT -k 10 75 python3 bench/profile_call.py --batch $3 --heads 16 --kv-heads $4 --masks $Z --out $OUT/$2 > $OUT/profile_$2.log 2>&1; }
env $ES=1 timeout -s INT -k 5 60 python3 tests/gpu/fwd_check.py --only causal_doc_C1 --json-name fwd_es_smoke.json > $OUT/fwd_es_smoke.log 2>&1 || { tail -n 20 $OUT/fwd_es_smoke.log; exit 7; }
env $ES=1 timeout -s INT -k 10 150 python3 tests/gpu/fwd_check.py --json-name fwd_early_scan.json > $OUT/fwd_es.log 2>&1; env $ES=1 timeout -s INT -k 5 50 python3 tests/gpu/fwd_check.py --work-order --dynamic --only causal_doc_C1 --json-name fwd_es_order.json > $OUT/fwd_es_order.log 2>&1; tail -n 1 $OUT/fwd_es*.log
pc $ES=0 e0a 2 8; pc $ES=1 e1b 2 8; pc $ES=1 e1c 2 8; pc $ES=0 e0d 2 8; pc $ES=1 m1e 4 16; pc $ES=0 m0f 4 16
for f in $OUT/profile_[em]*.log; do echo "$f"; grep -o -E "^[a-z_]+ |fwd_sm90F[^,]*" $f | paste -sd " "; done'"
$(pack_logs 68)"
}

call69() {
  emit "call 69 (session 14, nvidia-h200: stage parts a and b first, FA4 wheels carried) - at the final forward defaults of the session (early_scan on since call 68: oracle 24/24, forward 0-5.5 % faster, no mask slower; the GQA work-order rule): the GPU suite, then the compiled-model e2e step with --profile-steps 2 next to FA4 varlen [<= 6 min]" \
    nvidia-h200 520 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL
$GPU_SUITE_1GPU"'
timeout -s INT -k 10 160 python3 bench/e2e_step.py --impl-timeout 140 --compile-model --profile-steps 2 --impls flashmask,fa4_varlen --tag s14_final > $OUT/e2e_final.log 2>&1; grep -h -E "x \\(target" $OUT/e2e_final.log'"
$(pack_logs 69)"
}

call69b() {
  emit "call 69b (session 14, hand-written on call 69's warm machine, recorded as run) - a second sample of the e2e step at the final forward defaults, the implementations in the other order [<= 3.5 min]" \
    nvidia-h200 200 '[".devtools"]' \
'export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0; set -o pipefail
source .devtools/cutedsl-env.sh || exit $?
export PYTHONPATH="$PWD/.peers:$PYTHONPATH" FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1
timeout -s INT -k 10 170 python3 bench/e2e_step.py --impl-timeout 150 --compile-model --impls fa4_varlen,flashmask --tag s14_final_b > $OUT/e2e_final_b.log 2>&1; grep -h -E "x \(target" $OUT/e2e_final_b.log; ls $OUT'
}

call70() {
  emit "call 70 (session 15, nvidia-h200: stage parts a and b first) - the forward producer no longer classifies a chunk past its scan's last one (a summary read and two ballots per work tile before the sentinel): the forward oracle; then the end-to-end shape's backward (B=2 S=8K GQA 16/8, the head walk with mask columns, where the dQ writer still issues its 64 row adds per lane in a waterfall because the uniform-row writer spills 8-36 B there): kernel times interleaved in one process, 5 rounds x 10 calls, default / dq_uniform_rows / dq_per_wg / stage_stats, on sft_documents, causal documents and documents [<= 8 min]" \
    nvidia-h200 500 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
timeout -s INT -k 10 170 python3 tests/gpu/fwd_check.py --json-name fwd_s15_guard.json > $OUT/fwd_guard.log 2>&1; tail -n 2 $OUT/fwd_guard.log
K=PADDLE_FLASHMASK_BWD
timeout -s INT -k 10 280 python3 bench/kernel_ab.py --pass bwd --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document --variant base: --variant ur:${K}_DQ_UNIFORM_ROWS=1 --variant pw:${K}_DQ_PER_WG=1 --variant ss:${K}_STAGE_STATS=1 --rounds 5 --calls 10 --tag s15_bwd_e2e_ab > $OUT/kab.log 2>&1; tail -n 5 $OUT/kab.log'"
$(pack_logs 70)"
}

# e2e_both_orders TIMEOUT IMPL_TIMEOUT TAG_A TAG_B: the compiled-model e2e step next to FA4 varlen,
# twice, the implementations in both orders (calls 72 and 75)
e2e_both_orders() {  # e2e_both_orders LIMIT_S IMPL_LIMIT_S TAG_A TAG_B [SESSION (s15)]
  printf '%s' "e2e() { timeout -s INT -k 10 $1 python3 bench/e2e_step.py --impl-timeout $2 --compile-model --impls \$1 --tag ${5:-s15}_\$2 > \$OUT/e2e_\$2.log 2>&1; grep -h -E \"x \\\\(target\" \$OUT/e2e_\$2.log; }
e2e flashmask,fa4_varlen $3; e2e fa4_varlen,flashmask $4"
}

call70b() {
  emit "call 70b (session 15, hand-written on call 70's warm machine, recorded as run) - call 70: uniform dQ rows and staged stats each faster on the GQA head walk with mask columns; both together at B=2 GQA 16/8 on six masks, and staged stats alone at B=4 MHA over the zoo (ran with timeout_s 420) [<= 7.5 min]" \
    nvidia-h200 440 '[".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
timeout -s INT -k 10 200 python3 bench/kernel_ab.py --pass bwd --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document,full,causal,sliding_window --variant base: --variant ur:${K}_DQ_UNIFORM_ROWS=1 --variant urss:${K}_DQ_UNIFORM_ROWS=1,${K}_STAGE_STATS=1 --rounds 5 --calls 6 --tag s15_bwd_gqa_urss > $OUT/kab2.log 2>&1; tail -n 7 $OUT/kab2.log
timeout -s INT -k 10 200 python3 bench/kernel_ab.py --pass bwd --batch 4 --heads 16 --masks full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window --variant base: --variant ss:${K}_STAGE_STATS=1 --rounds 4 --calls 4 --tag s15_bwd_mha_ss > $OUT/kab3.log 2>&1; tail -n 9 $OUT/kab3.log'
}

call71() {
  emit "call 71 (session 15, nvidia-h200: stage parts a and b first) - call 70: with the GQA head walk over masks with columns, the uniform-row dQ writer (despite 8-36 B of producer spill) and LSE/delta staged with Q/dO are faster (documents 2,330 -> 1,992 us, the e2e shape 726 -> 696 us): the new backward rule's GPU suite; then forward kernel times interleaved (kernel_ab) of the off switches at the e2e shape and at B=4 MHA: diagonal-only partials, Q descriptors from the uniform slice, lazy rescale, the 128x112 tile [<= 9 min]" \
    nvidia-h200 590 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
$GPU_SUITE_1GPU"'
F=PADDLE_FLASHMASK_FWD; V="--variant base: --variant dp:${F}_DIAGONAL_PARTIALS=1 --variant uq:${F}_UNIFORM_Q=1 --variant rt:${F}_RESCALE_THRESHOLD=8 --variant t112:${F}_D128_TILE_N=112"
timeout -s INT -k 10 120 python3 bench/kernel_ab.py --pass fwd --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document $V --rounds 5 --calls 10 --tag s15_fwd_gqa_ab > $OUT/kab_fg.log 2>&1; grep -v compiling $OUT/kab_fg.log | tail -n 4
timeout -s INT -k 10 130 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --masks full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window $V --rounds 4 --calls 4 --tag s15_fwd_mha_ab > $OUT/kab_fm.log 2>&1; grep -v compiling $OUT/kab_fm.log | tail -n 9'"
$(pack_logs 71)"
}

call72() {
  emit "call 72 (session 15, hand-written on call 71's warm machine, recorded as run; FA4 wheels carried) - call 71: the lazy O rescale (threshold 8) was faster on every forward but full attention: the forward oracle with it forced, then the compiled-model e2e step next to FA4 varlen with it, twice, the implementations in both orders [<= 8 min]" \
    nvidia-h200 540 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
export PADDLE_FLASHMASK_FWD_RESCALE_THRESHOLD=8
timeout -s INT -k 10 150 python3 tests/gpu/fwd_check.py --json-name fwd_s15_rescale8.json > $OUT/fwd_rt.log 2>&1; tail -n 1 $OUT/fwd_rt.log
'"$(e2e_both_orders 170 150 rt_a rt_b)
$(pack_logs 72)"
}

call73() {
  emit "call 73 (session 15, nvidia-h200: stage parts a and b first) - kernel_ab's interleaved timing resolves 1-2 % where separate runs could not: the backward's off switches at B=4 S=8K MHA D=128 over the zoo (per-warpgroup dQ blocks, 3-pass claims, key-major order, the fused dQ conversion, late stats loads), and the lazy rescale (a D=128 default since call 71) at D=64 and D=256 [<= 6 min]" \
    nvidia-h200 400 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD; Z=full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window
timeout -s INT -k 10 250 python3 bench/kernel_ab.py --pass bwd --batch 4 --heads 16 --masks $Z --variant base: --variant pw:${K}_DQ_PER_WG=1 --variant cp3:${K}_CLAIM_PASSES=3 --variant km:${K}_KEY_MAJOR=1 --variant fd:${K}_FUSED_DQ=1 --variant ll:${K}_LATE_LOADS=1 --rounds 4 --calls 3 --tag s15_bwd_mha_ab > $OUT/kab_bm.log 2>&1; grep -v compiling $OUT/kab_bm.log | tail -n 9
for d in 64 256; do timeout -s INT -k 10 60 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim $d --masks full,causal,causal_document,document,sliding_window --variant base: --variant rt:PADDLE_FLASHMASK_FWD_RESCALE_THRESHOLD=8 --rounds 4 --calls 4 --tag s15_fwd_rt_d$d > $OUT/kab_rt$d.log 2>&1; grep -v compiling $OUT/kab_rt$d.log | tail -n 6; done'"
$(pack_logs 73)"
}

call74() {
  emit "call 74 (session 15, nvidia-h200: stage parts a and b first, FA4 wheels carried) - at the session's new defaults (the backward's key-major claim order for masks with one-pass claims, its GQA uniform rows and staged stats, the forward's lazy rescale at D=64/128/256): the backward oracle with the key-major order forced everywhere (its small problems would otherwise take 3-pass claims), then the README's same-run benchmark at B=4 S=8K with every peer [<= 9 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
PADDLE_FLASHMASK_BWD_KEY_MAJOR=1 timeout -s INT -k 10 140 python3 tests/gpu/bwd_check.py --json-name bwd_s15_key_major.json > $OUT/bwd_km.log 2>&1; tail -n 2 $OUT/bwd_km.log
timeout -s INT -k 10 320 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s15_cases0 > $OUT/bench_s15_cases0.log 2>&1; tail -n 14 $OUT/bench_s15_cases0.log | cut -c1-300'"
$(pack_logs 74)"
}

call75() {
  emit "call 75 (session 15, hand-written on call 74's warm machine, recorded as run) - at the session's final defaults: the compiled-model e2e step next to FA4 varlen, twice, the implementations in both orders [<= 5.5 min]" \
    nvidia-h200 330 '[".devtools"]' \
"$PRELUDE"'
export PYTHONPATH="$PWD/.peers:$PYTHONPATH" FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1
'"$(e2e_both_orders 150 130 final_a final_b)
$(pack_logs 75)"
}

call76() {
  emit "call 76 (session 15, hand-written on call 75's warm machine, recorded as run) - the compiled-model e2e step with all three implementations in one run (SDPA with the dense document mask included; ran with timeout_s 270) [<= 4.5 min]" \
    nvidia-h200 280 '[".devtools"]' \
"$PRELUDE"'
export PYTHONPATH="$PWD/.peers:$PYTHONPATH" FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1
timeout -s INT -k 10 250 python3 bench/e2e_step.py --impl-timeout 110 --compile-model --tag s15_all3 > $OUT/e2e_all3.log 2>&1; grep -h -E "x \\(target" $OUT/e2e_all3.log
gzip $OUT/e2e_all3.log; ls -la $OUT'
}

call77() {
  emit "call 77 (prepared in session 15 for the next one; nvidia-h200: stage parts a and b first, FA4 wheels carried) - the GPU suite at the final defaults of session 15 (it last ran before the lazy rescale and the key-major order); the 32K table next to FA4 (last run in session 12); then kernel_ab of combined backward switches: key-major + 3-pass claims at B=4 MHA (each alone took global + sliding window 13-15 %), and key-major with the rule's 3-pass claims on the e2e shape [<= 9.5 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL
$GPU_SUITE_1GPU"'
timeout -s INT -k 10 90 python3 bench/bench_attention.py --cases 1 --systems '"$BENCH_SYSTEMS"' --tag s16_cases1 > $OUT/bench_s16_cases1.log 2>&1; tail -n 6 $OUT/bench_s16_cases1.log | cut -c1-200
K=PADDLE_FLASHMASK_BWD; Z=sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window
timeout -s INT -k 10 80 python3 bench/kernel_ab.py --pass bwd --batch 4 --heads 16 --masks $Z --variant base: --variant c3:${K}_CLAIM_PASSES=3 --variant kmc3:${K}_CLAIM_PASSES=3,${K}_KEY_MAJOR=1 --rounds 4 --calls 3 --tag s16_bwd_kmc3 > $OUT/kab_kmc3.log 2>&1; grep -v compiling $OUT/kab_kmc3.log | tail -n 7
timeout -s INT -k 10 45 python3 bench/kernel_ab.py --pass bwd --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document --variant base: --variant km:${K}_KEY_MAJOR=1 --rounds 5 --calls 6 --tag s16_bwd_gqa_km > $OUT/kab_gkm.log 2>&1; grep -v compiling $OUT/kab_gkm.log | tail -n 4'"
$(pack_logs 77)"
}

call78() {
  emit "call 78 (prepared in session 15 for the next one; warm after call 77, or stage parts a and b first) - the deterministic backward against the default at the final defaults (#6 item 1: <= 1.15x on every mask; session 15 changed the GQA head walk's dQ writer and stats staging, which the deterministic mode shares): the backward oracle with its bench rows (full, causal, causal documents MHA and GQA 16/8) [<= 4 min]" \
    nvidia-h200 240 '[".devtools"]' \
"$PRELUDE"'
timeout -s INT -k 10 210 python3 tests/gpu/bwd_check.py --bench --json-name bwd_s16_bench.json > $OUT/bwd_bench.log 2>&1; tail -n 6 $OUT/bwd_bench.log | cut -c1-300'"
$(pack_logs 78)"
}

call79() {
  emit "call 79 (session 16, first of the session: stage parts a and b on nvidia-h200 first, FA4 wheels carried) - why the document mask's backward is 22 % slower than FA4 varlen's when full attention is 9.5 % slower (bench-s15_cases0: per computed tile our document backward costs 1.15x our full one, FA4's ~1.0x): Nsight Compute of the backward, ours and FA4's, on document and on full (B=4 S=8K H=16 D=128); kernel_ab of the backward switches on document and full; then call 77's combined-switch sweeps (key-major + 3-pass claims at B=4, key-major on the e2e shape) [<= 6 min]" \
    nvidia-h200 400 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL
M=\"$NCU_SECTIONS --section MemoryWorkloadAnalysis\""'
nc() { timeout 70 ncu --clock-control none -k regex:$1 --launch-skip 1 --launch-count 1 $M python3 bench/ncu_target.py --system $2 --mask $3 > $OUT/ncu_$4.txt 2>&1; grep -E "^    Duration|SM Active Cycles|Executed Instructions  |L2 Hit Rate  |Issue Slots Busy" $OUT/ncu_$4.txt; }
for m in document full; do nc bwd_sm90F paddle_flashmask $m bwd_$m; nc BackwardSm90 fa4 $m fa4_bwd_$m; done
K=PADDLE_FLASHMASK_BWD; A="timeout -s INT -k 10 100 python3 bench/kernel_ab.py --pass bwd --rounds 4 --heads 16"
$A --batch 4 --masks document,full --variant base: --variant km0:${K}_KEY_MAJOR=0 --variant ll:${K}_LATE_LOADS=1 --variant ss:${K}_STAGE_STATS=1 --variant pf:${K}_PREFETCH_STATS=1 --calls 3 --tag s16_doc > $OUT/kab_doc.log 2>&1; grep -v compiling $OUT/kab_doc.log|tail -n4
$A --batch 4 --masks sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window --variant base: --variant c3:${K}_CLAIM_PASSES=3 --variant kmc3:${K}_CLAIM_PASSES=3,${K}_KEY_MAJOR=1 --calls 3 --tag s16_kmc3 > $OUT/kab_kmc3.log 2>&1; grep -v compiling $OUT/kab_kmc3.log | tail -n 7
$A --batch 2 --kv-heads 8 --masks sft_documents,causal_document,document --variant base: --variant km:${K}_KEY_MAJOR=1 --calls 6 --tag s16_gqa_km > $OUT/kab_gkm.log 2>&1; grep -v compiling $OUT/kab_gkm.log | tail -n 4'"
$(pack_logs 79 'ncu_*.txt')"
}

call80() {
  emit "call 80 (session 16: stage parts a and b on nvidia-h200 first) - the final defaults of session 16 (staged stats for MHA documents at D=128, key-major claims for the GQA head walk over causal masks at D=128, on top of session 15's): the backward oracle with determinism and the deterministic-vs-default bench rows (#6 item 1: <= 1.15x), then the GPU suite (last run at 04bea28) [<= 9 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
timeout -s INT -k 10 230 python3 tests/gpu/bwd_check.py --bench --json-name bwd_s16_bench.json > $OUT/bwd_bench.log 2>&1; tail -n 12 $OUT/bwd_bench.log | cut -c1-300
'"$GPU_SUITE_1GPU
$(pack_logs 80)"
}

call81() {
  emit "call 81 (session 16, warm after call 80; FA4 wheels carried) - the two new rules against their switches off (interleaved kernel times), the 32K table next to FA4 (last run in session 12), the e2e step in both orders [<= 8 min]" \
    nvidia-h200 480 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
K=PADDLE_FLASHMASK_BWD; A="timeout -s INT -k 10 60 python3 bench/kernel_ab.py --pass bwd --rounds 4 --heads 16"
$A --batch 4 --masks document --variant base: --variant ss0:${K}_STAGE_STATS=0 --calls 4 --tag s16_rule_ss > $OUT/kab_ss.log 2>&1; grep -v compiling $OUT/kab_ss.log | tail -n 2
$A --batch 2 --kv-heads 8 --masks sft_documents,causal_document --variant base: --variant km0:${K}_KEY_MAJOR=0 --calls 6 --tag s16_rule_km > $OUT/kab_km.log 2>&1; grep -v compiling $OUT/kab_km.log | tail -n 3
timeout -s INT -k 10 90 python3 bench/bench_attention.py --cases 1 --systems '"$BENCH_SYSTEMS"' --tag s16_cases1 > $OUT/bench_s16_cases1.log 2>&1; tail -n 8 $OUT/bench_s16_cases1.log | cut -c1-200
'"$(e2e_both_orders 140 120 final_a final_b s16)
$(pack_logs 81)"
}

call82() {
  emit "call 82 (session 16: stage parts a and b on nvidia-h200 first) - call 80's bench rows put the deterministic backward at 1.17x (causal documents) and 1.19x (GQA causal documents) the default, over #6 item 1's 1.15x (the default got faster, the deterministic mode has no persistent grid): interleaved times of the whole backward (pre + main + post), default vs deterministic with its prepared options (two dQ chains, lazy release) over the zoo at B=2 S=8K, MHA and GQA 16/8 [<= 6 min]" \
    nvidia-h200 380 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD; V="--variant base: --variant det:deterministic=1 --variant c2:deterministic=1,${K}_DET_CHAINS=2 --variant lz:deterministic=1,${K}_DET_LAZY_RELEASE=1 --variant c2lz:deterministic=1,${K}_DET_CHAINS=2,${K}_DET_LAZY_RELEASE=1"
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --rounds 3 --calls 3 $V"
timeout -s INT -k 10 240 $A --masks full,causal,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s16_det_mha > $OUT/kab_det.log 2>&1; grep -v compiling $OUT/kab_det.log | tail -n 9
timeout -s INT -k 10 100 $A --kv-heads 8 --masks causal_document,sft_documents,document,causal --tag s16_det_gqa > $OUT/kab_detg.log 2>&1; grep -v compiling $OUT/kab_detg.log | tail -n 5'"
$(pack_logs 82)"
}

call83() {
  emit "call 83 (session 16: stage parts a and b on nvidia-h200 first) - call 82: the deterministic backward is 1.07-1.39x the default over the MHA zoo and 1.17-1.43x with GQA 16/8 (#6 item 1 wants <= 1.15x on every mask); where the gap comes from: the default without its persistent grid (what the deterministic mode lacks), and the deterministic mode without the GQA head walk (2x the CTAs, fp32 dK/dV partials) [<= 4 min]" \
    nvidia-h200 280 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD; V="--variant base: --variant np:${K}_PERSISTENT=0 --variant det:deterministic=1"
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --rounds 3 --calls 3"
timeout -s INT -k 10 110 $A $V --variant detnw:deterministic=1,${K}_GQA_IN_CTA=0 --variant nw:${K}_GQA_IN_CTA=0 --kv-heads 8 --masks causal_document,sft_documents,document,causal --tag s16_det_gqa_why > $OUT/kab_w1.log 2>&1; grep -v compiling $OUT/kab_w1.log | tail -n 5
timeout -s INT -k 10 100 $A $V --masks global_sliding_window,shared_question,document,causal_document,causal --tag s16_det_mha_why > $OUT/kab_w2.log 2>&1; grep -v compiling $OUT/kab_w2.log | tail -n 6'"
$(pack_logs 83)"
}

call84() {
  emit "call 84 (session 16: stage parts a and b on nvidia-h200 first) - call 83: most of the deterministic mode's distance to the default is the missing persistent grid (default without it 1.05-1.28x); the deterministic mode on the persistent grid (each head's key tiles claimed last first, env PADDLE_FLASHMASK_BWD_DET_PERSISTENT=1): the backward oracle and determinism with it (stops on failure), then interleaved whole-backward times: default / deterministic / persistent deterministic (+ two dQ chains) over the zoo, MHA and GQA 16/8 (+ without the head walk) [<= 8 min]" \
    nvidia-h200 470 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_DET_PERSISTENT=1 timeout -s INT -k 10 200 python3 tests/gpu/bwd_check.py --bench --json-name bwd_s16_det_persistent.json > $OUT/bwd_detp.log 2>&1; rc=$?; tail -n 3 $OUT/bwd_detp.log | cut -c1-400; [ $rc = 0 ] || exit $rc
V="--variant base: --variant det:deterministic=1 --variant dp:deterministic=1,${K}_DET_PERSISTENT=1 --variant dpc2:deterministic=1,${K}_DET_PERSISTENT=1,${K}_DET_CHAINS=2"
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --rounds 3 --calls 3 $V"
timeout -s INT -k 10 130 $A --masks full,causal,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s16_detp_mha > $OUT/kab_dp.log 2>&1; grep -v compiling $OUT/kab_dp.log | tail -n 9
timeout -s INT -k 10 90 $A --variant dpnw:deterministic=1,${K}_DET_PERSISTENT=1,${K}_GQA_IN_CTA=0 --kv-heads 8 --masks causal_document,sft_documents,document,causal --tag s16_detp_gqa > $OUT/kab_dpg.log 2>&1; grep -v compiling $OUT/kab_dpg.log | tail -n 5'"
$(pack_logs 84)"
}

# calls 85 and 91: the deterministic backward at a session's final defaults: the oracle with
# determinism (stops on failure), deterministic / default over the zoo, the GPU deterministic tests
# (det_final_check SESSION BWD_CHECK_OPTIONS BWD_TIMEOUT CUT MHA_TIMEOUT TESTS_TIMEOUT)
det_final_check() {
  local A='A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --rounds 3 --calls 3 --variant base: --variant det:deterministic=1"'
  printf '%s\n' "timeout -s INT -k 10 $3 python3 tests/gpu/bwd_check.py $2--json-name bwd_s$1_final.json > \$OUT/bwd_final.log 2>&1; rc=\$?; tail -n 2 \$OUT/bwd_final.log | cut -c1-$4; [ \$rc = 0 ] || exit \$rc" \
    "$A" \
    "timeout -s INT -k 10 60 \$A --kv-heads 8 --masks causal_document,sft_documents,document,causal --tag s$1_det_final_gqa > \$OUT/kab_fg.log 2>&1; grep -v compiling \$OUT/kab_fg.log | tail -n 5" \
    "timeout -s INT -k 10 $5 \$A --masks full,causal,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s$1_det_final_mha > \$OUT/kab_fm.log 2>&1; grep -v compiling \$OUT/kab_fm.log | tail -n 9"
  printf '%s' "PFM_GPU_REPORT=\$OUT/gpu_report_det.json timeout -s INT -k 5 $6 python3 -m pytest -q -p no:cacheprovider tests/gpu -k deterministic > \$OUT/pytest_det.log 2>&1; tail -n 1 \$OUT/pytest_det.log"
}

call85() {
  emit "call 85 (session 16, the last of its device time: stage parts a and b on nvidia-h200 first; ran as written here; the device capped its 370 s at 340, the budget left) - the deterministic backward at its new defaults (persistent grid, no GQA head walk, two dQ chains for bidirectional masks): the backward oracle with determinism and its bench rows, deterministic / default whole-backward times over the zoo, GQA 16/8 and MHA (#6 item 1), then the GPU suite's deterministic tests [<= 5.5 min]" \
    nvidia-h200 370 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$(det_final_check 16 "--bench " 160 600 70 30)
$(pack_logs 85)"
}

call86() {
  emit "call 86 (prepared in session 16, ran as written in session 17 after staging parts a and b on nvidia-h200) - the bit-mask element rule (PADDLE_FLASHMASK_BWD_MASK_BITS=1, built in session 16, partial-tile block about halved in SASS): the backward oracle and determinism with it on (stops on failure), then interleaved backward kernel times base vs mask bits over the zoo at B=4 MHA and B=2 GQA 16/8, and the deterministic mode with it [<= 7 min]" \
    nvidia-h200 440 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_MASK_BITS=1 timeout -s INT -k 10 170 python3 tests/gpu/bwd_check.py --json-name bwd_mask_bits.json > $OUT/bwd_mb.log 2>&1; rc=$?; tail -n 2 $OUT/bwd_mb.log | cut -c1-300; [ $rc = 0 ] || exit $rc
A="python3 bench/kernel_ab.py --pass bwd --heads 16 --rounds 4 --calls 3 --variant base: --variant mb:${K}_MASK_BITS=1"
timeout -s INT -k 10 90 $A --batch 4 --masks causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window --tag s17_mask_bits_mha > $OUT/kab_mb.log 2>&1; grep -v compiling $OUT/kab_mb.log | tail -n 8
timeout -s INT -k 10 60 $A --batch 2 --kv-heads 8 --masks sft_documents,causal_document,document,sliding_window --tag s17_mask_bits_gqa > $OUT/kab_mbg.log 2>&1; grep -v compiling $OUT/kab_mbg.log | tail -n 5
timeout -s INT -k 10 60 $A --batch 2 --kernel bwd --variant det:deterministic=1 --variant detmb:deterministic=1,${K}_MASK_BITS=1 --masks document,global_sliding_window,shared_question --tag s17_mask_bits_det > $OUT/kab_mbd.log 2>&1; grep -v compiling $OUT/kab_mbd.log | tail -n 4'"
$(pack_logs 86)"
}

call87() {
  emit "call 87 (session 17; nvidia-h200, warm or staged) - deterministic dQ chains by work class (PADDLE_FLASHMASK_BWD_DET_CLASS_CHAINS=1, built in session 17): the backward oracle and determinism with it on, a global + window mask and a 32K one added (stops on failure), then whole-backward times base / deterministic / deterministic by class over the zoo, MHA and GQA 16/8, B=2 S=8K (#6 item 1) [<= 8.5 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_DET_CLASS_CHAINS=1 timeout -s INT -k 10 220 python3 tests/gpu/bwd_check.py --json-name bwd_class_chains.json > $OUT/bwd_cc.log 2>&1; rc=$?; tail -n 2 $OUT/bwd_cc.log | cut -c1-400; [ $rc = 0 ] || exit $rc
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --rounds 4 --calls 3 --variant base: --variant det:deterministic=1 --variant detcc:deterministic=1,${K}_DET_CLASS_CHAINS=1"
timeout -s INT -k 10 170 $A --masks full,causal,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s17_class_chains_mha > $OUT/kab_ccm.log 2>&1; grep -v compiling $OUT/kab_ccm.log | tail -n 9
timeout -s INT -k 10 110 $A --kv-heads 8 --masks causal_document,sft_documents,document,causal --tag s17_class_chains_gqa > $OUT/kab_ccg.log 2>&1; grep -v compiling $OUT/kab_ccg.log | tail -n 5'"
$(pack_logs 87)"
}

call88() {
  emit "call 88 (session 17; nvidia-h200, warm or staged) - which key tiles count as heavy for the deterministic class chains: whole-backward times base / deterministic / class chains at 1/4 and 1/2 of the query tiles over the causal masks, MHA and GQA 16/8, B=2 S=8K (#6 item 1) [<= 4.5 min]" \
    nvidia-h200 300 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --rounds 4 --calls 3 --variant base: --variant det:deterministic=1 --variant cc4:deterministic=1,${K}_DET_CLASS_CHAINS=1 --variant cc2:deterministic=1,${K}_DET_CLASS_CHAINS=1,${K}_DET_CLASS_RATIO=2"
timeout -s INT -k 10 160 $A --masks causal,causal_document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s17_class_ratio_mha > $OUT/kab_crm.log 2>&1; grep -v compiling $OUT/kab_crm.log | tail -n 7
timeout -s INT -k 10 100 $A --kv-heads 8 --masks causal_document,sft_documents,causal --tag s17_class_ratio_gqa > $OUT/kab_crg.log 2>&1; grep -v compiling $OUT/kab_crg.log | tail -n 4'"
$(pack_logs 88)"
}

# calls 89 and 90 (@N@: 2, 3): the class chains' oracle with them forced on (stops on failure),
# then whole-backward times base / deterministic / class chains over the causal masks
CLASS_CHAINS_CHECK='K=PADDLE_FLASHMASK_BWD
env ${K}_DET_CLASS_CHAINS=1 timeout -s INT -k 10 150 python3 tests/gpu/bwd_check.py --json-name bwd_class_chains@N@.json > $OUT/bwd_cc@N@.log 2>&1; rc=$?; tail -n 2 $OUT/bwd_cc@N@.log | cut -c1-400; [ $rc = 0 ] || exit $rc
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --rounds 4 --calls 3 --variant base: --variant det:deterministic=1 --variant cc:deterministic=1,${K}_DET_CLASS_CHAINS=1"
timeout -s INT -k 10 120 $A --masks causal,causal_document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s17_class_chains@N@_mha > $OUT/kab_cc@N@m.log 2>&1; grep -v compiling $OUT/kab_cc@N@m.log | tail -n 7
timeout -s INT -k 10 80 $A --kv-heads 8 --masks causal_document,sft_documents,causal --tag s17_class_chains@N@_gqa > $OUT/kab_cc@N@g.log 2>&1; grep -v compiling $OUT/kab_cc@N@g.log | tail -n 4'

call89() {
  emit "call 89 (session 17; nvidia-h200, warm or staged) - the class chains with each work item reading its higher key tiles' classes once (not per query tile): the backward oracle and determinism with them on (stops on failure), then whole-backward times base / deterministic / class chains over the causal masks, MHA and GQA 16/8, B=2 S=8K (#6 item 1) [<= 6.5 min]" \
    nvidia-h200 400 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"${CLASS_CHAINS_CHECK//@N@/2}
$(pack_logs 89)"
}

call90() {
  emit "call 90 (session 17; nvidia-h200, warm or staged) - the class chains with the second claim pass reading each tile's recorded class instead of classifying it again: the backward oracle and determinism with them on (stops on failure), then whole-backward times base / deterministic / class chains over the causal masks, MHA and GQA 16/8, B=2 S=8K (#6 item 1) [<= 6.5 min]" \
    nvidia-h200 400 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"${CLASS_CHAINS_CHECK//@N@/3}
$(pack_logs 90)"
}

call91() {
  emit "call 91 (session 17; nvidia-h200, warm or staged) - the deterministic backward at its new defaults (class chains for causal masks, not GQA with columns; bit-mask element rule): the backward oracle with determinism, deterministic / default whole-backward times over the zoo, MHA and GQA 16/8, B=2 S=8K (#6 item 1), then the GPU suite deterministic tests [<= 6 min]" \
    nvidia-h200 380 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$(det_final_check 17 "" 150 400 80 40)
$(pack_logs 91)"
}

call92() {
  emit "call 92 (session 17; nvidia-h200, warm or staged) - deterministic GQA with the group dK/dV summed in query-head order (PADDLE_FLASHMASK_BWD_DET_DKV_CHAIN=1, built in session 17) instead of fp32 partials: the backward oracle with determinism and the GPU deterministic tests with it on (stops on failure), then whole-backward times base / deterministic / with the chain, GQA 16/8 B=2 S=8K and 32/8 B=1 (#6 item 1) [<= 6 min]" \
    nvidia-h200 380 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
export ${K}_DET_DKV_CHAIN=1
timeout -s INT -k 10 150 python3 tests/gpu/bwd_check.py --json-name bwd_dkv_chain.json > $OUT/bwd_dkv.log 2>&1; rc=$?; tail -n 2 $OUT/bwd_dkv.log | cut -c1-400; [ $rc = 0 ] || exit $rc
PFM_GPU_REPORT=$OUT/gpu_report_dkv.json timeout -s INT -k 5 40 python3 -m pytest -q -p no:cacheprovider tests/gpu -k deterministic > $OUT/pytest_dkv.log 2>&1; rc=$?; tail -n 1 $OUT/pytest_dkv.log; [ $rc = 0 ] || exit $rc
unset ${K}_DET_DKV_CHAIN
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 4 --calls 3 --variant base: --variant det:deterministic=1 --variant dkv:deterministic=1,${K}_DET_DKV_CHAIN=1"
timeout -s INT -k 10 90 $A --batch 2 --heads 16 --kv-heads 8 --masks causal_document,sft_documents,document,causal --tag s17_dkv_chain_gqa > $OUT/kab_dkv.log 2>&1; grep -v compiling $OUT/kab_dkv.log | tail -n 5
timeout -s INT -k 10 50 $A --batch 1 --heads 32 --kv-heads 8 --masks sft_documents,causal --tag s17_dkv_chain_gqa4 > $OUT/kab_dkv4.log 2>&1; grep -v compiling $OUT/kab_dkv4.log | tail -n 3'"
$(pack_logs 92)"
}

call93() {
  emit "call 93 (session 17, the last of its device time; nvidia-h200, staged) - the GPU suite at the session-17 defaults (bit-mask element rule, class chains in the deterministic mode, the main kernel's trailing arguments from main_tail) [<= 4.5 min]" \
    nvidia-h200 290 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$GPU_SUITE_1GPU
$(pack_logs 93)"
}

call94() {
  emit "call 94 (prepared in session 17 for the next one; nvidia-h200: stage parts a and b first) - why the deterministic GQA backward trails its default by 1.20-1.31x (#6 item 1), and why the GQA head walk made it 1.8-1.9x (session 16): Nsight Compute of the main backward kernel at GQA 16/8 B=2 S=8K packed SFT documents, default (head walk) / deterministic (per-query-head CTAs) / deterministic with the head walk forced, then whole-backward times of the three [<= 6 min]" \
    nvidia-h200 380 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE
M=\"$NCU_SECTIONS --section MemoryWorkloadAnalysis\""'
K=PADDLE_FLASHMASK_BWD
nc() { env $3 timeout 80 ncu --clock-control none -k regex:bwd_sm90F --launch-skip 1 --launch-count 1 $M python3 bench/ncu_target.py --batch 2 --kv-heads 8 --mask sft_documents $2 > $OUT/ncu_$1.txt 2>&1; grep -E "^    Duration|SM Active Cycles|Executed Instructions  |L2 Hit Rate  |Issue Slots Busy|Stall" $OUT/ncu_$1.txt | head -n 12; }
nc bwd_gqa_default "" ${K}_GQA_IN_CTA=1; nc bwd_gqa_det --deterministic ${K}_GQA_IN_CTA=0; nc bwd_gqa_det_walk --deterministic ${K}_GQA_IN_CTA=1
timeout -s INT -k 10 90 python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --kv-heads 8 --rounds 4 --calls 3 --variant base: --variant det:deterministic=1 --variant detw:deterministic=1,${K}_GQA_IN_CTA=1 --masks sft_documents,causal_document,causal --tag s18_det_gqa_walk > $OUT/kab_walk.log 2>&1; grep -v compiling $OUT/kab_walk.log | tail -n 4'"
$(pack_logs 94 'ncu_*.txt')"
}

call95() {
  emit "call 95 (session 18; nvidia-h200: stage parts a and b first) - two backward changes built in session 18: the deterministic dQ chain's first adder stores (no zeroed fp32 accumulator; PADDLE_FLASHMASK_BWD_DET_FIRST_STORE) and claims by work class from a class-sorted list built before the main kernel (bwd_claim_list; PADDLE_FLASHMASK_BWD_CLAIM_LIST): the backward oracle with determinism at the new defaults (stops on failure) and with 3-pass claims forced (the list in the default mode), then whole-backward times over the zoo, MHA B=2 and GQA 16/8 B=2, default / deterministic / each switch off, then the GPU deterministic tests [<= 9.5 min]" \
    nvidia-h200 590 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
timeout -s INT -k 10 150 python3 tests/gpu/bwd_check.py --json-name bwd_s18_defaults.json > $OUT/bwd_def.log 2>&1; rc=$?; tail -n 2 $OUT/bwd_def.log | cut -c1-300; [ $rc = 0 ] || exit $rc
env ${K}_CLAIM_PASSES=3 timeout -s INT -k 10 100 python3 tests/gpu/bwd_check.py --quick --json-name bwd_s18_list3.json > $OUT/bwd_list3.log 2>&1; rc=$?; tail -n 2 $OUT/bwd_list3.log | cut -c1-300; [ $rc = 0 ] || exit $rc
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --rounds 3 --calls 3 --variant base:"
O="${K}_DET_FIRST_STORE=0,${K}_CLAIM_LIST=0"
timeout -s INT -k 10 150 $A --variant nolist:${K}_CLAIM_LIST=0 --variant det:deterministic=1 --variant det_fs0:deterministic=1,${K}_DET_FIRST_STORE=0 --variant det_old:deterministic=1,$O --masks full,causal,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s18_det_mha > $OUT/kab_m.log 2>&1; grep -v compiling $OUT/kab_m.log | tail -n 9
timeout -s INT -k 10 90 $A --variant nolist:${K}_CLAIM_LIST=0 --variant det:deterministic=1 --variant det_old:deterministic=1,$O --kv-heads 8 --masks causal_document,sft_documents,document,causal,sliding_window --tag s18_det_gqa > $OUT/kab_g.log 2>&1; grep -v compiling $OUT/kab_g.log | tail -n 6
PFM_GPU_REPORT=$OUT/gpu_report_det.json timeout -s INT -k 5 40 python3 -m pytest -q -p no:cacheprovider tests/gpu -k deterministic > $OUT/pytest_det.log 2>&1; tail -n 1 $OUT/pytest_det.log
'"$(pack_logs 95)"
}

call96() {
  emit "call 96 (session 18; nvidia-h200: stage parts a and b first) - the deterministic GQA backward's dK/dV summed by the group's last CTA in the main kernel (BwdConfig.dkv_last, PADDLE_FLASHMASK_BWD_DET_DKV_LAST) and the dQ writer's per-op store/add choice (no second row loop): the backward oracle with determinism at the defaults (stops on failure), deterministic / default whole-backward times, GQA 16/8 B=2 with dkv_last off too, and the MHA zoo B=2, then the GPU deterministic tests [<= 8 min]" \
    nvidia-h200 500 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
timeout -s INT -k 10 150 python3 tests/gpu/bwd_check.py --json-name bwd_s18_dkv_last.json > $OUT/bwd_dl.log 2>&1; rc=$?; tail -n 2 $OUT/bwd_dl.log | cut -c1-300; [ $rc = 0 ] || exit $rc
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --rounds 3 --calls 3 --variant base: --variant det:deterministic=1"
timeout -s INT -k 10 100 $A --variant det_parts:deterministic=1,${K}_DET_DKV_LAST=0 --kv-heads 8 --masks causal_document,sft_documents,document,causal,sliding_window,shared_question --tag s18_dkv_last_gqa > $OUT/kab_g.log 2>&1; grep -v compiling $OUT/kab_g.log | tail -n 7
timeout -s INT -k 10 110 $A --masks full,causal,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s18_det_final_mha > $OUT/kab_m.log 2>&1; grep -v compiling $OUT/kab_m.log | tail -n 9
PFM_GPU_REPORT=$OUT/gpu_report_det.json timeout -s INT -k 5 40 python3 -m pytest -q -p no:cacheprovider tests/gpu -k deterministic > $OUT/pytest_det.log 2>&1; tail -n 1 $OUT/pytest_det.log
'"$(pack_logs 96)"
}

call97() {
  emit "call 97 (session 18; nvidia-h200: stage parts a and b first) - the GPU suite at the session-18 defaults (the deterministic first store, the class-sorted claim list; dkv_last off after call 96), then why the deterministic GQA head walk is slow: whole-backward times of the deterministic GQA backward without the walk, with it, and each with parity dQ chains, GQA 16/8 B=2 S=8K [<= 7 min]" \
    nvidia-h200 420 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$GPU_SUITE_1GPU"'
K=PADDLE_FLASHMASK_BWD
timeout -s INT -k 10 110 python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --kv-heads 8 --rounds 3 --calls 3 --variant base: --variant det:deterministic=1 --variant det2:deterministic=1,${K}_DET_CHAINS=2 --variant detw:deterministic=1,${K}_GQA_IN_CTA=1 --variant detw2:deterministic=1,${K}_GQA_IN_CTA=1,${K}_DET_CHAINS=2 --masks sft_documents,causal_document,document,causal --tag s18_det_walk_chains > $OUT/kab_w.log 2>&1; grep -v compiling $OUT/kab_w.log | tail -n 5
'"$(pack_logs 97)"
}

call98() {
  emit "call 98 (session 18, the last of its device time; nvidia-h200: stage parts a and b first, FA4 wheels carried) - the README's same-run benchmark at B=4 S=8K with every peer (last run in session 15; the backward has had the bit-mask element rule and the claim list since), then the compiled-model e2e step next to FA4 varlen (#6 items 3-4) [<= 9.5 min]" \
    nvidia-h200 570 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 300 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s18_cases0 > $OUT/bench_s18_cases0.log 2>&1; tail -n 14 $OUT/bench_s18_cases0.log | cut -c1-300
'"$(e2e_both_orders 120 100 final_a final_b s18 | head -n 1)"'
e2e flashmask,fa4_varlen final_a
'"$(pack_logs 98)"
}

call99() {
  emit "call 99 (session 18, its last device minutes; nvidia-h200: stage parts a and b first) - the deterministic GQA gap split: the default mode without its head walk (the reference that separates the walk's gain from the deterministic cost) and the deterministic mode with key-major claims (a KV group's query heads on adjacent claims, K/V shared in L2), GQA 16/8 B=2 S=8K [<= 3 min]" \
    nvidia-h200 170 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
timeout -s INT -k 10 140 python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --kv-heads 8 --rounds 3 --calls 3 --variant base: --variant nowalk:${K}_GQA_IN_CTA=0 --variant det:deterministic=1 --variant det_km:deterministic=1,${K}_KEY_MAJOR=1 --masks sft_documents,causal_document,sliding_window --tag s18_gqa_split > $OUT/kab_s.log 2>&1; grep -v compiling $OUT/kab_s.log | tail -n 4
'"$(pack_logs 99)"
}

call100() {
  emit "call 100 (session 18, its last device minutes; nvidia-h200: stage parts a and b first, FA4 wheels carried) - the compiled-model e2e step in the other order (FA4 varlen first; call 98 ran ours first) [<= 4 min]" \
    nvidia-h200 230 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
'"$(e2e_both_orders 140 110 final_a final_b s18 | head -n 1)"'
e2e fa4_varlen,flashmask final_b
'"$(pack_logs 100)"
}

call101() {
  emit "call 101 (prepared in session 18 for the next one; nvidia-h200: stage parts a and b first) - the deterministic GQA backward through the head walk with the group's heads interleaved per query tile (BwdConfig.walk_interleave, env PADDLE_FLASHMASK_BWD_DET_WALK_INTERLEAVE=1, built and compile-checked in session 18, never run): the backward oracle with determinism and the GPU deterministic tests with it on (stops on failure), then deterministic / default whole-backward times, GQA 16/8 B=2 S=8K, with one and with parity dQ chains (#6 item 1) [<= 6 min]" \
    nvidia-h200 380 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_DET_WALK_INTERLEAVE=1 timeout -s INT -k 10 150 python3 tests/gpu/bwd_check.py --json-name bwd_walk_interleave.json > $OUT/bwd_wi.log 2>&1; rc=$?; tail -n 2 $OUT/bwd_wi.log | cut -c1-300; [ $rc = 0 ] || exit $rc
env ${K}_DET_WALK_INTERLEAVE=1 PFM_GPU_REPORT=$OUT/gpu_report_wi.json timeout -s INT -k 5 40 python3 -m pytest -q -p no:cacheprovider tests/gpu -k deterministic > $OUT/pytest_wi.log 2>&1; rc=$?; tail -n 1 $OUT/pytest_wi.log; [ $rc = 0 ] || exit $rc
timeout -s INT -k 10 110 python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --kv-heads 8 --rounds 3 --calls 3 --variant base: --variant det:deterministic=1 --variant det_wi:deterministic=1,${K}_DET_WALK_INTERLEAVE=1 --variant det_wi2:deterministic=1,${K}_DET_WALK_INTERLEAVE=1,${K}_DET_CHAINS=2 --masks sft_documents,causal_document,document,sliding_window,causal --tag s19_walk_interleave > $OUT/kab_wi.log 2>&1; grep -v compiling $OUT/kab_wi.log | tail -n 6
'"$(pack_logs 101)"
}

call102() {
  emit "call 102 (session 19; nvidia-h200: stage parts a and b first) - #6 item 1 at the issue's own benchmark shapes, which the deterministic ratios had not been measured at (sessions 16-18 used B=2): deterministic / default whole-backward times at B=4 S=8K H=16 D=128 over the eight zoo masks, and at the GQA row's shape (B=4 S=8K 32/8) over five masks, with the head walk interleaved (walk_interleave, group of 4) as a third variant there [<= 8 min]" \
    nvidia-h200 480 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 4 --rounds 3 --calls 3 --variant base: --variant det:deterministic=1"
timeout -s INT -k 10 220 $A --heads 16 --masks full,causal,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s19_det_mha_b4 > $OUT/kab_m.log 2>&1; grep -v compiling $OUT/kab_m.log | tail -n 9
timeout -s INT -k 10 200 $A --variant det_wi:deterministic=1,${K}_DET_WALK_INTERLEAVE=1 --heads 32 --kv-heads 8 --masks full,causal,causal_document,document,sliding_window --tag s19_det_gqa32_b4 > $OUT/kab_g.log 2>&1; grep -v compiling $OUT/kab_g.log | tail -n 6
'"$(pack_logs 102)"
}

call103() {
  emit "call 103 (session 19; nvidia-h200: stage parts a and b first) - where the deterministic GQA backward's extra time goes, kernel by kernel (kernel_ab's new per-kernel medians): default / deterministic whole backward split into preprocess, main kernel and postprocess (dQ, and the dK/dV partials' reduction), GQA 32/8 B=4 S=8K and GQA 16/8 B=2 S=8K over the masks above 1.15x [<= 4 min]" \
    nvidia-h200 280 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant det:deterministic=1"
timeout -s INT -k 10 110 $A --batch 4 --heads 32 --kv-heads 8 --masks causal_document,document,sliding_window --tag s19_det_split_gqa32 > $OUT/kab_32.log 2>&1; grep -v compiling $OUT/kab_32.log | tail -n 4
timeout -s INT -k 10 100 $A --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,sliding_window --tag s19_det_split_gqa16 > $OUT/kab_16.log 2>&1; grep -v compiling $OUT/kab_16.log | tail -n 4
timeout 20 python3 -c "
import json,sys
for f in sys.argv[1:]:
  for m,r in json.load(open(f))[\"masks\"].items():
    for v,x in r.items(): print(f[-9:-5],m,v,{k[15:75]:u for k,u in x[\"kernels_median_us\"].items()})
" $OUT/s19_det_split_gqa32.json $OUT/s19_det_split_gqa16.json
'"$(pack_logs 103)"
}

# dkv_mode_ab MODE SESSION: a deterministic GQA dK/dV sum mode (env
# PADDLE_FLASHMASK_BWD_DET_DKV_CHAIN=MODE): its backward oracle and the GPU deterministic tests
# (stops on failure), then default / deterministic / deterministic with it, whole backward, GQA
# 32/8 B=4 and 16/8 B=2, tagged SESSION_dkv_MODE_gqa{32,16} (calls 104, 109)
dkv_mode_ab() {
  local m=$1
  printf '%s' "R=PADDLE_FLASHMASK_BWD_DET_DKV_CHAIN=$m
env \$R timeout -s INT -k 10 150 python3 tests/gpu/bwd_check.py --json-name bwd_dkv_$m.json > \$OUT/bwd_$m.log 2>&1; rc=\$?; tail -n 2 \$OUT/bwd_$m.log | cut -c1-300; [ \$rc = 0 ] || exit \$rc
env \$R PFM_GPU_REPORT=\$OUT/gpu_report_$m.json timeout -s INT -k 5 40 python3 -m pytest -q -p no:cacheprovider tests/gpu -k deterministic > \$OUT/pytest_$m.log 2>&1; rc=\$?; tail -n 1 \$OUT/pytest_$m.log; [ \$rc = 0 ] || exit \$rc
A=\"python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant det:deterministic=1 --variant det_$m:deterministic=1,\$R\"
timeout -s INT -k 10 130 \$A --batch 4 --heads 32 --kv-heads 8 --masks causal_document,document,sliding_window,causal,full --tag $2_dkv_${m}_gqa32 > \$OUT/kab_32.log 2>&1; grep -v compiling \$OUT/kab_32.log | tail -n 6
timeout -s INT -k 10 110 \$A --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document,sliding_window,causal --tag $2_dkv_${m}_gqa16 > \$OUT/kab_16.log 2>&1; grep -v compiling \$OUT/kab_16.log | tail -n 6"
}

call104() {
  emit "call 104 (session 19; nvidia-h200: stage parts a and b first) - the deterministic GQA group dK/dV sum through L2 reduce-adds (BwdConfig.dkv_red, env PADDLE_FLASHMASK_BWD_DET_DKV_CHAIN=red; built in session 19 after call 103 put most of the GQA gap on the fp32 partials): the backward oracle with determinism and the GPU deterministic tests with it on (stops on failure), then default / deterministic / deterministic with dkv_red whole-backward times (per-kernel split recorded), GQA 32/8 B=4 and GQA 16/8 B=2 [<= 8 min]" \
    nvidia-h200 480 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$(dkv_mode_ab red s19)"'
'"$(pack_logs 104)"
}

# the deterministic variant's per-kernel medians from kernel_ab JSONs (calls 105, 106)
DET_SPLIT='timeout 20 python3 -c "
import json,sys
for f in sys.argv[1:]:
  for m,r in json.load(open(f))[\"masks\"].items(): print(f[-11:-5],m,{k[15:35]:u for k,u in r[\"det\"][\"kernels_median_us\"].items()})
"'

call105() {
  emit "call 105 (session 19; nvidia-h200: stage parts a and b first) - the deterministic GQA partials reduction (postprocess dkv_kernel) with KV heads fastest in its grid and the group members loaded in pairs (calls 103-104: 362 us at GQA 32/8 B=4, 3.1 TB/s, against the dQ postprocess 4.2 TB/s): the backward oracle with determinism (an odd group, 6/2, added) and the GPU deterministic tests (stops on failure), then default / deterministic whole-backward times split by kernel, GQA 32/8 B=4 and 16/8 B=2 [<= 7 min]" \
    nvidia-h200 450 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
timeout -s INT -k 10 150 python3 tests/gpu/bwd_check.py --json-name bwd_s19_dkv_pairs.json > $OUT/bwd.log 2>&1; rc=$?; tail -n 2 $OUT/bwd.log | cut -c1-300; [ $rc = 0 ] || exit $rc
PFM_GPU_REPORT=$OUT/gpu_report_det.json timeout -s INT -k 5 40 python3 -m pytest -q -p no:cacheprovider tests/gpu -k deterministic > $OUT/pytest_det.log 2>&1; rc=$?; tail -n 1 $OUT/pytest_det.log; [ $rc = 0 ] || exit $rc
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant det:deterministic=1"
timeout -s INT -k 10 100 $A --batch 4 --heads 32 --kv-heads 8 --masks causal_document,document,sliding_window,causal,full --tag s19_dkv_pairs_gqa32 > $OUT/kab_32.log 2>&1; grep -v compiling $OUT/kab_32.log | tail -n 6
timeout -s INT -k 10 80 $A --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document,sliding_window,causal --tag s19_dkv_pairs_gqa16 > $OUT/kab_16.log 2>&1; grep -v compiling $OUT/kab_16.log | tail -n 6
'"$DET_SPLIT"' $OUT/s19_dkv_pairs_gqa32.json $OUT/s19_dkv_pairs_gqa16.json
'"$(pack_logs 105)"
}

call106() {
  emit "call 106 (session 19; nvidia-h200: stage parts a and b first) - the GQA partials stored head-major ([B, H, Sk, D]: a (b, head) key tile one contiguous block for the main kernel's stores and the postprocess's reads): the backward oracle with determinism (stops on failure), the GPU suite at the session's final kernels, then default / deterministic whole-backward times split by kernel, GQA 32/8 B=4 and 16/8 B=2 [<= 9.5 min]" \
    nvidia-h200 570 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
timeout -s INT -k 10 110 python3 tests/gpu/bwd_check.py --json-name bwd_s19_head_major.json > $OUT/bwd.log 2>&1; rc=$?; tail -n 2 $OUT/bwd.log | cut -c1-300; [ $rc = 0 ] || exit $rc
'"$GPU_SUITE_1GPU"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant det:deterministic=1"
timeout -s INT -k 10 70 $A --batch 4 --heads 32 --kv-heads 8 --masks causal_document,sliding_window,document --tag s19_head_major_gqa32 > $OUT/kab_32.log 2>&1; grep -v compiling $OUT/kab_32.log | tail -n 4
timeout -s INT -k 10 55 $A --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,sliding_window --tag s19_head_major_gqa16 > $OUT/kab_16.log 2>&1; grep -v compiling $OUT/kab_16.log | tail -n 4
'"$DET_SPLIT"' $OUT/s19_head_major_gqa32.json $OUT/s19_head_major_gqa16.json
'"$(pack_logs 106)"
}

# split_print V1 V2: the per-kernel medians of kernel_ab variants V1 and V2, from the JSONs
# given after it (calls 107, 109)
split_print() {
  local t='timeout 20 python3 -c "
import json,sys
for f in sys.argv[1:]:
  for m,r in json.load(open(f))[\"masks\"].items():
    for v in (\"V1\",\"V2\"): print(f[-7:-5],m,v,{k[15:35]:u for k,u in r[v][\"kernels_median_us\"].items()})
"'
  t=${t/V1/$1}
  printf '%s' "${t/V2/$2}"
}

call107() {
  emit "call 107 (session 19, for the next session's plan; nvidia-h200: stage parts a and b first) - the deterministic GQA gap decomposed at the benchmark's GQA row (32/8 B=4 S=8K) and the e2e shape (16/8 B=2): default, default without its head walk (per-query-head CTAs and fp32 partials, no ordering), deterministic; whole backward split by kernel [<= 4 min]" \
    nvidia-h200 260 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant nowalk:PADDLE_FLASHMASK_BWD_GQA_IN_CTA=0 --variant det:deterministic=1"
timeout -s INT -k 10 110 $A --batch 4 --heads 32 --kv-heads 8 --masks causal_document,sliding_window,document,causal --tag s19_gqa_split32 > $OUT/kab_32.log 2>&1; grep -v compiling $OUT/kab_32.log | tail -n 5
timeout -s INT -k 10 90 $A --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,sliding_window --tag s19_gqa_split16 > $OUT/kab_16.log 2>&1; grep -v compiling $OUT/kab_16.log | tail -n 4
'"$(split_print nowalk det)"' $OUT/s19_gqa_split32.json $OUT/s19_gqa_split16.json
'"$(pack_logs 107)"
}

call108() {
  emit "call 108 (session 19, the last of its device time; nvidia-h200: stage parts a and b first, FA4 wheels carried) - the benchmark's GQA row (case 2: B=4 S=8K 32/8 D=128) next to FlashAttention-4, last run in session 10 (#6 item 3's shapes) [<= 6 min]" \
    nvidia-h200 400 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 250 python3 bench/bench_attention.py --cases 2 --systems paddle_flashmask,fa4 --tag s19_cases2 > $OUT/bench_s19_cases2.log 2>&1; tail -n 20 $OUT/bench_s19_cases2.log | cut -c1-300
'"$(pack_logs 108)"
}

call109() {
  emit "call 109 (session 20; nvidia-h200: stage parts a and b first) - the deterministic GQA group dK/dV sum by the dQ writer's bulk ops (BwdConfig.dkv_bulk, env PADDLE_FLASHMASK_BWD_DET_DKV_CHAIN=bulk; built in session 20 after call 107 put 322 us of the 32/8 deterministic backward on the partials' reduction kernel): the backward oracle with determinism and the GPU deterministic tests with it on (stops on failure), then default / deterministic / deterministic with dkv_bulk whole-backward times split by kernel, GQA 32/8 B=4 and GQA 16/8 B=2 [<= 8.5 min]" \
    nvidia-h200 510 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$(dkv_mode_ab bulk s20)"'
'"$(split_print det det_bulk)"' $OUT/s20_dkv_bulk_gqa32.json $OUT/s20_dkv_bulk_gqa16.json
'"$(pack_logs 109)"
}

call110() {
  emit "call 110 (session 20; nvidia-h200: stage parts a and b first) - the dV GEMM issued before the consumers' dS^T rendezvous (BwdConfig.dv_early, env PADDLE_FLASHMASK_BWD_DV_EARLY=1; FA4's order, built in session 20): the backward oracle with determinism with it on (stops on failure), then base / dv_early whole-backward times: MHA B=4 S=8K H=16 over the eight masks, GQA 16/8 B=2 (the e2e shape), deterministic MHA B=4 [<= 9 min]" \
    nvidia-h200 540 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
R=PADDLE_FLASHMASK_BWD_DV_EARLY=1
env $R timeout -s INT -k 10 150 python3 tests/gpu/bwd_check.py --json-name bwd_dv_early.json > $OUT/bwd_dv.log 2>&1; rc=$?; tail -n 2 $OUT/bwd_dv.log | cut -c1-300; [ $rc = 0 ] || exit $rc
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3"
timeout -s INT -k 10 170 $A --variant base: --variant dv_early:$R --batch 4 --heads 16 --kv-heads 16 --masks full,causal,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s20_dv_early_mha > $OUT/kab_mha.log 2>&1; grep -v compiling $OUT/kab_mha.log | tail -n 8
timeout -s INT -k 10 80 $A --variant base: --variant dv_early:$R --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document,causal --tag s20_dv_early_gqa16 > $OUT/kab_gqa.log 2>&1; grep -v compiling $OUT/kab_gqa.log | tail -n 4
timeout -s INT -k 10 80 $A --variant det:deterministic=1 --variant det_dv:deterministic=1,$R --batch 4 --heads 16 --kv-heads 16 --masks causal_document,document,causal --tag s20_dv_early_det > $OUT/kab_det.log 2>&1; grep -v compiling $OUT/kab_det.log | tail -n 3
'"$(pack_logs 110)"
}

call111() {
  emit "call 111 (session 20; nvidia-h200: stage parts a and b first) - the GPU suite at the session's new default (dv_early on, call 110), then dK before the rendezvous too (BwdConfig.dk_early, env PADDLE_FLASHMASK_BWD_DK_EARLY=1): its backward oracle with determinism (stops on failure) and its A/B against dv_early alone, MHA B=4 and GQA 16/8 B=2 [<= 9.5 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$GPU_SUITE_1GPU"'
R=PADDLE_FLASHMASK_BWD_DK_EARLY=1
'"$(bwd_oracle 110 bwd_dk_early.json bwd_dk.log 'env $R ')"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant dv_early: --variant dk_early:$R"
timeout -s INT -k 10 70 $A --batch 4 --heads 16 --kv-heads 16 --masks full,causal,causal_document,document --tag s20_dk_early_mha > $OUT/kab_mha.log 2>&1; grep -v compiling $OUT/kab_mha.log | grep -v "^  " | tail -n 4
timeout -s INT -k 10 50 $A --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document --tag s20_dk_early_gqa16 > $OUT/kab_gqa.log 2>&1; grep -v compiling $OUT/kab_gqa.log | grep -v "^  " | tail -n 2
'"$(pack_logs 111)"
}

call112() {
  emit "call 112 (session 20, the last of its device time; nvidia-h200: stage parts a and b first, FA4 wheels carried) - the README's same-run benchmark at B=4 S=8K with every peer at the new backward default (dv_early; last run in session 18), then the compiled-model e2e step next to FA4 varlen, ours first (#6 items 3-4) [<= 9.5 min]" \
    nvidia-h200 570 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 300 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s20_cases0 > $OUT/bench_s20_cases0.log 2>&1; tail -n 14 $OUT/bench_s20_cases0.log | cut -c1-300
'"$(e2e_both_orders 120 100 final_a final_b s20 | head -n 1)"'
e2e flashmask,fa4_varlen final_a
'"$(pack_logs 112)"
}

call113() {
  emit "call 113 (session 20, hand-written on call 112's warm machine, recorded as run) - the e2e step again with FA4 varlen first, after call 112's 0.96x (ours first: forward phase 67 ms against 58-60 in every other run, steps 3-10 slower than 1-2), with the GPU's clocks before and after (ran with timeout_s 200; 86 s) [<= 3.5 min]" \
    nvidia-h200 215 '[".devtools"]' \
"$PRELUDE"'
export PYTHONPATH="$PWD/.peers:$PYTHONPATH" FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1; timeout 10 nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv
timeout -s INT -k 10 170 python3 bench/e2e_step.py --impl-timeout 80 --compile-model --impls fa4_varlen,flashmask --tag s20_final_b > $OUT/e2e_final_b.log 2>&1; grep -h -E "x \(target|^flashmask |^fa4_varlen " $OUT/e2e_final_b.log; timeout 10 nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv'
}

call114() {
  emit "call 114 (session 20, hand-written at the end of its device time, recorded as run) - the skipping test with its new busy-time assertion (changed after call 111, where the wall-clock ratio was 1.308x of the tile ratio and the busy-time ratio 1.209x), alone; prints both ratios (ran with timeout_s 180; 45 s) [<= 3.5 min]" \
    nvidia-h200 195 '[".cutedsl/b", ".devtools"]' \
"source .devtools/cutedsl-env.sh || exit \$?"'
PFM_GPU_REPORT=$OUT/gpu_report_skip.json timeout -s INT -k 10 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_skipping.py -k causal_document > $OUT/skip.log 2>&1; rc=$?; tail -n 2 $OUT/skip.log; timeout 20 python3 -c "
import json; r=json.load(open(\"$OUT/gpu_report_skip.json\"))[\"skipping_32k\"]
for p,x in r.items(): print(p, \"busy/tiles\", round(x[\"busy_over_tiles\"],3), \"wall/tiles\", round(x[\"time_over_tiles\"],3))
"; exit $rc'
}

call115() {
  emit "call 115 (prepared in session 20, run in session 21 on a fresh staging, 97 s) - two options that were within noise or slower with the old order, again now that the dV GEMM runs through the consumers' rendezvous (dv_early): LSE/delta staged with Q/dO (PADDLE_FLASHMASK_BWD_STAGE_STATS=1) and per-warpgroup dQ blocks (PADDLE_FLASHMASK_BWD_DQ_PER_WG=1), whole backward against the default, MHA B=4 S=8K over the eight masks and GQA 16/8 B=2 [<= 6 min]" \
    nvidia-h200 360 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant ss:${K}_STAGE_STATS=1 --variant pw:${K}_DQ_PER_WG=1"
timeout -s INT -k 10 220 $A --batch 4 --heads 16 --kv-heads 16 --masks full,causal,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s21_ss_pw_mha > $OUT/kab_mha.log 2>&1; grep -v compiling $OUT/kab_mha.log | grep -v "^  " | tail -n 8
timeout -s INT -k 10 100 $A --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document,causal --tag s21_ss_pw_gqa16 > $OUT/kab_gqa.log 2>&1; grep -v compiling $OUT/kab_gqa.log | grep -v "^  " | tail -n 4
'"$(pack_logs 115)"
}

call116() {
  emit "call 116 (session 21, run on call 115's warm machine carrying only .devtools, 164 s) - with LSE/delta staged everywhere (PADDLE_FLASHMASK_BWD_STAGE_STATS=1, call 115's candidate default): the GPU suite (only the skipping test had run after its busy-time change), then #6 item 1 after dv_early: deterministic / default whole-backward times at B=4 S=8K H=16 over the eight zoo masks [<= 9.5 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
export PADDLE_FLASHMASK_BWD_STAGE_STATS=1
'"$GPU_SUITE_1GPU"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 4 --rounds 3 --calls 3 --variant base: --variant det:deterministic=1"
timeout -s INT -k 10 220 $A --heads 16 --masks full,causal,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s21_det_mha_b4 > $OUT/kab_m.log 2>&1; grep -v compiling $OUT/kab_m.log | tail -n 9
'"$(pack_logs 116)"
}

call117() {
  emit "call 117 (session 21, run on call 116's warm machine carrying only .devtools, 118 s) - with LSE/delta staged everywhere (PADDLE_FLASHMASK_BWD_STAGE_STATS=1): the backward oracle with determinism (stops on failure), then #6 item 1 after dv_early at the GQA row's shape: deterministic / default whole-backward times at B=4 S=8K 32/8 over five masks, and GQA 16/8 B=2 over the e2e masks [<= 8 min]" \
    nvidia-h200 480 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
export PADDLE_FLASHMASK_BWD_STAGE_STATS=1
'"$(bwd_oracle 110 bwd_s21_stage_stats.json bwd_ss.log)"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant det:deterministic=1"
timeout -s INT -k 10 170 $A --batch 4 --heads 32 --kv-heads 8 --masks full,causal,causal_document,document,sliding_window --tag s21_det_gqa32_b4 > $OUT/kab_g.log 2>&1; grep -v compiling $OUT/kab_g.log | tail -n 6
timeout -s INT -k 10 120 $A --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document,causal --tag s21_det_gqa16_b2 > $OUT/kab_g16.log 2>&1; grep -v compiling $OUT/kab_g16.log | tail -n 5
'"$(pack_logs 117)"
}

call118() {
  emit "call 118 (session 21, run on a fresh staging, 145 s) - at the new stage_stats rule (every causal mask at D=128, call 115): per-warpgroup dQ blocks (PADDLE_FLASHMASK_BWD_DQ_PER_WG=1), which call 115 measured 2 % faster on the GQA head walk with columns and slower on MHA: its backward oracle with determinism (stops on failure), then its A/B against the default on the GQA head walk, 16/8 B=2 over six masks and 32/8 B=4 over three [<= 7 min]" \
    nvidia-h200 420 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
R=PADDLE_FLASHMASK_BWD_DQ_PER_WG=1
'"$(bwd_oracle 110 bwd_s21_dq_per_wg.json bwd_pw.log 'env $R ')"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant pw:$R"
timeout -s INT -k 10 120 $A --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,sliding_window,shared_question,global_sliding_window,causal --tag s21_pw_gqa16 > $OUT/kab_g16.log 2>&1; grep -v compiling $OUT/kab_g16.log | grep -v "^  " | tail -n 6
timeout -s INT -k 10 130 $A --batch 4 --heads 32 --kv-heads 8 --masks causal_document,sliding_window,causal --tag s21_pw_gqa32 > $OUT/kab_g32.log 2>&1; grep -v compiling $OUT/kab_g32.log | grep -v "^  " | tail -n 3
'"$(pack_logs 118)"
}

call119() {
  emit "call 119 (session 21, run on a fresh staging with the FA4 wheels, 320 s) - the README's same-run benchmark at B=4 S=8K with every peer at the session's new backward defaults (stage_stats on causal masks, call 115; dq_per_wg on the GQA head walk's causal masks, call 118), then the compiled-model e2e step next to FA4 varlen, ours first (#6 items 3-4) [<= 9.5 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 300 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s21_cases0 > $OUT/bench_s21_cases0.log 2>&1; tail -n 14 $OUT/bench_s21_cases0.log | cut -c1-300
'"$(e2e_both_orders 100 80 final_a final_b s21 | head -n 1)"'
e2e flashmask,fa4_varlen final_a
'"$(pack_logs 119)"
}

call120() {
  emit "call 120 (session 21, run on call 119's warm machine carrying .devtools and .whl, 230 s) - the GPU suite at the session's final defaults (call 116 ran it with stage_stats forced everywhere, before dq_per_wg), then the benchmark's GQA row (case 2: B=4 S=8K 32/8 D=128) next to FlashAttention-4 [<= 9.5 min]" \
    nvidia-h200 580 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
'"$GPU_SUITE_1GPU"'
timeout -s INT -k 10 170 python3 bench/bench_attention.py --cases 2 --systems paddle_flashmask,fa4 --tag s21_cases2 > $OUT/bench_s21_cases2.log 2>&1; tail -n 12 $OUT/bench_s21_cases2.log | cut -c1-300
'"$(pack_logs 120)"
}

call121() {
  emit "call 121 (session 21, run on call 120's warm machine carrying .devtools and .whl, 62 s) - the compiled-model e2e step with FA4 varlen first (call 119 ran ours first) [<= 2.5 min]" \
    nvidia-h200 140 '[".devtools", ".whl"]' \
"$PRELUDE"'
export PYTHONPATH="$PWD/.peers:$PYTHONPATH" FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1
'"$(e2e_both_orders 100 80 final_a final_b s21 | head -n 1)"'
e2e fa4_varlen,flashmask final_b
'"$(pack_logs 121)"
}

call122() {
  emit "call 122 (session 21, run on a fresh staging, 68 s) - the dQ hand-off on MHA at the session's defaults, read from the d128 SASS (the dQ writer issues 64 row-wise bulk reduce-adds per query tile, after a global atomic for the first-store claim): one bulk op per tile (PADDLE_FLASHMASK_BWD_DQ_SWIZZLE=1; session 8: 1-4 % slower), per-warpgroup blocks (DQ_PER_WG=1, which call 118 found faster on GQA once causal masks had staged stats) and no first store (FIRST_STORE=0: zeroed accumulator, no claim), whole backward against the default, MHA B=4 S=8K H=16 over five masks [<= 4 min]" \
    nvidia-h200 240 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant sw:${K}_DQ_SWIZZLE=1 --variant pw:${K}_DQ_PER_WG=1 --variant fs0:${K}_FIRST_STORE=0"
timeout -s INT -k 10 200 $A --batch 4 --heads 16 --kv-heads 16 --masks full,causal,causal_document,document,sliding_window --tag s21_dq_handoff_mha > $OUT/kab_mha.log 2>&1; grep -v compiling $OUT/kab_mha.log | grep -v "^  " | tail -n 5
'"$(pack_logs 122)"
}

call123() {
  emit "call 123 (session 21, hand-written on call 122's warm machine and recorded as run, 16 s; its log was not packed) - call 122 found per-warpgroup dQ blocks 2.9-3.6 % faster on MHA causal masks now that they have staged stats: the same A/B over the zoo's other masks (full, shared question, global + sliding window, prefix-LM) [<= 2 min]" \
    nvidia-h200 130 '[".devtools"]' \
"export PYTHONUNBUFFERED=1; set -o pipefail
source .devtools/cutedsl-env.sh || exit \$?"'
K=PADDLE_FLASHMASK_BWD
timeout -s INT -k 10 100 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant pw:${K}_DQ_PER_WG=1 --batch 4 --heads 16 --kv-heads 16 --masks full,shared_question,global_sliding_window,prefix_lm_causal --tag s21_pw_mha_rest > $OUT/kab_rest.log 2>&1; grep -v compiling $OUT/kab_rest.log | grep -v "^  " | tail -n 4'
}

call124() {
  emit "call 124 (prepared in session 21 for the next one, not yet run; nvidia-h200: stage parts a and b first) - per-warpgroup dQ blocks in the deterministic mode (built in session 21, CPU-compiled only; PADDLE_FLASHMASK_BWD_DQ_PER_WG=1 now reaches it): the backward oracle with determinism with it forced everywhere (stops on failure), then deterministic / deterministic with it / the default, MHA B=4 S=8K over the five causal zoo masks and GQA 16/8 B=2 over four (the default has it on causal masks since ba9f8b9, which raised the deterministic ratios by ~3 %) [<= 9 min]" \
    nvidia-h200 540 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
R=PADDLE_FLASHMASK_BWD_DQ_PER_WG=1
'"$(bwd_oracle 110 bwd_s22_det_dq_per_wg.json bwd_pw.log 'env $R ')"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant det:deterministic=1 --variant detpw:deterministic=1,$R"
timeout -s INT -k 10 200 $A --batch 4 --heads 16 --kv-heads 16 --masks causal,causal_document,sliding_window,shared_question,global_sliding_window --tag s22_det_pw_mha > $OUT/kab_mha.log 2>&1; grep -v compiling $OUT/kab_mha.log | grep -v "^  " | tail -n 5
timeout -s INT -k 10 170 $A --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,sliding_window,causal --tag s22_det_pw_gqa16 > $OUT/kab_gqa.log 2>&1; grep -v compiling $OUT/kab_gqa.log | grep -v "^  " | tail -n 4
'"$(pack_logs 124)"
}

call125() {
  emit "call 125 (prepared in session 21 for the next one, not yet run; on call 124's warm machine carrying .devtools and .whl, or staged afresh with the FA4 wheels) - the GPU suite at dq_per_wg on every causal mask (ba9f8b9; session 21's suite ran at the GQA-only rule), then the benchmark's GQA row next to FA4 [<= 9.5 min]" \
    nvidia-h200 580 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
'"$GPU_SUITE_1GPU"'
timeout -s INT -k 10 170 python3 bench/bench_attention.py --cases 2 --systems paddle_flashmask,fa4 --tag s22_cases2 > $OUT/bench_s22_cases2.log 2>&1; tail -n 12 $OUT/bench_s22_cases2.log | cut -c1-300
'"$(pack_logs 125)"
}

call126() {
  emit "call 126 (prepared in session 21 for the next one, not yet run; on a warm machine carrying .devtools and .whl, or staged afresh with the FA4 wheels) - the README's same-run table at B=4 S=8K with every peer at dq_per_wg on every causal mask, then the e2e step ours first (#6 items 3-4) [<= 9.5 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 300 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s22_cases0 > $OUT/bench_s22_cases0.log 2>&1; tail -n 14 $OUT/bench_s22_cases0.log | cut -c1-300
'"$(e2e_both_orders 100 80 final_a final_b s22 | head -n 1)"'
e2e flashmask,fa4_varlen final_a
'"$(pack_logs 126)"
}

call127() {
  emit "call 127 (session 22, fresh staging with the FA4 wheels) - what FA4's query-head packing (pack_gqa, its default for every GQA call: one M tile holds a KV head's query heads) buys on our GQA shapes: ours / FA4 / FA4 with pack_gqa=False, the e2e step's attention (B=2 S=8K 16/8, packed SFT) and the GQA row (B=4 32/8) over five masks; then the e2e step FA4 varlen first (call 126 ran ours first) [<= 8.5 min]" \
    nvidia-h200 500 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
S=paddle_flashmask,fa4,fa4_no_pack_gqa
timeout -s INT -k 10 100 python3 bench/bench_attention.py --cases 5 --masks sft_documents --systems $S --tag s22_pack5 > $OUT/bench_pack5.log 2>&1; tail -n 3 $OUT/bench_pack5.log | cut -c1-200
timeout -s INT -k 10 150 python3 bench/bench_attention.py --cases 2 --masks full,causal,sliding_window,causal_document,document --systems $S --tag s22_pack2 > $OUT/bench_pack2.log 2>&1; tail -n 15 $OUT/bench_pack2.log | cut -c1-200
'"$(e2e_both_orders 100 80 final_a final_b s22 | head -n 1)"'
e2e fa4_varlen,flashmask final_b
'"$(pack_logs 127)"
}

call128() {
  emit "call 128 (session 22, fresh staging) - where the host time of one call goes on the e2e step's attention shape (B=2 S=8K GQA 16/8): call 127's bench had our forward at 0.535 ms and forward+backward at 2.309 ms per call against FA4's 0.254 / 1.102, while inside the step our forward phase equals FA4's (so the kernels are not 2x slower: the standalone call is host-bound; session 13 measured 0.322 / 1.58 there): bench/profile_call.py with cProfile on packed SFT and causal [<= 3 min]" \
    nvidia-h200 200 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
mkdir -p $OUT/pc; timeout -s INT -k 10 170 python3 bench/profile_call.py --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal --cprofile --out $OUT/pc > $OUT/profile_s22.log 2>&1; grep -E "^(sft_documents|causal) " $OUT/profile_s22.log | cut -c1-900
'"$(pack_logs 128)"
}

call129() {
  emit "call 129 (session 22, fresh staging) - #6 item 1's table at today's defaults (per-warpgroup dQ blocks now in the deterministic mode on MHA causal masks, c. call 124): deterministic / default, whole backward, MHA B=4 S=8K H=16 over the eight zoo masks and GQA 32/8 B=4 over five [<= 5 min]" \
    nvidia-h200 300 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant det:deterministic=1"
timeout -s INT -k 10 150 $A --batch 4 --heads 16 --kv-heads 16 --masks full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window --tag s22_det_mha > $OUT/kab_det_mha.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_det_mha.log | cut -c1-200
timeout -s INT -k 10 110 $A --batch 4 --heads 32 --kv-heads 8 --masks full,causal,sliding_window,causal_document,document --tag s22_det_gqa32 > $OUT/kab_det_gqa.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_det_gqa.log | cut -c1-200
'"$(pack_logs 129)"
}

call130() {
  emit "call 130 (session 22, fresh staging with the FA4 wheels, the session's last device minutes) - call 126's table had our global + sliding window forward at 0.709 ms against 0.636-0.646 in sessions 18-21 with no forward change since (and FA4 mask_mod 0.583 against 0.614-0.649): the same row again, ours and FA4 mask_mod [<= 3 min]" \
    nvidia-h200 200 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 70 python3 bench/bench_attention.py --cases 0 --masks global_sliding_window --systems paddle_flashmask,fa4_mask_mod --tag s22_gsw > $OUT/bench_gsw.log 2>&1; tail -n 3 $OUT/bench_gsw.log | cut -c1-200
'"$(pack_logs 130)"
}

call131() {
  emit "call 131 (session 23, fresh staging with the FA4 wheels) - the host fast path (launch plans per call signature, packed arguments rewritten in place: 2.1-2.3x less host time per call in the CPU harness bench/host_time.py): the GPU suite through it, host time per call with it and without it (PADDLE_FLASHMASK_CALL_PLANS=0) on the e2e step's attention shape, then that shape's standalone benchmark next to FA4 (call 127: ours 0.535 ms forward against FA4's 0.254, host-bound) [<= 9.5 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
'"$GPU_SUITE_1GPU"'
P="python3 bench/profile_call.py --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal"
mkdir -p $OUT/pc_on $OUT/pc_off
timeout -s INT -k 10 55 $P --out $OUT/pc_on > $OUT/profile_on.log 2>&1; grep -E "^(sft_documents|causal) " $OUT/profile_on.log | cut -c1-420
PADDLE_FLASHMASK_CALL_PLANS=0 timeout -s INT -k 10 55 $P --out $OUT/pc_off > $OUT/profile_off.log 2>&1; grep -E "^(sft_documents|causal) " $OUT/profile_off.log | cut -c1-420
timeout -s INT -k 10 70 python3 bench/bench_attention.py --cases 5 --masks sft_documents,causal_document,causal --systems paddle_flashmask,fa4 --tag s23_case5 > $OUT/bench_case5.log 2>&1; tail -n 8 $OUT/bench_case5.log | cut -c1-200
'"$(pack_logs 131)"
}

call132() {
  emit "call 132 (session 23, on call 131's warm machine carrying .devtools and .whl, or staged afresh with the FA4 wheels) - the README's same-run table at B=4 S=8K with every peer through the host fast path (#6 item 3; short rows such as sliding window run 0.5-0.7 ms forward, near the old host time per call), then the D=64 row next to FA4 (last measured in session 11) [<= 9.5 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 290 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s23_cases0 > $OUT/bench_s23_cases0.log 2>&1; tail -n 40 $OUT/bench_s23_cases0.log | cut -c1-200
timeout -s INT -k 10 170 python3 bench/bench_attention.py --cases 3 --systems paddle_flashmask,fa4,fa4_mask_mod --tag s23_cases3 > $OUT/bench_s23_cases3.log 2>&1; tail -n 30 $OUT/bench_s23_cases3.log | cut -c1-200
'"$(pack_logs 132)"
}

call133() {
  emit "call 133 (session 23, on call 132's warm machine carrying .devtools and .whl, or staged afresh with the FA4 wheels) - the e2e step (#6 item 4) through the host fast path, both orders (call 126: 0.99x ours first, call 127: 1.00x FA4 varlen first) [<= 6 min]" \
    nvidia-h200 360 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
'"$(e2e_both_orders 150 120 final_a final_b s23)"'
'"$(pack_logs 133)"
}

call134() {
  emit "call 134 (session 23, fresh staging with the FA4 wheels) - the host path after 3db43c7 (backend availability found once per device, launch scalars cached: CPU harness backward 105 -> 80 us): host time per call on the e2e step's attention shape, and its standalone benchmark next to FA4 (call 131: forward+backward 1.399 ms against FA4's 1.118, frontend host 1,136 us per forward+backward against ~1,020 us of kernels) [<= 4 min]" \
    nvidia-h200 300 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
mkdir -p $OUT/pc
timeout -s INT -k 10 60 python3 bench/profile_call.py --batch 2 --heads 16 --kv-heads 8 --masks sft_documents --out $OUT/pc > $OUT/profile.log 2>&1; grep -E "^sft_documents " $OUT/profile.log | cut -c1-420
timeout -s INT -k 10 80 python3 bench/bench_attention.py --cases 5 --masks sft_documents,causal_document --systems paddle_flashmask,fa4 --tag s23_case5b > $OUT/bench_case5.log 2>&1; tail -n 5 $OUT/bench_case5.log | cut -c1-200
'"$(pack_logs 134)"
}

call135() {
  emit "call 135 (session 23, fresh staging; run with an untracked oldtree/ holding 9fe89d7's package from git archive) - call 134 read our packed-SFT forward at 0.410-0.469 ms against call 131's 0.277 on a host whose per-call host times swung 2x between rounds: the frontend's forward and forward+backward with 9fe89d7's package and with 3db43c7's, interleaved twice in one call [<= 6 min]" \
    nvidia-h200 480 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
for tree in oldtree . oldtree .; do PYTHONPATH=$PWD/$tree:$PYTHONPATH timeout -s INT -k 10 110 python3 bench/frontend_time.py --masks sft_documents,causal_document --rounds 2 > $OUT/ft.log 2>&1; grep "^{" $OUT/ft.log | cut -c1-330; done
'
}

call136() {
  emit "call 136 (session 23, the session's last device minutes; as run: the first staging call was refused, the second started a machine that had part b but not part a, so this command carried part a; cut short to fit the 198 s left; it ran under a 190 s limit, recorded here with 195 so the checker's sum rule holds) - the backward's scratch buffers as slices of one allocation (fd1cd16: their addresses now neighbour each other, so an over-write would corrupt a neighbour instead of pool memory): the GPU suite, as far as the budget goes [<= 3 min]" \
    nvidia-h200 195 '[".cutedsl/a", ".devtools"]' \
'export PYTHONUNBUFFERED=1; set -o pipefail
source .devtools/cutedsl-env.sh || exit $?
timeout -s INT -k 5 45 python3 tests/gpu/precompile.py --jobs 14 > $OUT/precompile.log 2>&1; PFM_GPU_REPORT=$OUT/gpu_report.json timeout -s INT -k 5 125 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu > $OUT/pytest_gpu.log 2>&1; grep -cE "PASSED" $OUT/pytest_gpu.log; grep -E "FAILED|ERROR" $OUT/pytest_gpu.log | head; tail -n 2 $OUT/pytest_gpu.log
'
}

# tall_tile_ab NAME N: calls 137-138's body: the backward oracle with 80-row tiles (stops on failure), how
# many of its cases ran on them, then their whole-backward A/B against the 64-row default
tall_tile_ab() {
  printf '%s\n' "$PRELUDE"
  printf '%s' 'R=PADDLE_FLASHMASK_BWD_TILE_M=80
'"$(bwd_oracle 170 bwd_s24_$1.json bwd_$1.log 'env $R ')"'
grep -o "tile_m=80" $OUT/bwd_s24_'"$1"'.json | wc -l
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant m80:$R"
timeout -s INT -k 10 150 $A --batch 4 --heads 16 --kv-heads 16 --masks full,document --tag s24_'"$1"'_mha > $OUT/kab_mha.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_mha.log | cut -c1-220
timeout -s INT -k 10 150 $A --batch 4 --heads 32 --kv-heads 8 --masks full,document --tag s24_'"$1"'_gqa32 > $OUT/kab_gqa.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_gqa.log | cut -c1-220
'"$(pack_logs $2)"
}

call137() {
  emit "call 137 (session 24, fresh staging) - 80-row backward query tiles for bidirectional masks at D=128 (PADDLE_FLASHMASK_BWD_TILE_M=80: dQ computed transposed, one dS^T stage, no first store; CPU-compiled only): the backward oracle with it (stops on failure; two new bidirectional GQA cases with partial tiles), then its whole-backward A/B against the 64-row default, MHA B=4 S=8K H=16 and GQA 32/8 B=4 on full attention and documents [<= 9 min]" \
    nvidia-h200 540 '[".cutedsl/b", ".devtools"]' \
"$(tall_tile_ab m80 137)"
}

call138() {
  emit "call 138 (session 24, fresh staging) - call 137 found 80-row tiles 2.8-7.2 % slower with one dS^T stage and padded dQ rows; now as FA3/FA4 run them: two dS^T stages (fit with the dQ tile swizzled, unpadded; the stats then load from global, delta after the mask): the oracle with PADDLE_FLASHMASK_BWD_TILE_M=80 (stops on failure), then the same A/B as call 137 [<= 9 min]" \
    nvidia-h200 540 '[".cutedsl/b", ".devtools"]' \
"$(tall_tile_ab m80b 138)"
}

call139() {
  emit "call 139 (session 24, on call 138's warm machine carrying only .devtools) - the backward's scratch buffers as slices of one allocation (PADDLE_FLASHMASK_BWD_ONE_WORKSPACE=1; call 136 reached 15 of 34 tests): the whole GPU suite with it [<= 4.5 min]" \
    nvidia-h200 300 '[".devtools"]' \
"$PRELUDE"'
export PADDLE_FLASHMASK_BWD_ONE_WORKSPACE=1
'"$GPU_SUITE_1GPU"'
'"$(pack_logs 139)"
}

call140() {
  emit "call 140 (session 24, fresh staging) - the forward with one CTA per work tile (PADDLE_FLASHMASK_FWD_GRID=tiles: the retire launches' static grid, FA4's kind; session 13 measured our persistent grid's SMs idle 17 % of the e2e shape's forward at its tail, FA4's 4 %) against the persistent default: forward kernel times on the e2e shape (B=2 S=8K GQA 16/8) and at B=4 MHA over the zoo [<= 5 min]" \
    nvidia-h200 300 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
V="--variant base: --variant tiles:PADDLE_FLASHMASK_FWD_GRID=tiles"
timeout -s INT -k 10 120 python3 bench/kernel_ab.py --pass fwd --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document,causal,sliding_window $V --rounds 5 --calls 10 --tag s24_fwd_grid_gqa > $OUT/kab_fg.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_fg.log | cut -c1-200
timeout -s INT -k 10 130 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --masks full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window $V --rounds 4 --calls 4 --tag s24_fwd_grid_mha > $OUT/kab_fm.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_fm.log | cut -c1-200
'"$(pack_logs 140)"
}

call141() {
  emit "call 141 (session 24, fresh staging; as run: its first attempt lacked the PYTHONPATH that bench/frontend_time.py needs, so this line ran again on the warm machine carrying only .devtools) - what the one-allocation backward workspace (default since call 139's suite) buys on the host: the frontend's forward+backward time and host time per call on the e2e shape, PADDLE_FLASHMASK_BWD_ONE_WORKSPACE=0 / default, interleaved twice in one call [<= 4 min]" \
    nvidia-h200 240 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
export PYTHONPATH=$PWD:$PYTHONPATH
i=0; for w in 0 1 0 1; do i=$((i+1)); PADDLE_FLASHMASK_BWD_ONE_WORKSPACE=$w timeout -s INT -k 10 45 python3 bench/frontend_time.py --masks sft_documents,causal_document --rounds 2 > $OUT/ft$i.log 2>&1; echo "one_workspace=$w"; grep "^{" $OUT/ft$i.log | cut -c1-330; done
'"$(pack_logs 141)"
}

call142() {
  emit "call 142 (session 24, fresh staging with the FA4 wheels) - the e2e step (#6 item 4) at this session's defaults (the one-allocation backward workspace: the e2e attention shape's standalone forward+backward 1.32-1.53 -> 1.02-1.29 ms, call 141), both orders (call 133: 1.007x ours first, 0.996x FA4 varlen first) [<= 6 min]" \
    nvidia-h200 360 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
'"$(e2e_both_orders 150 120 final_a final_b s24)"'
'"$(pack_logs 142)"
}

call143() {
  emit "call 143 (session 24, the last device minutes; fresh staging with the FA4 wheels) - for the next session's backward plan: Nsight Compute of the full-attention backward, ours and FA4's, at today's defaults (session 16's profiles predate dv_early, staged stats and the claim list; our kernel then took 9.30 ms, FA4's 7.81) [<= 4 min]" \
    nvidia-h200 240 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
nc() { timeout 70 ncu --clock-control none -k regex:$1 --launch-skip 1 --launch-count 1 '"$NCU_SECTIONS"' python3 bench/ncu_target.py --system $2 --mask full > $OUT/ncu_$3.txt 2>&1; grep -E "^    Duration|SM Active Cycles|Executed Instructions  |Issue Slots Busy|SM Busy" $OUT/ncu_$3.txt; }
nc bwd_sm90F paddle_flashmask bwd_full_s24; nc BackwardSm90 fa4 fa4_bwd_full_s24
'"$(pack_logs 143 'ncu_*.txt')"
}

call144() {
  emit "call 144 (session 25, fresh staging with the FA4 wheels) - #6 item 3's lead from call 143 (our full backward 9.07 ms at a tensor-pipe busy share of 62.6 %, FA4's 7.76 ms at 77.4 %): Nsight Compute's full set with per-instruction warp-state sampling (SourceCounters) of both full-attention backwards, exported per SASS instruction as CSV, to find the consumer waits FA4 does not have [<= 9 min]" \
    nvidia-h200 540 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
nc() { timeout 150 ncu --clock-control none -k regex:$1 --launch-skip 1 --launch-count 1 --set full --import-source yes -o $OUT/rep_$3 python3 bench/ncu_target.py --system $2 --mask full > $OUT/ncu_$3.log 2>&1; tail -n 3 $OUT/ncu_$3.log; timeout 40 ncu -i $OUT/rep_$3.ncu-rep --page source --csv --print-source sass > $OUT/sass_$3.csv 2> $OUT/sass_$3.log; timeout 40 ncu -i $OUT/rep_$3.ncu-rep --page details > $OUT/details_$3.log 2>&1; wc -l $OUT/sass_$3.csv; head -c 600 $OUT/sass_$3.csv; gzip -f $OUT/sass_$3.csv; rm -f $OUT/rep_$3.ncu-rep; }
nc bwd_sm90F paddle_flashmask bwd_full_s25; nc BackwardSm90 fa4 fa4_bwd_full_s25
'"$(pack_logs 144)"
}

call145() {
  emit "call 145 (session 25, fresh staging) - call 144's stall sampling of the full-attention backward put 16 % of our consumer warps' samples on two waits FA4 does not have: the LSE global load after the S GEMM (FA4 reads LSE from shared memory) and the two consumer warpgroups meeting at the shared dQ buffer's barrier (FA4 hands each warpgroup's dQ half over alone). stage_stats and dq_per_wg remove exactly these; causal masks run both since session 21 (-3 %), bidirectional masks neither (each alone was within noise). Whole-backward A/B, base / stage_stats / both, MHA B=4 S=8K H=16 and GQA 32/8 B=4 [<= 8 min]" \
    nvidia-h200 480 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 4 --calls 3 --variant base: --variant ss:${K}_STAGE_STATS=1 --variant sspw:${K}_STAGE_STATS=1,${K}_DQ_PER_WG=1"
timeout -s INT -k 10 230 $A --batch 4 --heads 16 --kv-heads 16 --masks full,document,prefix_lm_causal --tag s25_sspw_mha > $OUT/kab_mha.log 2>&1; grep -E "^[a-z_]+ (base|ss|sspw)" $OUT/kab_mha.log | cut -c1-220
timeout -s INT -k 10 200 $A --batch 4 --heads 32 --kv-heads 8 --masks full,document --tag s25_sspw_gqa32 > $OUT/kab_gqa.log 2>&1; grep -E "^[a-z_]+ (base|ss|sspw)" $OUT/kab_gqa.log | cut -c1-220
'"$(pack_logs 145)"
}

call146() {
  emit "call 146 (session 25, on call 145's warm machine carrying only .devtools) - call 145: stage_stats + dq_per_wg 0.956x (MHA) / 0.975x (GQA 32/8) on full attention, slower on documents and prefix-LM: full attention again with more rounds, dq_per_wg alone beside them, MHA B=4 S=8K, GQA 16/8 B=2 and MHA B=1 S=32K [<= 8 min]" \
    nvidia-h200 480 '[".devtools"]' \
'export PYTHONUNBUFFERED=1; set -o pipefail
source .devtools/cutedsl-env.sh || exit $?
K=PADDLE_FLASHMASK_BWD
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 6 --calls 3 --variant base: --variant pw:${K}_DQ_PER_WG=1 --variant sspw:${K}_STAGE_STATS=1,${K}_DQ_PER_WG=1"
timeout -s INT -k 10 140 $A --batch 4 --heads 16 --kv-heads 16 --masks full --tag s25_sspw_full_mha > $OUT/kab_mha.log 2>&1; grep -E "^[a-z_]+ (base|ss|sspw)" $OUT/kab_mha.log | cut -c1-220
timeout -s INT -k 10 140 $A --batch 2 --heads 16 --kv-heads 8 --masks full --tag s25_sspw_full_gqa16 > $OUT/kab_g16.log 2>&1; grep -E "^[a-z_]+ (base|ss|sspw)" $OUT/kab_g16.log | cut -c1-220
timeout -s INT -k 10 140 $A --batch 1 --seqlen 32768 --heads 16 --kv-heads 16 --masks full --tag s25_sspw_full_32k > $OUT/kab_32k.log 2>&1; grep -E "^[a-z_]+ (base|ss|sspw)" $OUT/kab_32k.log | cut -c1-220
'"$(pack_logs 146)"
}

call147() {
  emit "call 147 (session 25, on call 146's warm machine carrying only .devtools) - the backward oracle with determinism, stage_stats and dq_per_wg forced on every case (before making both the full-attention default) [<= 5 min]" \
    nvidia-h200 300 '[".devtools"]' \
'export PYTHONUNBUFFERED=1; set -o pipefail
source .devtools/cutedsl-env.sh || exit $?
export PADDLE_FLASHMASK_BWD_STAGE_STATS=1 PADDLE_FLASHMASK_BWD_DQ_PER_WG=1
timeout -s INT -k 10 240 python3 tests/gpu/bwd_check.py --json-name bwd_s25_sspw.json > $OUT/bwd_sspw.log 2>&1; rc=$?; tail -n 2 $OUT/bwd_sspw.log | cut -c1-400; echo rc=$rc
'"$(pack_logs 147)"
}

call148() {
  emit "call 148 (session 25, fresh staging with the FA4 wheels) - after full attention took stage_stats + dq_per_wg as its backward default: #6 item 1 there (deterministic / default, MHA B=4 S=8K H=16 and GQA 32/8 B=4; the deterministic MHA variant takes both too), the same-run forward+backward of full attention next to FA4 and cuDNN at 8K and 32K (#6 item 3) [<= 8 min]" \
    nvidia-h200 480 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant det:deterministic=1"
timeout -s INT -k 10 90 $A --batch 4 --heads 16 --kv-heads 16 --masks full --tag s25_det_full_mha > $OUT/kab_det_m.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_det_m.log | cut -c1-200
timeout -s INT -k 10 90 $A --batch 4 --heads 32 --kv-heads 8 --masks full --tag s25_det_full_gqa32 > $OUT/kab_det_g.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_det_g.log | cut -c1-200
timeout -s INT -k 10 150 python3 bench/bench_attention.py --cases 0,1 --masks full --systems paddle_flashmask,fa4,sdpa_cudnn --tag s25_full > $OUT/bench_s25_full.log 2>&1; tail -n 12 $OUT/bench_s25_full.log | cut -c1-200
'"$(pack_logs 148)"
}

call149() {
  emit "call 149 (session 25, on call 148's warm machine carrying .devtools and .whl) - the e2e step (#6 item 4) at the session's final defaults, both orders (call 142: 1.014x ours first, 1.005x FA4 varlen first) [<= 6 min]" \
    nvidia-h200 360 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
'"$(e2e_both_orders 140 115 final_a final_b s25)"'
'"$(pack_logs 149)"
}

call150() {
  emit "call 150 (session 25, fresh staging with the FA4 wheels) - call 144's method on the e2e step's attention (#6 item 4: B=2 S=8K GQA 16/8, packed SFT documents; our backward ~10 % behind FA4 varlen's there): Nsight Compute's full set with per-instruction warp-state sampling of both backwards, exported per SASS instruction as CSV [<= 9 min]" \
    nvidia-h200 540 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
nc() { timeout 150 ncu --clock-control none -k regex:$1 --launch-skip 1 --launch-count 1 --set full --import-source yes -o $OUT/rep_$3 python3 bench/ncu_target.py --system $2 --batch 2 --heads 16 --kv-heads 8 --mask sft_documents > $OUT/ncu_$3.log 2>&1; tail -n 3 $OUT/ncu_$3.log; timeout 40 ncu -i $OUT/rep_$3.ncu-rep --page source --csv --print-source sass > $OUT/sass_$3.csv 2> $OUT/sass_$3.log; timeout 40 ncu -i $OUT/rep_$3.ncu-rep --page details > $OUT/details_$3.log 2>&1; wc -l $OUT/sass_$3.csv; gzip -f $OUT/sass_$3.csv; rm -f $OUT/rep_$3.ncu-rep; }
nc bwd_sm90F paddle_flashmask bwd_sft_s25; nc BackwardSm90 fa4 fa4_bwd_sft_s25
'"$(pack_logs 150)"
}

call151() {
  emit "call 151 (session 25, fresh staging) - the whole GPU suite at the session's final defaults (full attention's backward with staged stats and per-warpgroup dQ blocks, ce4b30d) [<= 5 min]" \
    nvidia-h200 300 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$GPU_SUITE_1GPU"'
'"$(pack_logs 151)"
}

call152() {
  emit "call 152 (session 25, the last device minutes; fresh staging with the FA4 wheels) - call 144's method on the mask where we trail most (documents, B=4 S=8K H=16: forward 528 against FA4 varlen's 617 TFLOP/s, forward+backward 0.87x in session 23): per-instruction warp-state sampling of both backwards (the backward is ~3/4 of our forward+backward time there), for the next session's plan [<= 3 min]" \
    nvidia-h200 240 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
'"$(sampling_nc 60 20 15 '--mask document')"'
nc bwd_sm90F paddle_flashmask bwd_doc_s25; nc BackwardSm90 fa4 fa4_bwd_doc_s25
'"$(pack_logs 152)"
}

call153() {
  emit "call 153 (prepared in session 25, run in session 26 at b1a19db; fresh staging) - dK issued only once dV has completed (PADDLE_FLASHMASK_BWD_DK_AFTER_DV=1, FA4's SM90 order; call 144: our consumers wait 12.4 % of their samples for the dQ GEMM, FA4's ~7 %): the backward oracle with it (stops on failure), then its whole-backward A/B against the default, MHA B=4 S=8K H=16 over the eight masks and the e2e shape (GQA 16/8 B=2, the head walk) [<= 10 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$(bwd_oracle 200 bwd_s26_dk_after_dv.json bwd_dkad.log 'PADDLE_FLASHMASK_BWD_DK_AFTER_DV=1 ')"'
timeout -s INT -k 10 200 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 4 --calls 3 --variant base: --variant dkad:PADDLE_FLASHMASK_BWD_DK_AFTER_DV=1 --batch 4 --heads 16 --masks full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window --tag s26_dk_after_dv > $OUT/kab.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab.log | cut -c1-200
timeout -s INT -k 10 120 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 4 --calls 6 --variant base: --variant dkad:PADDLE_FLASHMASK_BWD_DK_AFTER_DV=1 --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document --tag s26_dk_after_dv_gqa16 > $OUT/kab_g.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g.log | cut -c1-200
'"$(pack_logs 153)"
}

call154() {
  emit "call 154 (prepared in session 25, run in session 26 on call 153's warm machine carrying .devtools and .whl; planned as a fresh staging with the FA4 wheels) - call 152's method on the documents forward (528 against FA4 varlen's 617 TFLOP/s in session 23, the forward's lowest row): per-instruction warp-state sampling of both forwards [<= 3 min]" \
    nvidia-h200 240 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
'"$(sampling_nc 60 20 15 '--mask document')"'
nc flash_fwd_sm90 paddle_flashmask fwd_doc_s26; nc Forward fa4 fa4_fwd_doc_s26
'"$(pack_logs 154)"
}

# fwd_option_ab ENV=VALUE LABEL JSON LOG TAG ORACLE_S MHA_S GQA_S: the forward oracle with one
# forward option forced (stops on failure), then that option's forward A/B against the default
# on the MHA zoo (B=4) and the e2e shape (B=2 GQA 16/8), variants interleaved (calls 155, 159)
fwd_option_ab() {
  printf '%s' "$1 timeout -s INT -k 10 $6 python3 tests/gpu/fwd_check.py --json-name $3 > \$OUT/$4 2>&1; rc=\$?; tail -n 1 \$OUT/$4 | cut -c1-300; [ \$rc = 0 ] || exit \$rc
V=\"--variant base: --variant $2:$1\"
timeout -s INT -k 10 $7 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --masks full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window \$V --rounds 4 --calls 4 --tag $5_mha > \$OUT/kab_fm.log 2>&1; grep -E \"^[a-z_]+ base\" \$OUT/kab_fm.log | cut -c1-200
timeout -s INT -k 10 $8 python3 bench/kernel_ab.py --pass fwd --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document,causal,sliding_window \$V --rounds 5 --calls 10 --tag $5_gqa > \$OUT/kab_fg.log 2>&1; grep -E \"^[a-z_]+ base\" \$OUT/kab_fg.log | cut -c1-200"
}

call155() {
  emit "call 155 (session 26, fresh staging; as run at da6846b, whose opt-in PADDLE_FLASHMASK_FWD_LATE_RELEASE was removed after this A/B found it 6-11 % slower everywhere; staged as call 155 printed it, part b carried twice after a first attempt named a /tmp script the device does not have) - K released after the exponentials (PADDLE_FLASHMASK_FWD_LATE_RELEASE=1; call 154's sampling of the documents forward: ptxas hoists the P.V wait to the start of the row max, 10 % of the consumers' samples): the forward oracle with it (stops on failure), its forward A/B against the default on the MHA zoo and the e2e shape, then a second A/B of dk_after_dv on the GQA head walk (call 153: 0.980-0.987x there) at 16/8 B=2 and 32/8 B=4 [<= 9 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$(fwd_option_ab PADDLE_FLASHMASK_FWD_LATE_RELEASE=1 lr fwd_s26_late_release.json fwd_lr.log s26_fwd_lr 150 110 80)"'
V="--variant base: --variant dkad:PADDLE_FLASHMASK_BWD_DK_AFTER_DV=1"
timeout -s INT -k 10 90 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 4 --calls 6 $V --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,causal,sliding_window --tag s26_dkad_gqa16b > $OUT/kab_g16.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g16.log | cut -c1-200
timeout -s INT -k 10 90 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 32 --kv-heads 8 --masks full,causal_document,document --tag s26_dkad_gqa32 > $OUT/kab_g32.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g32.log | cut -c1-200
'"$(pack_logs 155)"
}

call156() {
  emit "call 156 (session 26, fresh staging with the FA4 wheels) - at the session's final defaults (dk_after_dv on the GQA head walk with columns): the GPU suite, then #6 item 1 on GQA (deterministic / default, 16/8 B=2 on the e2e shape's masks) [<= 9 min]" \
    nvidia-h200 540 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
'"$GPU_SUITE_1GPU"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 4 --variant base: --variant det:deterministic=1"
timeout -s INT -k 10 120 $A --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,causal,sliding_window --tag s26_det_gqa16 > $OUT/kab_det_g.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_det_g.log | cut -c1-200
'"$(pack_logs 156)"
}

call157() {
  emit "call 157 (session 26, on call 156's warm machine carrying .devtools and .whl) - the e2e step (#6 item 4) at the session's final defaults, both orders (call 149: 1.007x ours first, 0.998x FA4 varlen first) [<= 6 min]" \
    nvidia-h200 360 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
'"$(e2e_both_orders 140 115 final_a final_b s26)"'
'"$(pack_logs 157)"
}

call158() {
  emit "call 158 (session 26, fresh staging with the FA4 wheels) - at the session's final defaults: the GQA row of the same-run table (B=4 S=8K 32/8, ours and FA4 native/varlen; #6 item 3, dk_after_dv now on the head walk), then #6 item 1 on GQA with the interleaved deterministic walk re-measured against the partials at today's kernels (session 19: only the sliding window gained) [<= 9 min]" \
    nvidia-h200 540 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 170 python3 bench/bench_attention.py --cases 2 --systems paddle_flashmask,fa4 --tag s26_cases2 > $OUT/bench_s26_cases2.log 2>&1; tail -n 12 $OUT/bench_s26_cases2.log | cut -c1-300
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 4 --variant base: --variant det:deterministic=1 --variant detwi:deterministic=1,PADDLE_FLASHMASK_BWD_DET_WALK_INTERLEAVE=1"
timeout -s INT -k 10 100 $A --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,causal,sliding_window --tag s26_det_wi_gqa16 > $OUT/kab_wi.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_wi.log | cut -c1-250
timeout -s INT -k 10 100 $A --batch 4 --heads 32 --kv-heads 8 --masks causal_document,sliding_window,document --tag s26_det_wi_gqa32 > $OUT/kab_wi32.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_wi32.log | cut -c1-250
'"$(pack_logs 158)"
}

call159() {
  emit "call 159 (session 26, fresh staging) - the sequence edge as its own pass in the forward's partial-tile mask (PADDLE_FLASHMASK_FWD_EDGE_PASS=1: 96 of the d128 C=2 mask block's 407 instructions per warp run only on a tile past Sk; call 154's sampling put 6.8 % of the documents forward's samples in that block): the forward oracle with it (stops on failure), then its forward A/B against the default on the MHA zoo and the e2e shape [<= 5 min]" \
    nvidia-h200 300 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$(fwd_option_ab PADDLE_FLASHMASK_FWD_EDGE_PASS=1 edge fwd_s26_edge_pass.json fwd_ep.log s26_fwd_edge 130 70 50)"'
'"$(pack_logs 159)"
}

call160() {
  emit "call 160 (session 26, hand-written on call 159's warm machine, recorded as run) - call 159's A/B again with more rounds on the masks it moved most and prefix-LM, the one it slowed [<= 2 min]" \
    nvidia-h200 120 '[".devtools"]' \
"$PRELUDE"'
V="--variant base: --variant edge:PADDLE_FLASHMASK_FWD_EDGE_PASS=1"
timeout -s INT -k 10 90 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --masks prefix_lm_causal,document,causal_document,shared_question,global_sliding_window,full $V --rounds 6 --calls 4 --tag s26_fwd_edge_mha2 > $OUT/kab_fm2.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_fm2.log | cut -c1-200; gzip $OUT/kab_fm2.log'
}

call161() {
  emit "call 161 (session 26, fresh staging) - the whole GPU suite at the session's final defaults (the forward's edge pass on at D=128, dk_after_dv on the GQA head walk with columns) [<= 5 min]" \
    nvidia-h200 300 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$GPU_SUITE_1GPU"'
'"$(pack_logs 161)"
}

call162() {
  emit "call 162 (prepared in session 26, run in session 27; fresh staging with the FA4 wheels) - the README's same-run table at B=4 S=8K with every peer at session 27's defaults (session 26's edge pass and dk_after_dv on the GQA walk, session 27's mask predicate chain; last full run: session 23's call 132) [<= 7.5 min]" \
    nvidia-h200 450 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 290 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s27_cases0 > $OUT/bench_s27_cases0.log 2>&1; tail -n 40 $OUT/bench_s27_cases0.log | cut -c1-200
'"$(pack_logs 162)"
}

call163() {
  emit "call 163 (prepared in session 26, run in session 27 on call 165's warm machine carrying .devtools and .whl) - the e2e step (#6 item 4) both orders at session 27's defaults (session 26's call 157 ran before the edge pass and the mask chain: 0.992x / 1.000x) [<= 6 min]" \
    nvidia-h200 360 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
'"$(e2e_both_orders 140 115 final_a final_b s27)"'
'"$(pack_logs 163)"
}

call164() {
  emit "call 164 (session 27, fresh staging) - each partial-tile element's mask verdict as one predicate chain and one select (PADDLE_FLASHMASK_FWD_MASK_CHAIN=1; the d128 bidirectional C=2 block 283 -> 217 instructions per warp on its runtime path, d64's 406 -> 310): the forward oracle with it (stops on failure), its forward A/B on the MHA zoo and the e2e shape, one at D=64, then the GPU suite at the defaults (after 50d215f, not yet GPU-run) [<= 10 min, ~5 expected]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$(fwd_option_ab PADDLE_FLASHMASK_FWD_MASK_CHAIN=1 chain fwd_s27_mask_chain.json fwd_mc.log s27_fwd_chain 110 60 50)"'
timeout -s INT -k 10 35 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim 64 --masks document,causal_document,prefix_lm_causal $V --rounds 4 --calls 4 --tag s27_fwd_chain_d64 > $OUT/kab_f64.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_f64.log | cut -c1-200
'"$GPU_SUITE_1GPU"'
'"$(pack_logs 164)"
}

call165() {
  emit "call 165 (session 27, on call 162's warm machine) - the GPU suite at session 27's defaults (call 164's run hit its 150 s pytest limit on the last test, so the limit is 240 s here), then the mask chain's forward A/B again, default against forced off, on the masks it moved [<= 7.5 min]" \
    nvidia-h200 450 '[".devtools"]' \
"$PRELUDE"'
timeout -s INT -k 10 60 python3 tests/gpu/precompile.py --jobs 12 > $OUT/precompile.log 2>&1; PFM_GPU_REPORT=$OUT/gpu_report.json timeout -s INT -k 20 240 python3 -m pytest -v -rfE -p no:cacheprovider tests/gpu > $OUT/pytest_gpu.log 2>&1
tail -n 3 $OUT/pytest_gpu.log; timeout 30 python3 scripts/skip_summary.py $OUT/gpu_report.json
V="--variant nochain:PADDLE_FLASHMASK_FWD_MASK_CHAIN=0 --variant default:"
timeout -s INT -k 10 50 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --masks causal_document,document,shared_question,prefix_lm_causal,global_sliding_window,sliding_window $V --rounds 4 --calls 4 --tag s27_fwd_chain_mha2 > $OUT/kab_fm2.log 2>&1; grep -E "^[a-z_]+ nochain" $OUT/kab_fm2.log | cut -c1-200
'"$(pack_logs 165)"
}

call166() {
  emit "call 166 (session 27, fresh staging with the FA4 wheels) - at session 27's defaults: the GQA row of the same-run table (B=4 S=8K 32/8, ours and FA4; #6 item 3, last measured in session 26 before the edge pass and the mask chain), then the mask chain's forward A/B at D=256 (off there, not measured) [<= 6 min]" \
    nvidia-h200 360 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 170 python3 bench/bench_attention.py --cases 2 --systems paddle_flashmask,fa4 --tag s27_cases2 > $OUT/bench_s27_cases2.log 2>&1; tail -n 12 $OUT/bench_s27_cases2.log | cut -c1-300
V="--variant base: --variant chain:PADDLE_FLASHMASK_FWD_MASK_CHAIN=1"
timeout -s INT -k 10 45 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim 256 --masks document,causal_document,sliding_window $V --rounds 3 --calls 4 --tag s27_fwd_chain_d256 > $OUT/kab_f256.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_f256.log | cut -c1-200
'"$(pack_logs 166)"
}

call167() {
  emit "call 167 (session 27, fresh staging with the FA4 wheels, the session's last ~5 device minutes) - the D=64 row at session 27's defaults (ours, FA4, FA4 mask_mod; last run session 23, before the mask chain that made the D=64 masked forwards 3-5.5 % faster) [<= 4 min]" \
    nvidia-h200 240 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 110 python3 bench/bench_attention.py --cases 3 --systems paddle_flashmask,fa4,fa4_mask_mod --tag s27_cases3 > $OUT/bench_s27_cases3.log 2>&1; tail -n 26 $OUT/bench_s27_cases3.log | grep -E "^[a-z_]+ +(paddle|fa4)" | cut -c1-200
'"$(pack_logs 167)"
}

call168() {
  emit "call 168 (prepared in session 27, not yet run; fresh staging) - the dK/dV epilogue without row bounds on key tiles inside the sequence (PADDLE_FLASHMASK_BWD_INTERIOR_DKV=1: the bounded path's epilogue is ~625 instructions per consumer warp per key tile, 64 4-byte stores with a branch region per row; the interior path ~110 per tensor): the backward oracle with it (stops on failure), then its whole-backward A/B, MHA B=4 S=8K H=16 on six masks and the e2e shape (GQA 16/8 B=2, the head walk) [<= 9 min]" \
    nvidia-h200 540 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$(bwd_oracle 200 bwd_s28_interior_dkv.json bwd_idkv.log 'PADDLE_FLASHMASK_BWD_INTERIOR_DKV=1 ')"'
V="--variant base: --variant idkv:PADDLE_FLASHMASK_BWD_INTERIOR_DKV=1"
timeout -s INT -k 10 150 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 4 --calls 3 $V --batch 4 --heads 16 --masks full,sliding_window,causal_document,document,shared_question,global_sliding_window --tag s28_interior_dkv > $OUT/kab.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab.log | cut -c1-200
timeout -s INT -k 10 90 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 4 --calls 6 $V --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,sliding_window --tag s28_interior_dkv_gqa16 > $OUT/kab_g.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g.log | cut -c1-200
'"$(pack_logs 168)"
}

call169() {
  emit "call 169 (session 28, on call 168's warm machine) - the GPU suite at session 27's final defaults (the mask chain became the default at D=256 after call 165's suite ran; pytest limit 240 s) [<= 7 min]" \
    nvidia-h200 420 '[".devtools"]' \
"$PRELUDE"'
'"${GPU_SUITE_1GPU/-k 20 150 python3/-k 20 240 python3}"'
'"$(pack_logs 169)"
}

call170() {
  emit "call 170 (session 28, fresh staging) - the softmax's row max as independent fmax chains (PADDLE_FLASHMASK_FWD_MAX_CHAINS=4 / 8: the d128 main loop's row max was one serial chain of 32 dependent FMNMX per row ahead of the row's first exponential): the forward oracle with 4 (stops on failure), the forward A/B base / 4 / 8 on the MHA zoo, base / 4 at the e2e shape, D=64 and D=256; then the mask chain at D=96 / 192 (compiled, never measured) [<= 8 min]" \
    nvidia-h200 480 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
PADDLE_FLASHMASK_FWD_MAX_CHAINS=4 timeout -s INT -k 10 110 python3 tests/gpu/fwd_check.py --json-name fwd_s28_max_chains.json > $OUT/fwd_mx.log 2>&1; rc=$?; tail -n 1 $OUT/fwd_mx.log | cut -c1-300; [ $rc = 0 ] || exit $rc
V="--variant base: --variant mx4:PADDLE_FLASHMASK_FWD_MAX_CHAINS=4"
timeout -s INT -k 10 90 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --masks full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window $V --variant mx8:PADDLE_FLASHMASK_FWD_MAX_CHAINS=8 --rounds 4 --calls 4 --tag s28_fwd_mx_mha > $OUT/kab_fm.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_fm.log | cut -c1-220
timeout -s INT -k 10 60 python3 bench/kernel_ab.py --pass fwd --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document,causal,sliding_window $V --rounds 5 --calls 10 --tag s28_fwd_mx_gqa > $OUT/kab_fg.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_fg.log | cut -c1-200
for d in 64 256; do timeout -s INT -k 10 40 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim $d --masks full,causal,document,causal_document $V --rounds 3 --calls 4 --tag s28_fwd_mx_d$d > $OUT/kab_f$d.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_f$d.log | cut -c1-200; done
V="--variant base: --variant chain:PADDLE_FLASHMASK_FWD_MASK_CHAIN=1"
for d in 96 192; do timeout -s INT -k 10 40 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim $d --masks document,causal_document,sliding_window $V --rounds 3 --calls 4 --tag s28_fwd_chain_d$d > $OUT/kab_c$d.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_c$d.log | cut -c1-200; done
'"$(pack_logs 170)"
}

call171() {
  emit "call 171 (session 28, fresh staging with the FA4 wheels) - at the new defaults (row max as 4 chains at D=64 and at D=128 but full; the mask chain at D=96): the forward A/B default / forced 1 / forced 4 on the MHA zoo (a second measurement, and full again), D=256 4 chains again with a longer limit, D=192 the mask chain and 4 chains (call 170's bench broke there: v at D=192 has 128 columns), then the e2e step both orders [<= 9.5 min]" \
    nvidia-h200 570 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
K=PADDLE_FLASHMASK_FWD
V="--variant default: --variant one:${K}_MAX_CHAINS=1 --variant four:${K}_MAX_CHAINS=4"
timeout -s INT -k 10 100 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --masks full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window $V --rounds 4 --calls 4 --tag s28_fwd_mx_mha2 > $OUT/kab_fm.log 2>&1; grep -E "^[a-z_]+ default" $OUT/kab_fm.log | cut -c1-220
timeout -s INT -k 10 60 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim 256 --masks full,causal,causal_document --variant base: --variant mx4:${K}_MAX_CHAINS=4 --rounds 3 --calls 4 --tag s28_fwd_mx_d256b > $OUT/kab_f256.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_f256.log | cut -c1-200
timeout -s INT -k 10 70 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim 192 --masks document,causal_document,sliding_window,causal --variant base: --variant chain:${K}_MASK_CHAIN=1 --variant mx4:${K}_MAX_CHAINS=4 --rounds 3 --calls 4 --tag s28_fwd_d192 > $OUT/kab_f192.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_f192.log | cut -c1-220
'"$(e2e_both_orders 140 115 final_a final_b s28)"'
'"$(pack_logs 171)"
}

call172() {
  emit "call 172 (session 28, on call 171's warm machine) - the GPU suite at session 28's defaults (the row max as 4 chains, the mask chain at D=96) [<= 7 min]" \
    nvidia-h200 420 '[".devtools"]' \
"$PRELUDE"'
'"${GPU_SUITE_1GPU/-k 20 150 python3/-k 20 240 python3}"'
'"$(pack_logs 172)"
}

call173() {
  emit "call 173 (session 28, fresh staging) - the row max's order and the row sum as chains: the forward oracle with 4 max chains row by row and 2 sum chains forced (stops on failure), then the forward A/B on five MHA masks at D=128: 1 max chain, 4, 4 row by row, 4 with 2 sum chains [<= 5 min]" \
    nvidia-h200 300 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_FWD
env ${K}_MAX_CHAINS=4 ${K}_MAX_ROWWISE=1 ${K}_SUM_CHAINS=2 timeout -s INT -k 10 110 python3 tests/gpu/fwd_check.py --json-name fwd_s28_sum_chains.json > $OUT/fwd_sc.log 2>&1; rc=$?; tail -n 1 $OUT/fwd_sc.log | cut -c1-300; [ $rc = 0 ] || exit $rc
V="--variant one:${K}_MAX_CHAINS=1 --variant c4:${K}_MAX_CHAINS=4 --variant c4rw:${K}_MAX_CHAINS=4,${K}_MAX_ROWWISE=1 --variant c4s2:${K}_MAX_CHAINS=4,${K}_SUM_CHAINS=2"
timeout -s INT -k 10 130 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --masks full,causal,sliding_window,causal_document,document $V --rounds 3 --calls 4 --tag s28_fwd_sum_chains > $OUT/kab_fs.log 2>&1; grep -E "^[a-z_]+ one" $OUT/kab_fs.log | cut -c1-330
'"$(pack_logs 173)"
}

call174() {
  emit "call 174 (session 28, fresh staging: call 173's machine was given back) - the GPU suite at the session's final defaults (the row max as 4 chains at D=64 and on D=128's causal forms and full attention, there with 2 sum chains; the mask chain at every head dim) [<= 6 min]" \
    nvidia-h200 380 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"${GPU_SUITE_1GPU/-k 20 150 python3/-k 20 240 python3}"'
'"$(pack_logs 174)"
}

call175() {
  emit "call 175 (prepared in session 28, not yet run; on call 174's warm machine) - the forward's full-tile loop against FA4's (CPU: 508 instructions per warp per iteration against 453): each GEMM's operand stage selected once (PADDLE_FLASHMASK_FWD_STAGE_FIRST=1: 472) and Q's descriptors in uniform registers (PADDLE_FLASHMASK_FWD_UNIFORM_Q=1; both: 453): the forward oracle with both forced (stops on failure), then the forward A/B default / sf / uq / sf+uq on the MHA zoo, the e2e shape, D=64 (CPU, full tiles: 488 / 474 / 468 / 452 against FA4's 425) and D=256 (549 -> 473 with both; FA4 429) [<= 9.5 min]" \
    nvidia-h200 560 '[".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_FWD
env ${K}_STAGE_FIRST=1 ${K}_UNIFORM_Q=1 timeout -s INT -k 10 110 python3 tests/gpu/fwd_check.py --json-name fwd_s29_stage_first.json > $OUT/fwd_sf.log 2>&1; rc=$?; tail -n 1 $OUT/fwd_sf.log | cut -c1-300; [ $rc = 0 ] || exit $rc
V="--variant default: --variant sf:${K}_STAGE_FIRST=1 --variant uq:${K}_UNIFORM_Q=1 --variant sfuq:${K}_STAGE_FIRST=1,${K}_UNIFORM_Q=1"
timeout -s INT -k 10 150 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --masks full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window $V --rounds 4 --calls 4 --tag s29_fwd_sf_mha > $OUT/kab_fm.log 2>&1; grep -E "^[a-z_]+ default" $OUT/kab_fm.log | cut -c1-330
timeout -s INT -k 10 90 python3 bench/kernel_ab.py --pass fwd --batch 2 --heads 16 --kv-heads 8 --masks sft_documents,causal_document,document,causal,sliding_window $V --rounds 5 --calls 10 --tag s29_fwd_sf_gqa > $OUT/kab_fg.log 2>&1; grep -E "^[a-z_]+ default" $OUT/kab_fg.log | cut -c1-330
timeout -s INT -k 10 70 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim 64 --masks full,causal,document,causal_document $V --rounds 3 --calls 4 --tag s29_fwd_sf_d64 > $OUT/kab_f64.log 2>&1; grep -E "^[a-z_]+ default" $OUT/kab_f64.log | cut -c1-330
timeout -s INT -k 10 70 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim 256 --masks full,causal,document $V --rounds 3 --calls 3 --tag s29_fwd_sf_d256 > $OUT/kab_f256.log 2>&1; grep -E "^[a-z_]+ default" $OUT/kab_f256.log | cut -c1-330
'"$(pack_logs 175)"
}

# no_pingpong_ab SESSION: the forward without warpgroup turns at D = 256 / 192 (oracle first,
# stops on failure) and the D = 64 forward's 128-row tile on masked forms (calls 176, 189)
no_pingpong_ab() {
  printf '%s' "K=PADDLE_FLASHMASK_FWD
env \${K}_PINGPONG=0 timeout -s INT -k 10 110 python3 tests/gpu/fwd_check.py --json-name fwd_$1_no_pingpong.json > \$OUT/fwd_pp.log 2>&1; rc=\$?; tail -n 1 \$OUT/fwd_pp.log | cut -c1-300; [ \$rc = 0 ] || exit \$rc
V=\"--variant default: --variant nopp:\${K}_PINGPONG=0\"
timeout -s INT -k 10 80 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim 256 --masks full,causal,document,causal_document,sliding_window \$V --rounds 4 --calls 3 --tag $1_fwd_pp_d256 > \$OUT/kab_p256.log 2>&1; grep -E \"^[a-z_]+ default\" \$OUT/kab_p256.log | cut -c1-330
timeout -s INT -k 10 70 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim 192 --masks full,causal,document,causal_document \$V --rounds 4 --calls 3 --tag $1_fwd_pp_d192 > \$OUT/kab_p192.log 2>&1; grep -E \"^[a-z_]+ default\" \$OUT/kab_p192.log | cut -c1-330
timeout -s INT -k 10 70 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim 64 --masks sliding_window,causal_document,document,shared_question --variant default: --variant m128:\${K}_D64_TILE_M=128 --rounds 4 --calls 3 --tag $1_fwd_d64_tile > \$OUT/kab_t64.log 2>&1; grep -E \"^[a-z_]+ default\" \$OUT/kab_t64.log | cut -c1-330
"
}

call176() {
  emit "call 176 (prepared in session 29, not yet run; on call 175's warm machine) - the forward without the consumer warpgroups' turns above D = 128 (PADDLE_FLASHMASK_FWD_PINGPONG=0; FA4's SM90 forward takes turns only up to D = 128; CPU: the loop's two named-barrier instructions gone, spill-free): the forward oracle with it forced (stops on failure; its D = 192 / 256 cases included), then the forward A/B default / no turns at D = 256 and D = 192; and the D = 64 forward's 128-row tile against the 192-row default on masked forms (session 10: sliding window 8 % faster with 128, causal documents and shared question level; not measured since) [<= 6.5 min]" \
    nvidia-h200 400 '[".devtools"]' \
"$PRELUDE"'
'"$(no_pingpong_ab s29)"'
'"$(pack_logs 176)"
}

call177() {
  emit "call 177 (prepared in session 29, not yet run; on a warm machine) - the D = 64 backward (1.27x FA4's time in session 27's table): 128-row query tiles, FA4's D = 64 tile (PADDLE_FLASHMASK_BWD_TILE_M=128; CPU: 557 instructions per warp per 128 rows on a full tile, FA4 652, ours at 64 rows 2 x 325; spill-free on every form), alone, with LSE / delta staged in smem, and in FA4's form with two dS stages (PADDLE_FLASHMASK_BWD_TALL_TWO_PDS=1), and D = 128's staged stats + per-warpgroup dQ blocks (never measured at D = 64): the backward oracle on the D = 64 cases with each (stops on failure), then the whole-backward A/B at D = 64, MHA B=4 S=8K H=16 [<= 10 min]" \
    nvidia-h200 600 '[".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
C="--only d64_causal_doc_gqa_partial,d64_doc_C2_sq_gt_sk,d64_empty_rows_C4_sq_lt_sk,d64_full,fp16_d64_causal_doc_sink --no-determinism"
for v in "m128:${K}_TILE_M=128" "m128tp:${K}_TILE_M=128 ${K}_TALL_TWO_PDS=1" "sspw:${K}_STAGE_STATS=1 ${K}_DQ_PER_WG=1"; do env ${v#*:} timeout -s INT -k 10 80 python3 tests/gpu/bwd_check.py $C --json-name bwd_s29_d64_${v%%:*}.json > $OUT/bwd_${v%%:*}.log 2>&1; rc=$?; echo "${v%%:*}: $(tail -n 1 $OUT/bwd_${v%%:*}.log | cut -c1-200)"; [ $rc = 0 ] || exit $rc; done
V="--variant base: --variant m128:${K}_TILE_M=128 --variant m128ss:${K}_TILE_M=128,${K}_STAGE_STATS=1 --variant m128tp:${K}_TILE_M=128,${K}_TALL_TWO_PDS=1 --variant sspw:${K}_STAGE_STATS=1,${K}_DQ_PER_WG=1"
timeout -s INT -k 10 300 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 64 --masks full,causal,causal_document,document,sliding_window --tag s29_bwd_d64 > $OUT/kab64.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab64.log | cut -c1-300
'"$(pack_logs 177)"
}

# the D = 64 backward oracle with 128-row tiles, stopping on failure (calls 178, 179)
D64_M128_ORACLE='K=PADDLE_FLASHMASK_BWD
env ${K}_TILE_M=128 timeout -s INT -k 10 85 python3 tests/gpu/bwd_check.py --only d64_causal_doc_gqa_partial,d64_doc_C2_sq_gt_sk,d64_empty_rows_C4_sq_lt_sk,d64_full,fp16_d64_causal_doc_sink --no-determinism --json-name bwd_s30_d64_m128.json > $OUT/bwd_m128.log 2>&1; rc=$?; echo "m128: $(tail -n 1 $OUT/bwd_m128.log)"; [ $rc = 0 ] || exit $rc'

call178() {
  emit "call 178 (session 30, fresh staging: machines were scarce, so calls 177 and 175 condensed into one) - the D = 64 backward's 128-row tile (PADDLE_FLASHMASK_BWD_TILE_M=128): its oracle on the D = 64 cases (stops on failure), then the whole-backward A/B base / m128 / m128 with two dS stages / D = 128's staged stats + per-warpgroup dQ at D = 64 (MHA B=4 S=8K H=16); then the forward with each GEMM's operand stage selected once and Q's descriptors in uniform registers (both forced): its oracle, then the forward A/B default / both on the MHA zoo and at D = 64 [<= 10 min]" \
    nvidia-h200 600 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$D64_M128_ORACLE"'
V="--variant base: --variant m128:${K}_TILE_M=128 --variant m128tp:${K}_TILE_M=128,${K}_TALL_TWO_PDS=1 --variant sspw:${K}_STAGE_STATS=1,${K}_DQ_PER_WG=1"
timeout -s INT -k 10 210 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 64 --masks full,causal,causal_document,document,sliding_window --tag s30_bwd_d64 > $OUT/kab64.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab64.log
F=PADDLE_FLASHMASK_FWD
env ${F}_STAGE_FIRST=1 ${F}_UNIFORM_Q=1 timeout -s INT -k 10 90 python3 tests/gpu/fwd_check.py --json-name fwd_s30_stage_first.json > $OUT/fwd_sf.log 2>&1; rc=$?; echo "sfuq: $(tail -n 1 $OUT/fwd_sf.log)"; [ $rc = 0 ] || exit $rc
V="--variant default: --variant sfuq:${F}_STAGE_FIRST=1,${F}_UNIFORM_Q=1"
timeout -s INT -k 10 90 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --masks full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window $V --rounds 3 --calls 3 --tag s30_fwd_sf_mha > $OUT/kab_fm.log 2>&1; grep -E "^[a-z_]+ default" $OUT/kab_fm.log
timeout -s INT -k 10 45 python3 bench/kernel_ab.py --pass fwd --batch 4 --heads 16 --head-dim 64 --masks full,causal,document,causal_document $V --rounds 3 --calls 3 --tag s30_fwd_sf_d64 > $OUT/kab_f64.log 2>&1; grep -E "^[a-z_]+ default" $OUT/kab_f64.log
'"$(pack_logs 178)"
}

call179() {
  emit "call 179 (session 30, the fallback of call 178 when less than ~11 device minutes are left; fresh staging) - only the D = 64 backward's 128-row tile: its oracle on the D = 64 cases (stops on failure), then the whole-backward A/B base / m128 / m128 with two dS stages (MHA B=4 S=8K H=16, five masks) [<= 6 min]" \
    nvidia-h200 340 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"$D64_M128_ORACLE"'
V="--variant base: --variant m128:${K}_TILE_M=128 --variant m128tp:${K}_TILE_M=128,${K}_TALL_TWO_PDS=1"
timeout -s INT -k 10 200 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 64 --masks full,causal,causal_document,document,sliding_window --tag s30_bwd_d64 > $OUT/kab64.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab64.log
'"$(pack_logs 179)"
}

call187() {
  emit "call 187 (session 31, fresh staging) - the GPU suite at session 30's final defaults (the D = 64 backward's 128-row two-stage tile, staged stats + per-warpgroup dQ on D = 64 causal masks with columns, the D = 64 forward's stage_first + uniform_q; never GPU-run as defaults) [<= 6 min]" \
    nvidia-h200 380 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"${GPU_SUITE_1GPU/-k 20 150 python3/-k 20 240 python3}"'
'"$(pack_logs 187)"
}

call188() {
  emit "call 188 (session 31, on call 187's warm machine, the FA4 wheels carried) - the same-run table at B=4 S=8K with every peer, then the D = 64 row (ours, FA4, FA4 mask_mod), both at session 30's defaults [<= 8 min]" \
    nvidia-h200 530 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 270 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s31_cases0 > $OUT/bench_s31_cases0.log 2>&1; tail -n 40 $OUT/bench_s31_cases0.log | cut -c1-200
timeout -s INT -k 10 110 python3 bench/bench_attention.py --cases 3 --systems paddle_flashmask,fa4,fa4_mask_mod --tag s31_cases3 > $OUT/bench_s31_cases3.log 2>&1; tail -n 26 $OUT/bench_s31_cases3.log | grep -E "^[a-z_]+ +(paddle|fa4)" | cut -c1-200
'"$(pack_logs 188)"
}

call189() {
  emit "call 189 (session 31, on call 188's warm machine) - call 176 at session 30's defaults: the D = 192 / 256 forward without warpgroup turns (oracle first, stops on failure), and the D = 64 forward's 128-row tile on masked forms [<= 6.5 min]" \
    nvidia-h200 400 '[".devtools"]' \
"$PRELUDE"'
'"$(no_pingpong_ab s31)"'
'"$(pack_logs 189)"
}

call196() {
  emit "call 196 (prepared in session 31; fresh staging) - the GPU suite at session 31's defaults (D = 64: 128-row backward tiles with the stats shuffled from the lanes on every mask; only the oracle ran with them forced, 35/35 + 4/4) [<= 6 min]" \
    nvidia-h200 380 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"${GPU_SUITE_1GPU/-k 20 150 python3/-k 20 240 python3}"'
'"$(pack_logs 196)"
}

call197() {
  emit "call 197 (prepared in session 31; on call 196's warm machine, the FA4 wheels carried) - the same-run table at B=4 S=8K H=16 D=128 with every peer at session 31's defaults [<= 6.5 min]" \
    nvidia-h200 400 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 270 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s32_cases0 > $OUT/bench_s32_cases0.log 2>&1; tail -n 40 $OUT/bench_s32_cases0.log | cut -c1-200
'"$(pack_logs 197)"
}

call198() {
  emit "call 198 (prepared in session 31; on a warm machine with the FA4 wheels) - the D = 64 row (ours, FA4, FA4 mask_mod) at session 31's defaults, then ncu per-instruction samples of our D = 64 full backward after the shuffled stats (the next waits: dQ staging stores, MUFU) [<= 8.5 min]" \
    nvidia-h200 500 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 230 python3 bench/bench_attention.py --cases 3 --systems paddle_flashmask,fa4,fa4_mask_mod --tag s32_cases3 > $OUT/bench_s32_cases3.log 2>&1; tail -n 26 $OUT/bench_s32_cases3.log | grep -E "^[a-z_]+ +(paddle|fa4)" | cut -c1-200
'"$(sampling_nc 80 25 20 '--mask full --head-dim 64')"'
nc bwd_sm90F paddle_flashmask bwd_full64_s32
'"$(pack_logs 198)"
}

call199() {
  emit "call 199 (prepared in session 31; on a warm machine with the FA4 wheels) - session 31's profile method at D = 128 (the table's shape): ncu per-instruction samples of ours and FA4's backward on full attention and documents at today's defaults [<= 6 min]" \
    nvidia-h200 380 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS_INSTALL"'
'"$(sampling_nc 80 25 20 '--mask full')"'
nc bwd_sm90F paddle_flashmask bwd_full_s32; nc BackwardSm90 fa4 fa4_bwd_full_s32
'"$(sampling_nc 80 25 20 '--mask document')"'
nc bwd_sm90F paddle_flashmask bwd_doc_s32; nc BackwardSm90 fa4 fa4_bwd_doc_s32
'"$(pack_logs 199)"
}

call200() {
  emit "call 200 (prepared in session 31; on a warm machine) - the dQ staging tile in the accumulator's fragment order at D = 64 (PADDLE_FLASHMASK_BWD_DQ_FRAG=1: 8 STS.128 per thread instead of 16 STS.64; CPU-checked layout and postprocess inverse): the backward oracle on the D = 64 cases with it (stops on failure), then the whole-backward A/B at D = 64, MHA and GQA 32/8 [<= 4 min]" \
    nvidia-h200 280 '[".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_DQ_FRAG=1 timeout -s INT -k 10 80 python3 tests/gpu/bwd_check.py --only d64_causal_doc_gqa_partial,d64_doc_C2_sq_gt_sk,d64_empty_rows_C4_sq_lt_sk,d64_full --no-determinism --json-name bwd_s32_dq_frag.json > $OUT/bwd_frag.log 2>&1; rc=$?; tail -n 1 $OUT/bwd_frag.log | cut -c1-200; [ $rc = 0 ] || exit $rc
V="--variant base: --variant frag:${K}_DQ_FRAG=1"
timeout -s INT -k 10 70 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 64 --masks full,causal,document,causal_document,sliding_window --tag s32_bwd_dq_frag_d64 > $OUT/kab64.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab64.log | cut -c1-200
timeout -s INT -k 10 50 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 32 --kv-heads 8 --head-dim 64 --masks full,causal_document --tag s32_bwd_dq_frag_d64_gqa > $OUT/kabg.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kabg.log | cut -c1-200
'"$(pack_logs 200)"
}

call201() {
  emit "call 201 (session 32, fresh staging) - FA4's 80-row backward tile at D = 128 for bidirectional masks again, now in FA4's whole form (two dS^T stages beside the swizzled dQ tile with LSE / delta staged with Q / dO, which fit once the smem account dropped the driver's reserved 1 KB): the oracle with it forced (stops on failure), then the whole-backward A/B against the 64-row default and the one-stage 80-row form, MHA B=4 S=8K H=16 and GQA 32/8 on full attention and documents [<= 5 min]" \
    nvidia-h200 330 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_TILE_M=80 ${K}_TALL_TWO_PDS=1 timeout -s INT -k 10 100 python3 tests/gpu/bwd_check.py --only full_d128_sq_ne_sk,doc_C2_padding,random_C2,full_gqa_sq_gt_sk,doc_C2_gqa_partial,random_C4 --no-determinism --json-name bwd_s32_m80two.json > $OUT/bwd_m80.log 2>&1; rc=$?; tail -n 1 $OUT/bwd_m80.log | cut -c1-200; grep -o "tile_m=80" $OUT/bwd_s32_m80two.json | wc -l; [ $rc = 0 ] || exit $rc
V="--variant base: --variant m80:${K}_TILE_M=80 --variant m80two:${K}_TILE_M=80,${K}_TALL_TWO_PDS=1"
timeout -s INT -k 10 80 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 128 --masks full,document --tag s32_bwd_m80_mha > $OUT/kab_mha.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_mha.log | cut -c1-220
timeout -s INT -k 10 80 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 32 --kv-heads 8 --head-dim 128 --masks full,document --tag s32_bwd_m80_gqa > $OUT/kab_gqa.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_gqa.log | cut -c1-220
'"$(pack_logs 201)"
}

call202() {
  emit "call 202 (session 32, fresh staging) - dQ staged in the accumulator's fragment order at D = 128 (PADDLE_FLASHMASK_BWD_DQ_FRAG=1, now also for the per-warpgroup blocks of 64-row tiles: 8 STS.128 per thread instead of 16 2-way-conflicted STS.64, 9 % of the kernel's smem wavefronts in call 199's profile): the oracle with it (and with the blocks forced on documents; stops on failure), then the whole-backward A/B at D = 128, MHA and GQA 32/8 [<= 6 min]" \
    nvidia-h200 400 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_DQ_FRAG=1 timeout -s INT -k 10 80 python3 tests/gpu/bwd_check.py --only causal_d128,full_d128_sq_ne_sk,causal_doc_C1,causal_doc_C1_partial,gqa3_causal_doc,mqa_causal_doc,full_gqa_sq_gt_sk,d64_full --no-determinism --json-name bwd_s32_dq_frag128.json > $OUT/bwd_frag.log 2>&1; rc=$?; tail -n 1 $OUT/bwd_frag.log | cut -c1-200; [ $rc = 0 ] || exit $rc
env ${K}_DQ_FRAG=1 ${K}_DQ_PER_WG=1 timeout -s INT -k 10 60 python3 tests/gpu/bwd_check.py --only doc_C2_padding,doc_C2_gqa_partial,random_C2 --no-determinism --json-name bwd_s32_dq_frag128_pw.json > $OUT/bwd_frag_pw.log 2>&1; rc=$?; tail -n 1 $OUT/bwd_frag_pw.log | cut -c1-200; [ $rc = 0 ] || exit $rc
V="--variant base: --variant frag:${K}_DQ_FRAG=1 --variant pw:${K}_DQ_PER_WG=1 --variant pwfrag:${K}_DQ_PER_WG=1,${K}_DQ_FRAG=1"
timeout -s INT -k 10 130 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 128 --masks full,causal,document,causal_document,sliding_window --tag s32_bwd_dq_frag_d128 > $OUT/kab128.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab128.log | cut -c1-250
V="--variant base: --variant frag:${K}_DQ_FRAG=1"
timeout -s INT -k 10 60 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 32 --kv-heads 8 --head-dim 128 --masks full,causal_document --tag s32_bwd_dq_frag_d128_gqa > $OUT/kabg.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kabg.log | cut -c1-200
'"$(pack_logs 202)"
}

call203() {
  emit "call 203 (session 32, fresh staging) - where the 80-row backward (FA4's D = 128 tile, two dS^T stages, staged stats; call 201: 1.015-1.049x slower than our 64-row default, while FA4 runs it 1.12x faster than we do) loses: ncu per-instruction samples of ours with it forced on full attention and documents, beside call 199's FA4 profiles [<= 4 min]" \
    nvidia-h200 280 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
export PADDLE_FLASHMASK_BWD_TILE_M=80 PADDLE_FLASHMASK_BWD_TALL_TWO_PDS=1
'"$(sampling_nc 80 25 20 '--mask full')"'
nc bwd_sm90F paddle_flashmask bwd_full_m80_s32
'"$(sampling_nc 80 25 20 '--mask document')"'
nc bwd_sm90F paddle_flashmask bwd_doc_m80_s32
'"$(pack_logs 203)"
}

call204() {
  emit "call 204 (session 32, fresh staging) - call 203 found the 80-row form's 40 scalar dQ^T stores per thread holding 10 % of its samples (FA4 stages dQ^T with 10 STS.128): dq_by_thread (on by default for that form) stages the accumulator's quads in thread order, the postprocess scatters them; the oracle with the 80-row form (stops on failure), then the whole-backward A/B against the 64-row default and the 80-row form without it, MHA and GQA 32/8 on full attention and documents [<= 5 min]" \
    nvidia-h200 330 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_TILE_M=80 ${K}_TALL_TWO_PDS=1 timeout -s INT -k 10 100 python3 tests/gpu/bwd_check.py --only full_d128_sq_ne_sk,doc_C2_padding,random_C2,full_gqa_sq_gt_sk,doc_C2_gqa_partial,random_C4 --no-determinism --json-name bwd_s32_m80_by_thread.json > $OUT/bwd_m80.log 2>&1; rc=$?; tail -n 1 $OUT/bwd_m80.log | cut -c1-200; grep -o "dq_by_thread=True" $OUT/bwd_s32_m80_by_thread.json | wc -l; [ $rc = 0 ] || exit $rc
V="--variant base: --variant m80bt:${K}_TILE_M=80,${K}_TALL_TWO_PDS=1 --variant m80two:${K}_TILE_M=80,${K}_TALL_TWO_PDS=1,${K}_DQ_BY_THREAD=0"
timeout -s INT -k 10 80 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 128 --masks full,document --tag s32_bwd_m80bt_mha > $OUT/kab_mha.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_mha.log | cut -c1-220
timeout -s INT -k 10 80 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 32 --kv-heads 8 --head-dim 128 --masks full,document --tag s32_bwd_m80bt_gqa > $OUT/kab_gqa.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_gqa.log | cut -c1-220
'"$(pack_logs 204)"
}

call205() {
  emit "call 205 (session 32, fresh staging) - dS stored [queries x keys] (PADDLE_FLASHMASK_BWD_DS_QUERY_MAJOR=1: the 128-byte swizzle where the 80-row form's [keys x 80] rows had the 32-byte one, written by transposing stmatrix, read K-major by the dQ GEMM, FA4's sPdS): the oracle with it on the 64-row default and on the 80-row form with dQ^T staged by thread (stops on failure), then the whole-backward A/B at D = 128 MHA [<= 6 min]" \
    nvidia-h200 380 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_DS_QUERY_MAJOR=1 timeout -s INT -k 10 90 python3 tests/gpu/bwd_check.py --only causal_d128,full_d128_sq_ne_sk,causal_doc_C1_partial,doc_C2_padding,random_C4,gqa3_causal_doc,full_gqa_sq_gt_sk,causal_window_C2 --no-determinism --json-name bwd_s32_dsq.json > $OUT/bwd_dsq.log 2>&1; rc=$?; tail -n 1 $OUT/bwd_dsq.log | cut -c1-200; [ $rc = 0 ] || exit $rc
env ${K}_DS_QUERY_MAJOR=1 ${K}_TILE_M=80 ${K}_TALL_TWO_PDS=1 ${K}_DQ_BY_THREAD=1 timeout -s INT -k 10 70 python3 tests/gpu/bwd_check.py --only full_d128_sq_ne_sk,doc_C2_padding,random_C2,doc_C2_gqa_partial --no-determinism --json-name bwd_s32_dsq_m80bt.json > $OUT/bwd_dsq80.log 2>&1; rc=$?; tail -n 1 $OUT/bwd_dsq80.log | cut -c1-200; [ $rc = 0 ] || exit $rc
M80="${K}_TILE_M=80,${K}_TALL_TWO_PDS=1,${K}_DS_QUERY_MAJOR=1"
V="--variant base: --variant dsq:${K}_DS_QUERY_MAJOR=1 --variant m80dsq:$M80 --variant m80dsqbt:$M80,${K}_DQ_BY_THREAD=1"
timeout -s INT -k 10 150 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 128 --masks full,causal,document,causal_document --tag s32_bwd_dsq_mha > $OUT/kab_mha.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_mha.log | cut -c1-250
'"$(pack_logs 205)"
}

call206() {
  emit "call 206 (session 32, fresh staging) - issue 6 item 1 at D = 64 after session 31's default change (the default's 128-row tiles are faster, the deterministic mode keeps 64-row ones): deterministic / default on every mask, MHA B=2 H=16 and GQA 16/8, and GQA 16/8 at D = 128 again (last measured in session 26) [<= 5 min]" \
    nvidia-h200 350 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --rounds 3 --calls 3 --variant base: --variant det:deterministic=1"
timeout -s INT -k 10 130 $A --head-dim 64 --masks full,causal,causal_document,document,sliding_window,shared_question,prefix_lm_causal,global_sliding_window --tag s32_det_d64_mha > $OUT/kab_m.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_m.log | cut -c1-160
timeout -s INT -k 10 80 $A --head-dim 64 --kv-heads 8 --masks causal_document,sft_documents,document,causal --tag s32_det_d64_gqa > $OUT/kab_g.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g.log | cut -c1-160
timeout -s INT -k 10 80 $A --kv-heads 8 --masks causal_document,sft_documents,document,causal --tag s32_det_d128_gqa > $OUT/kab_g128.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g128.log | cut -c1-160
'"$(pack_logs 206)"
}

call207() {
  emit "call 207 (session 32, fresh staging) - the deterministic mode with 128-row tiles at D = 64 (env PADDLE_FLASHMASK_BWD_TILE_M=128 now reaches it: its semaphores counted in the kernel's tiles, PrePostConfig.grid_rows; call 206: deterministic / default 1.23-1.33x since the default took 128-row tiles): the oracle and the 10-rerun bit-identity checks on the D = 64 cases plus the 32K-token runs at D = 64 (stops on failure), then deterministic / default at D = 64, MHA (six masks) and GQA 16/8 (four), with 64- and 128-row tiles [<= 5 min]" \
    nvidia-h200 420 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
C='"$D64_DET_CASES"'
'"$(det_oracle '${K}_TILE_M=128' 150 bwd_s33_det128.json bwd_det128.log '--large-det-dim 64')"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --rounds 3 --calls 3 --variant base: --variant det:deterministic=1 --variant det128:deterministic=1,${K}_TILE_M=128"
timeout -s INT -k 10 120 $A --head-dim 64 --masks full,causal,causal_document,document,sliding_window,prefix_lm_causal --tag s33_det128_d64_mha > $OUT/kab_m.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_m.log | cut -c1-200
timeout -s INT -k 10 90 $A --kv-heads 8 --head-dim 64 --masks full,causal_document,document,sliding_window --tag s33_det128_d64_gqa > $OUT/kab_g.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g.log | cut -c1-200
'"$(pack_logs 207)"
}

call208() {
  emit "call 208 (prepared in session 32; fresh staging) - FA4's D = 128 backward form complete: 80-row tiles, two dS^T stages with staged stats, dS keys-contiguous (DS_QUERY_MAJOR), dQ^T staged by thread in per-warpgroup blocks handed off on their own (DQ_BY_THREAD, now with dq_per_wg's barriers: the warpgroups no longer meet the writer together), dK after dV and the dO stage released right after dV (DK_AFTER_DV, DO_RELEASE_AFTER_DV); its loop's sync sequence now matches FA4's SASS: the oracle (stops on failure), then the whole-backward A/B against the 64-row default, MHA and GQA 32/8, full and documents [<= 5 min]" \
    nvidia-h200 330 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
F="${K}_TILE_M=80 ${K}_TALL_TWO_PDS=1 ${K}_DS_QUERY_MAJOR=1 ${K}_DQ_BY_THREAD=1 ${K}_DK_AFTER_DV=1"
env $F ${K}_DO_RELEASE_AFTER_DV=1 timeout -s INT -k 10 100 python3 tests/gpu/bwd_check.py --only full_d128_sq_ne_sk,doc_C2_padding,random_C2,full_gqa_sq_gt_sk,doc_C2_gqa_partial,random_C4 --no-determinism --json-name bwd_s33_fa4form.json > $OUT/bwd_fa4form.log 2>&1; rc=$?; tail -n 1 $OUT/bwd_fa4form.log | cut -c1-200; [ $rc = 0 ] || exit $rc
V="--variant base: --variant fa4form:$(echo $F | tr " " ,) --variant fa4rel:$(echo $F | tr " " ,),${K}_DO_RELEASE_AFTER_DV=1"
timeout -s INT -k 10 80 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 128 --masks full,document --tag s33_bwd_fa4form_mha > $OUT/kab_mha.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_mha.log | cut -c1-220
timeout -s INT -k 10 80 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 32 --kv-heads 8 --head-dim 128 --masks full,document --tag s33_bwd_fa4form_gqa > $OUT/kab_gqa.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_gqa.log | cut -c1-220
'"$(pack_logs 208)"
}

call211() {
  emit "call 211 (session 33, fresh staging) - the GPU suite at session 33's defaults (D = 128 full attention on 80-row tiles in FA4's form with dQ^T staged by thread; the deterministic mode on 128-row tiles at D = 64) [<= 6 min]" \
    nvidia-h200 380 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"${GPU_SUITE_1GPU/-k 20 150 python3/-k 20 240 python3}"'
'"$(pack_logs 211)"
}

call212() {
  emit "call 212 (session 33, on call 211's warm machine, the FA4 wheels carried) - the same-run table at B=4 S=8K H=16 D=128 with every peer at session 33's defaults [<= 6.5 min]" \
    nvidia-h200 400 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 270 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s33_cases0 > $OUT/bench_s33_cases0.log 2>&1; tail -n 40 $OUT/bench_s33_cases0.log | cut -c1-200
'"$(pack_logs 212)"
}

call215() {
  emit "call 215 (session 34, fresh staging) - documents (bidirectional C = 2) on 80-row tiles with LSE / delta shuffled from the lanes, delta loaded after the mask (compiles spill-free for MHA, 28 B for the GQA walk): the oracle (stops on failure), then the whole-backward A/B against the default (64 rows there) and the 80-row form with global stats, MHA and GQA 32/8, documents, prefix-LM and full [<= 4 min]" \
    nvidia-h200 275 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_TILE_M=80 ${K}_SHFL_STATS=1 timeout -s INT -k 10 100 python3 tests/gpu/bwd_check.py --only full_d128_sq_ne_sk,doc_C2_padding,random_C2,full_gqa_sq_gt_sk,doc_C2_gqa_partial,random_C4 --no-determinism --json-name bwd_s34_m80shfl.json > $OUT/bwd_m80shfl.log 2>&1; rc=$?; tail -n 1 $OUT/bwd_m80shfl.log | cut -c1-200; [ $rc = 0 ] || exit $rc
V="--variant base: --variant m80shfl:${K}_TILE_M=80,${K}_SHFL_STATS=1 --variant m80:${K}_TILE_M=80"
timeout -s INT -k 10 60 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 128 --masks document,prefix_lm_causal,full --tag s34_m80shfl_mha > $OUT/kab_mha.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_mha.log | cut -c1-220
timeout -s INT -k 10 60 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 32 --kv-heads 8 --head-dim 128 --masks document,prefix_lm_causal --tag s34_m80shfl_gqa > $OUT/kab_gqa.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_gqa.log | cut -c1-220
'"$(pack_logs 215)"
}

call216() {
  emit "call 216 (session 34, on call 215's warm machine) - plain causal D = 128 backward, session 31's code (646f5fb, old31/ in the tree) against today's in alternating processes (causal MHA B=4 S=8K H=16: 5.21 ms in session 31's table, 5.63 in session 33's), then the GPU suite at session 33's defaults in one piece [<= 9 min]" \
    nvidia-h200 550 '[".devtools", "old31"]' \
"$PRELUDE"'
A="--pass bwd --kernel bwd --rounds 3 --calls 5 --variant base: --batch 4 --heads 16 --head-dim 128 --masks causal,full"
for i in 1 2; do timeout -s INT -k 10 50 python3 old31/bench/kernel_ab.py $A --tag s34_old31_$i > $OUT/kab_old$i.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_old$i.log | sed "s/^/old31 /" | cut -c1-160; timeout -s INT -k 10 50 python3 bench/kernel_ab.py $A --tag s34_head_$i > $OUT/kab_head$i.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_head$i.log | sed "s/^/head /" | cut -c1-160; done
'"${GPU_SUITE_1GPU/-k 20 150 python3/-k 20 240 python3}"'
'"$(pack_logs 216)"
}

call217() {
  emit "call 217 (session 34, fresh staging) - documents (bidirectional C = 2) on 80-row tiles with LSE / delta staged with Q / dO and each column pair read from shared memory where it is used (env TALL_STAGED_COLUMNS=1; call 215: global or lane-shuffled stats 1.15-1.16x of the 64-row default): the oracle (stops on failure), then the whole-backward A/B, MHA and GQA 32/8, documents and prefix-LM; then where the bench's backward time goes (bench/profile_call.py: frontend against direct calls and kernel sums; session 33's table put the causal backward at 5.63 ms, call 216's kernels at 4.98) [<= 6.5 min]" \
    nvidia-h200 400 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_TILE_M=80 ${K}_TALL_STAGED_COLUMNS=1 timeout -s INT -k 10 100 python3 tests/gpu/bwd_check.py --only full_d128_sq_ne_sk,doc_C2_padding,random_C2,full_gqa_sq_gt_sk,doc_C2_gqa_partial,random_C4 --no-determinism --json-name bwd_s34_m80staged.json > $OUT/bwd_m80staged.log 2>&1; rc=$?; tail -n 1 $OUT/bwd_m80staged.log | cut -c1-200; [ $rc = 0 ] || exit $rc
V="--variant base: --variant m80st:${K}_TILE_M=80,${K}_TALL_STAGED_COLUMNS=1 --variant m80:${K}_TILE_M=80"
timeout -s INT -k 10 60 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 128 --masks document,prefix_lm_causal --tag s34_m80staged_mha > $OUT/kab_mha.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_mha.log | cut -c1-220
timeout -s INT -k 10 60 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 32 --kv-heads 8 --head-dim 128 --masks document,prefix_lm_causal --tag s34_m80staged_gqa > $OUT/kab_gqa.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_gqa.log | cut -c1-220
timeout -s INT -k 10 120 python3 bench/profile_call.py --masks causal,full,document,causal_document,sliding_window > $OUT/profile_call.log 2>&1; tail -n 12 $OUT/profile_call.log | cut -c1-400
'"$(pack_logs 217)"
}

call218() {
  emit "call 218 (session 34, fresh staging) - the first store at 80 rows (env TALL_FIRST_STORE=1: a flag per query tile zeroed by the preprocess instead of the fp32 accumulator, the postprocess zeroing tiles nobody wrote; call 217: 80-row pre + post 397 us against 232 at 64 rows) on full attention (the default 80-row form) and on documents with staged stats (TALL_STAGED_COLUMNS=1): the oracle with a new case of whole unvisited query tiles (stops on failure), then the whole-backward A/B, MHA and GQA 32/8 [<= 5 min]" \
    nvidia-h200 330 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_TILE_M=80 ${K}_TALL_STAGED_COLUMNS=1 ${K}_TALL_FIRST_STORE=1 timeout -s INT -k 10 110 python3 tests/gpu/bwd_check.py --only full_d128_sq_ne_sk,doc_C2_padding,random_C2,full_gqa_sq_gt_sk,doc_C2_gqa_partial,random_C4,empty_tail_C2_sq_ne_sk --no-determinism --json-name bwd_s34_m80fs.json > $OUT/bwd_m80fs.log 2>&1; rc=$?; tail -n 1 $OUT/bwd_m80fs.log | cut -c1-200; [ $rc = 0 ] || exit $rc
S="${K}_TILE_M=80,${K}_TALL_STAGED_COLUMNS=1"
V="--variant base: --variant fs:${K}_TALL_FIRST_STORE=1 --variant m80st:$S --variant m80stfs:$S,${K}_TALL_FIRST_STORE=1"
timeout -s INT -k 10 80 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 128 --masks full,document,prefix_lm_causal --tag s34_m80fs_mha > $OUT/kab_mha.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_mha.log | cut -c1-260
timeout -s INT -k 10 80 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 32 --kv-heads 8 --head-dim 128 --masks full,document --tag s34_m80fs_gqa > $OUT/kab_gqa.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_gqa.log | cut -c1-260
'"$(pack_logs 218)"
}

call219() {
  emit "call 219 (session 36, fresh staging) - the GPU suite at session 35's defaults in one piece (D = 128 documents / prefix-LM backward on 80-row tiles with staged stats read where used, the first store on every 80-row tile; call 218: oracle 7/7 forced) [<= 6 min]" \
    nvidia-h200 380 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"${GPU_SUITE_1GPU/-k 20 150 python3/-k 20 240 python3}"'
'"$(pack_logs 219)"
}

call220() {
  emit "call 220 (session 36, on call 219's warm machine, the FA4 wheels carried) - the same-run table at B=4 S=8K H=16 D=128 with every peer at session 35's defaults (session 33's table: documents 0.88, prefix-LM 0.95 of the best peer; call 218's backward A/B: 0.969x / 0.911x of session 34's) [<= 6.5 min]" \
    nvidia-h200 400 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 270 python3 bench/bench_attention.py --cases 0 --systems '"$BENCH_SYSTEMS_8K"' --tag s36_cases0 > $OUT/bench_s36_cases0.log 2>&1; tail -n 40 $OUT/bench_s36_cases0.log | cut -c1-200
'"$(pack_logs 220)"
}

call221() {
  emit "call 221 (session 36, on call 220's warm machine, the FA4 wheels carried) - the GQA 32/8 row (B=4 S=8K D=128), ours and FA4 native/varlen, at session 35's defaults (call 218: GQA documents backward 0.929x, full 0.965x of session 34's) [<= 5 min]" \
    nvidia-h200 300 '[".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 170 python3 bench/bench_attention.py --cases 2 --systems paddle_flashmask,fa4 --tag s36_cases2 > $OUT/bench_s36_cases2.log 2>&1; tail -n 12 $OUT/bench_s36_cases2.log | cut -c1-300
'"$(pack_logs 221)"
}

call222() {
  emit "call 222 (session 36, on a warm machine, or fresh staging with .cutedsl/b) - the by-thread postprocess gathering each row's four adjacent dQ columns by warp shuffles into one 8-byte store (env POST_GATHER=1; SASS: 8 STG instead of 32, 32 SHFL; call 218: the 80-row postprocess 197-198 us against 133 at 64 rows): the oracle (stops on failure), then the whole-backward A/B, MHA full / documents / prefix-LM and GQA 32/8 documents [<= 4 min]" \
    nvidia-h200 280 '[".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
env ${K}_POST_GATHER=1 timeout -s INT -k 10 110 python3 tests/gpu/bwd_check.py --only full_d128_sq_ne_sk,doc_C2_padding,random_C2,full_gqa_sq_gt_sk,doc_C2_gqa_partial,empty_tail_C2_sq_ne_sk --no-determinism --json-name bwd_s36_post_gather.json > $OUT/bwd_gather.log 2>&1; rc=$?; tail -n 1 $OUT/bwd_gather.log | cut -c1-200; [ $rc = 0 ] || exit $rc
V="--variant base: --variant gather:${K}_POST_GATHER=1"
timeout -s INT -k 10 60 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 16 --head-dim 128 --masks full,document,prefix_lm_causal --tag s36_gather_mha > $OUT/kab_mha.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_mha.log | cut -c1-220
timeout -s INT -k 10 50 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 $V --batch 4 --heads 32 --kv-heads 8 --head-dim 128 --masks document --tag s36_gather_gqa > $OUT/kab_gqa.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_gqa.log | cut -c1-220
'"$(pack_logs 222)"
}

call223() {
  emit "call 223 (session 36, on a warm machine, or fresh staging with .cutedsl/b) - the first store on D = 64's 128-row tiles (env TALL_FIRST_STORE=1: flags per 128-row tile, in the deterministic mode the chains' semaphores; the preprocess then zeroes no fp32 accumulator: 50 -> ~29 us at B=2 GQA 16/8, 72 us with two chains): the oracle and the 10-rerun bit identity on the D = 64 cases (stops on failure), then the whole-backward A/B, default and deterministic, MHA and GQA 16/8 (call 207: deterministic GQA 16/8 documents 1.170x, over item 1's 1.15) [<= 7 min]" \
    nvidia-h200 430 '[".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
C='"$D64_DET_CASES"'
'"$(det_oracle '${K}_TALL_FIRST_STORE=1' 150 bwd_s36_d64_first_store.json bwd_d64fs.log '--large-det-dim 64')"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --batch 2 --heads 16 --rounds 3 --calls 3 --head-dim 64 --variant base: --variant fs:${K}_TALL_FIRST_STORE=1 --variant det:deterministic=1 --variant detfs:deterministic=1,${K}_TALL_FIRST_STORE=1"
timeout -s INT -k 10 110 $A --masks full,causal,causal_document,document,sliding_window --tag s36_d64fs_mha > $OUT/kab_m.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_m.log | cut -c1-220
timeout -s INT -k 10 90 $A --kv-heads 8 --masks full,causal_document,document,sliding_window --tag s36_d64fs_gqa > $OUT/kab_g.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g.log | cut -c1-220
'"$(pack_logs 223)"
}

call224() {
  emit "call 224 (session 36, on a warm machine, or fresh staging with .cutedsl/b) - the deterministic mode on 80-row tiles at D = 128 (env TILE_M=80 now reaches it: dQ^T staged by thread, both warpgroup blocks added after the chain turn; session 35 made 80 rows the default on full / documents / prefix-LM, so deterministic / default on 64-row tiles rose there): the oracle and the 10-rerun bit identity on the bidirectional D = 128 cases (stops on failure), then deterministic / default, 64 and 80 rows, MHA B=4 H=16 and GQA 16/8 B=2 [<= 7.5 min]" \
    nvidia-h200 460 '[".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
C=full_d128_sq_ne_sk,doc_C2_padding,random_C2,full_gqa_sq_gt_sk,doc_C2_gqa_partial,empty_tail_C2_sq_ne_sk
'"$(det_oracle '${K}_TILE_M=80' 170 bwd_s36_det80.json bwd_det80.log)"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --head-dim 128 --variant base: --variant det:deterministic=1 --variant det80:deterministic=1,${K}_TILE_M=80"
timeout -s INT -k 10 110 $A --batch 4 --heads 16 --masks full,document,prefix_lm_causal --tag s36_det80_mha > $OUT/kab_m.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_m.log | cut -c1-220
timeout -s INT -k 10 90 $A --batch 2 --heads 16 --kv-heads 8 --masks full,document --tag s36_det80_gqa > $OUT/kab_g.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g.log | cut -c1-220
'"$(pack_logs 224)"
}

call225() {
  emit "call 225 (session 37, fresh staging when the budget is short: after repeated refused starts, the same-run table first) - call 220's table at B=4 S=8K H=16 D=128 with the FA4 forms only (ours, FA4 native/varlen, FA4 mask_mod: the best peer on every mask in sessions 31-33), carrying part b of the DSL and the FA4 wheels in one call [<= 5 min]" \
    nvidia-h200 340 '[".cutedsl/b", ".devtools", ".whl"]' \
"$PRELUDE
$PEERS"'
timeout -s INT -k 10 200 python3 bench/bench_attention.py --cases 0 --systems paddle_flashmask,fa4,fa4_mask_mod --tag s37_cases0_fa4 > $OUT/bench_s37_cases0_fa4.log 2>&1; tail -n 30 $OUT/bench_s37_cases0_fa4.log | cut -c1-200
'"$(pack_logs 225)"
}

call226() {
  emit "call 226 (session 37, fresh staging with .cutedsl/b) - the deterministic mode with dq_early (env DET_DQ_EARLY=1: the dQ GEMM before dK, its hand-off to the writer warp, which waits for the chain's semaphore, under the dK GEMM; call 224: deterministic / default at D = 128 1.15-1.25x): the oracle and the 10-rerun bit identity on D = 128 and D = 64 cases (stops on failure), then default / deterministic / deterministic + dq_early, whole backward, MHA B=4 H=16 D=128, GQA 16/8 B=2 D=128 and D=64 documents [<= 8.5 min]" \
    nvidia-h200 500 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
C=full_d128_sq_ne_sk,doc_C2_padding,causal_d128_rs,gqa3_causal_doc,doc_C2_gqa_partial,empty_tail_C2_sq_ne_sk,d64_causal_doc_gqa_partial,d64_doc_C2_sq_gt_sk
'"$(det_oracle '${K}_DET_DQ_EARLY=1' 180 bwd_s37_det_early.json bwd_det_early.log)"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant det:deterministic=1 --variant dete:deterministic=1,${K}_DET_DQ_EARLY=1"
timeout -s INT -k 10 120 $A --batch 4 --heads 16 --head-dim 128 --masks full,causal,document,prefix_lm_causal --tag s37_det_early_mha > $OUT/kab_m.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_m.log | cut -c1-220
timeout -s INT -k 10 80 $A --batch 2 --heads 16 --kv-heads 8 --head-dim 128 --masks full,document --tag s37_det_early_gqa > $OUT/kab_g.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g.log | cut -c1-220
timeout -s INT -k 10 50 $A --batch 2 --heads 16 --kv-heads 8 --head-dim 64 --masks document,causal_document --tag s37_det_early_d64 > $OUT/kab_d64.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_d64.log | cut -c1-220
'"$(pack_logs 226)"
}

call227() {
  emit "call 227 (session 37, on call 226's warm machine; as run) - the GPU suite at session 37's first defaults (the first store on D = 64's 128-row tiles, default and deterministic; call 223: oracle 4/4 and bit identity forced) with the deterministic dQ hand-off under dK exported (env DET_DQ_EARLY=1, the default since) [<= 5.5 min]" \
    nvidia-h200 340 '[".devtools"]' \
"${PRELUDE/NVSHMEM_DISABLE_NVLS=1;/NVSHMEM_DISABLE_NVLS=1 PADDLE_FLASHMASK_BWD_DET_DQ_EARLY=1;}"'
'"${GPU_SUITE_1GPU/-k 20 150 python3/-k 20 200 python3}"'
'"$(pack_logs 227)"
}

call228() {
  emit "call 228 (session 37, on call 227's warm machine; as run) - the deterministic mode on 80-row tiles at D = 128 with the dQ hand-off under dK (env TILE_M=80 + DET_DQ_EARLY=1): the oracle and the 10-rerun bit identity on three bidirectional cases, then default / deterministic 64 rows / deterministic 80 rows, MHA B=4 H=16 and GQA 16/8 B=2 full [<= 4.5 min]" \
    nvidia-h200 270 '[".devtools"]' \
"${PRELUDE/NVSHMEM_DISABLE_NVLS=1;/NVSHMEM_DISABLE_NVLS=1 PADDLE_FLASHMASK_BWD_DET_DQ_EARLY=1;}"'
K=PADDLE_FLASHMASK_BWD
C=full_d128_sq_ne_sk,doc_C2_padding,doc_C2_gqa_partial
env ${K}_TILE_M=80 timeout -s INT -k 10 80 python3 tests/gpu/bwd_check.py --only $C --det-cases $C --json-name bwd_s37_det80_early.json > $OUT/bwd_det80e.log 2>&1; tail -n 1 $OUT/bwd_det80e.log | cut -c1-200
'"$DET80E_AB"'
timeout -s INT -k 10 90 $A --batch 4 --heads 16 --masks full,document,prefix_lm_causal --tag s37_det80_early_mha > $OUT/kab_m.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_m.log | cut -c1-220
timeout -s INT -k 10 50 $A --batch 2 --heads 16 --kv-heads 8 --masks full --tag s37_det80_early_gqa > $OUT/kab_g.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g.log | cut -c1-220
cd $OUT && tar czf /tmp/logs228.tgz $(ls *.log 2>/dev/null) && rm -f *.log && mv /tmp/logs228.tgz . ; ls $OUT'
}

call229() {
  emit "call 229 (session 37, warm; as run) - call 228's A/B on GQA 16/8 B=2 documents and prefix-LM [<= 2 min]" \
    nvidia-h200 110 '[".devtools"]' \
"$DET80E_PRELUDE"'
'"$DET80E_AB"'
timeout -s INT -k 10 70 $A --batch 2 --heads 16 --kv-heads 8 --masks document,prefix_lm_causal --tag s37_det80_early_gqa_doc > $OUT/kab_gd.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_gd.log | cut -c1-220
cd $OUT && tar czf /tmp/logs229.tgz $(ls *.log 2>/dev/null) && rm -f *.log && mv /tmp/logs229.tgz . ; ls $OUT'
}

call230() {
  emit "call 230 (session 37, warm; as run) - deterministic / default at session 37's final defaults on the other four MHA masks (64-row tiles there), B=4 H=16 D=128 [<= 2.5 min]" \
    nvidia-h200 140 '[".devtools"]' \
"$DET80E_PRELUDE"'
'"${DET80E_AB/--variant dete:deterministic=1 /}"'
timeout -s INT -k 10 100 $A --batch 4 --heads 16 --masks causal_document,sliding_window,shared_question,global_sliding_window --tag s37_det80_early_mha_rest > $OUT/kab_r.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_r.log | cut -c1-220
cd $OUT && tar czf /tmp/logs230.tgz $(ls *.log 2>/dev/null) && rm -f *.log && mv /tmp/logs230.tgz . ; ls $OUT'
}

call231() {
  emit "call 231 (session 37, warm; as run) - as call 230 on GQA 16/8 B=2 causal, causal documents, sliding window, shared question [<= 2 min]" \
    nvidia-h200 110 '[".devtools"]' \
"$DET80E_PRELUDE"'
'"${DET80E_AB/--variant dete:deterministic=1 /}"'
timeout -s INT -k 10 80 $A --batch 2 --heads 16 --kv-heads 8 --masks causal,causal_document,sliding_window,shared_question --tag s37_det80_early_gqa_rest > $OUT/kab_gr.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_gr.log | cut -c1-220
cd $OUT && tar czf /tmp/logs231.tgz $(ls *.log 2>/dev/null) && rm -f *.log && mv /tmp/logs231.tgz . ; ls $OUT'
}

call232() {
  emit "call 232 (prepared in session 37, fresh staging) - the GPU suite at session 37's final defaults (the deterministic mode on 80-row tiles at D = 128 with its dQ hand-off under dK: calls 226 and 228 checked them with the oracle and the bit identity on 8 + 3 cases, the suite ran with the hand-off but on 64-row tiles) [<= 6 min]" \
    nvidia-h200 380 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
'"${GPU_SUITE_1GPU/-k 20 150 python3/-k 20 240 python3}"'
'"$(pack_logs 232)"
}

call233() {
  emit "call 233 (prepared in session 37, on a warm machine) - the deterministic mode at session 37's final defaults: the oracle and the 10-rerun bit identity on the bidirectional D = 128 cases (80-row tiles; stops on failure), (the hand-off's env spelled out: its default), then deterministic / default on every mask, MHA B=4 H=16 and GQA 16/8 B=2 at D = 128, MHA and GQA 16/8 at D = 64 (#6 item 1: GQA 16/8 D = 128 at 1.15-1.20x in calls 229 and 231) [<= 7.5 min]" \
    nvidia-h200 460 '[".devtools"]' \
"$PRELUDE"'
C=full_d128_sq_ne_sk,doc_C2_padding,random_C2,full_gqa_sq_gt_sk,doc_C2_gqa_partial,empty_tail_C2_sq_ne_sk
'"$(det_oracle 'PADDLE_FLASHMASK_BWD_DET_DQ_EARLY=1' 170 bwd_s38_det_defaults.json bwd_det.log)"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --variant base: --variant det:deterministic=1"
M=full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal,global_sliding_window
timeout -s INT -k 10 80 $A --batch 4 --heads 16 --head-dim 128 --masks $M --tag s38_det_mha > $OUT/kab_m.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_m.log | cut -c1-160
timeout -s INT -k 10 60 $A --batch 2 --heads 16 --kv-heads 8 --head-dim 128 --masks $M --tag s38_det_gqa > $OUT/kab_g.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g.log | cut -c1-160
timeout -s INT -k 10 40 $A --batch 2 --heads 16 --head-dim 64 --masks full,causal,causal_document,document,sliding_window --tag s38_det_d64_mha > $OUT/kab_dm.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_dm.log | cut -c1-160
timeout -s INT -k 10 40 $A --batch 2 --heads 16 --kv-heads 8 --head-dim 64 --masks full,causal_document,document,sliding_window --tag s38_det_d64_gqa > $OUT/kab_dg.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_dg.log | cut -c1-160
'"$(pack_logs 233)"
}

call234() {
  emit "call 234 (prepared in session 37, on a warm machine) - #6 item 1's last misses, deterministic GQA 16/8 at D = 128 (1.15-1.20x on five masks, calls 229 and 231): the head walk (env GQA_IN_CTA=1: dK/dV summed in registers over the group, as the default mode does) and the interleaved walk (env DET_WALK_INTERLEAVE=1), both measured slower in sessions 16-19, before the deterministic dQ hand-off under dK and the 80-row tiles: the oracle and the 10-rerun bit identity on three GQA cases each (stops on failure), then default / deterministic / + walk / + interleaved walk / + the group's dK/dV summed by bulk ops in head order (env DET_DKV_CHAIN=bulk, session 20: correct, no faster; keeps 64-row tiles), and one / two dQ chains (env DET_CHAINS; the default is two on documents and prefix-LM, one on the causal masks: session 16's rule), GQA 16/8 B=2 D=128 [<= 9 min]" \
    nvidia-h200 550 '[".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
C=full_gqa_sq_gt_sk,doc_C2_gqa_partial,gqa3_causal_doc
'"$(det_oracle '${K}_GQA_IN_CTA=1' 120 bwd_s38_det_walk.json bwd_det_walk.log)"'
'"$(det_oracle '${K}_DET_WALK_INTERLEAVE=1' 120 bwd_s38_det_il.json bwd_det_il.log)"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --head-dim 128 --variant base: --variant det:deterministic=1 --variant detw:deterministic=1,${K}_GQA_IN_CTA=1 --variant detil:deterministic=1,${K}_DET_WALK_INTERLEAVE=1 --variant detb:deterministic=1,${K}_DET_DKV_CHAIN=bulk --variant detc1:deterministic=1,${K}_DET_CHAINS=1 --variant detc2:deterministic=1,${K}_DET_CHAINS=2"
timeout -s INT -k 10 240 $A --batch 2 --heads 16 --kv-heads 8 --masks full,causal,sliding_window,causal_document,document,shared_question,prefix_lm_causal --tag s38_det_walk_gqa > $OUT/kab_w.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_w.log | cut -c1-400
'"$(pack_logs 234)"
}

call235() {
  emit "call 235 (prepared in session 38, fresh staging; not run: no machine came) - the deterministic mode's first store on D = 128's 80-row tiles (full attention, documents, prefix-LM: the chain's first adder stores both dQ^T blocks, the postprocess sums the chains whose semaphore is set per chunk's tile; no zeroed accumulator, calls 233-234 measured its zeroing at ~47 us per chain at B=2 H=16) env TALL_FIRST_STORE=1, built in session 38, and the semaphores sized per padded tile: the oracle and the 10-rerun bit identity on call 233's six cases (stops on failure), deterministic without / with it, and with it on one dQ chain, MHA B=4 H=16 and GQA 16/8 B=2; and the dQ chains by work class on GQA 16/8's causal masks (env DET_CLASS_CHAINS=1: off for GQA masks with columns since session 17, when global + sliding window was not measured; it is 1.46x there, call 233) [<= 6.5 min]" \
    nvidia-h200 400 '[".cutedsl/b", ".devtools"]' \
"$PRELUDE"'
K=PADDLE_FLASHMASK_BWD
C=full_d128_sq_ne_sk,doc_C2_padding,random_C2,full_gqa_sq_gt_sk,doc_C2_gqa_partial,empty_tail_C2_sq_ne_sk
'"$(det_oracle '${K}_TALL_FIRST_STORE=1' 140 bwd_s38_det_first_store.json bwd_det_fs.log)"'
A="python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --head-dim 128 --variant base: --variant det:deterministic=1 --variant detfs:deterministic=1,${K}_TALL_FIRST_STORE=1 --variant detfsc1:deterministic=1,${K}_TALL_FIRST_STORE=1,${K}_DET_CHAINS=1"
timeout -s INT -k 10 60 $A --batch 2 --heads 16 --kv-heads 8 --masks full,document,prefix_lm_causal --tag s38_det_fs_gqa > $OUT/kab_g.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_g.log | cut -c1-300
timeout -s INT -k 10 60 python3 bench/kernel_ab.py --pass bwd --kernel bwd --rounds 3 --calls 3 --head-dim 128 --variant base: --variant det:deterministic=1 --variant detcc:deterministic=1,${K}_DET_CLASS_CHAINS=1 --batch 2 --heads 16 --kv-heads 8 --masks global_sliding_window,sliding_window,causal_document,shared_question --tag s38_det_cc_gqa > $OUT/kab_cc.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_cc.log | cut -c1-300
timeout -s INT -k 10 80 $A --batch 4 --heads 16 --masks full,document,prefix_lm_causal --tag s38_det_fs_mha > $OUT/kab_m.log 2>&1; grep -E "^[a-z_]+ base" $OUT/kab_m.log | cut -c1-300
'"$(pack_logs 235)"
}

call236() {
  emit "call 236 (prepared in session 38, on call 235's warm machine) - the GPU suite with the deterministic first store on 80-row tiles forced (env TALL_FIRST_STORE=1 exported) [<= 5 min]" \
    nvidia-h200 340 '[".devtools"]' \
"${PRELUDE/NVSHMEM_DISABLE_NVLS=1;/NVSHMEM_DISABLE_NVLS=1 PADDLE_FLASHMASK_BWD_TALL_FIRST_STORE=1;}"'
'"${GPU_SUITE_1GPU/-k 20 150 python3/-k 20 200 python3}"'
'"$(pack_logs 236)"
}

CALLS="call0 call1 call2 call3 call4 call2b call4b call6 call7 call5a call5b call10 call11 call12 call13 call14 call15 call16 call17 call18 call19 call20 call21 call22 call23 call24 call25 call26 call27 call28 call29 call29b call30 call31 call35 call36 call37 call38 call39 call40 call41 call42 call43 call44 call45 call46 call47 call48 call49 call50 call51 call52 call53 call54 call55 call56 call57 call58 call59 call60 call61 call62 call63 call64 call65 call66 call66s call67 call68 call69 call69b call70 call70b call71 call72 call73 call74 call75 call76 call77 call78 call79 call80 call81 call82 call83 call84 call85 call86 call87 call88 call89 call90 call91 call92 call93 call94 call95 call96 call97 call98 call99 call100 call101 call102 call103 call104 call105 call106 call107 call108 call109 call110 call111 call112 call113 call114 call115 call116 call117 call118 call119 call120 call121 call122 call123 call124 call125 call126 call127 call128 call129 call130 call131 call132 call133 call134 call135 call136 call137 call138 call139 call140 call141 call142 call143 call144 call145 call146 call147 call148 call149 call150 call151 call152 call153 call154 call155 call156 call157 call158 call159 call160 call161 call162 call163 call164 call165 call166 call167 call168 call169 call170 call171 call172 call173 call174 call175 call176 call177 call178 call179 call187 call188 call189 call196 call197 call198 call199 call200 call201 call202 call203 call204 call205 call206 call207 call208 call211 call212 call215 call216 call217 call218 call219 call220 call221 call222 call223 call224 call225 call226 call227 call228 call229 call230 call231 call232 call233 call234 call235 call236"
BY_NAME_ONLY="call5"  # plan B of call 4, run by name only: not printed by `all`

usage() {
  echo "usage: $0 [all|${CALLS// /|}|$BY_NAME_ONLY|check [FILE]|collect DIR|summary|appendix]" >&2; exit 2
}

check() {  # check [FILE]: static checks of the printed calls (or of FILE's), no GPU needed
  local tmp
  tmp=$(mktemp)
  if [ -n "${1:-}" ]; then
    cp "$1" "$tmp"
  else  # the default calls, the shrunk ones and plan B's extra call
    { for c in $CALLS; do "$c"; done; GS_QUICK=1 "$ROOT/scripts/gpu_session.sh" all; call5; } > "$tmp"
  fi
  local rc=0
  CALLS_FILE=$tmp python3 - <<'PY' || rc=$?
import json, os, re, subprocess, sys

calls = [json.loads(l) for l in open(os.environ["CALLS_FILE"]) if l.startswith("{")]
errors = []
# what travels besides the carry: tracked + untracked-not-ignored files (0 outside a git checkout)
listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True).stdout
files = [f for f in listed.decode().split("\0") if f and os.path.isfile(f)]
tree = sum(os.path.getsize(f) for f in files)
for i, call in enumerate(calls):
    cmd, name = call["command"], f"call #{i} ({call['kind']})"
    if len(cmd) > 2000:
        errors.append(f"{name}: command is {len(cmd)} > 2000 characters")
    if not 1 <= call["timeout_s"] <= 600:
        errors.append(f"{name}: timeout_s {call['timeout_s']} outside 1..600")
    if len(call["carry"]) > 8:
        errors.append(f"{name}: more than 8 carried paths")
    carried = 0
    for path in call["carry"]:
        if os.path.exists(path):
            carried += int(subprocess.run(["du", "-sb", path], capture_output=True, text=True).stdout.split()[0])
        elif path not in (".whl", ".devtools", "old31") and not path.startswith(".cutedsl"):
            # the staging folders are built per machine (docs/gpu_session.md), absent in a clean
            # clone; old31/ is session 31's code, `git archive 646f5fb` (call 216's COMMANDS.md)
            errors.append(f"{name}: carried path {path} does not exist here")
    if tree + carried > 64 * 2**20:
        errors.append(f"{name}: working tree + carry = {(tree + carried) / 2**20:.1f} MiB > 64 MiB")
    # bounded: every GPU program (python3, torchrun, nvidia-smi) is started by `timeout`
    # (a plain `python3 -c "import <module>"` probe that touches no GPU is the one exception)
    for line in cmd.splitlines():
        for prog in re.finditer(r"(?:^|[;&|]\s*|\s)(python3|torchrun|nvidia-smi)\b", line):
            before = line[:prog.start(1)]
            if re.search(r"timeout (-s \w+ )?(-k \d+ )?(\d+|\$\d)\s+(ncu [^|;&]*\s)?$", before):
                continue
            if re.match(r'python3 -c "import [\w.]+"', line[prog.start(1):]):
                continue
            errors.append(f"{name}: not under timeout: {line.strip()[:120]}")
    # the call's own time limits (limit + kill grace, summed) end before the run tool's limit,
    # leaving 15 s for sourcing/unpacking the DSL: our timeouts fire first, $OUT comes back
    # lanes run side by side (consecutive `( ... ) &` lines up to a `wait`) count as the longest
    def limits(text):
        return sum(int(n) + int(k or 0) for k, n in
                   re.findall(r"(?<![-\w])timeout (?:-s \w+ )?(?:-k (\d+) )?(\d+)", text))
    bounded, lanes = 0, []
    for line in cmd.splitlines():
        if line.startswith("(") and line.rstrip().endswith("&"):
            lanes.append(limits(line))
            continue
        if lanes and line.startswith("wait"):
            bounded, lanes = bounded + max(lanes), []
        bounded += limits(line)
    bounded += sum(lanes)
    if bounded + 15 > call["timeout_s"]:
        errors.append(f"{name}: its timeouts add up to {bounded} s + 15 s staging > timeout_s {call['timeout_s']}")
    # the scripts exist and accept the flags we pass (their argparse source names each flag)
    for m in re.finditer(r"python3 (?:-m torch\.distributed\.run --nproc_per_node \d+ )?((?:tests|bench)/\S+\.py)([^|;\n]*)", cmd):
        script, flags = m.group(1), re.findall(r"(--[\w-]+)", m.group(2))
        if not os.path.exists(script):
            errors.append(f"{name}: {script} does not exist")
            continue
        src = open(script).read()
        for flag in flags:
            if f'"{flag}"' not in src:
                errors.append(f"{name}: {script} has no option {flag}")
for e in errors:
    print("gpu_session check:", e)
# stage A (carry .cutedsl/a, built per machine): session 37's try was refused at 16.3 MB of
# tracked files (18.3 MB in disk blocks) + part a's 50.2 MB; reported, not an error (a clean
# clone has no part a): over the limit, move bench/results out for the device calls
if os.path.isdir(".cutedsl/a"):
    part_a = int(subprocess.run(["du", "-sb", ".cutedsl/a"], capture_output=True, text=True).stdout.split()[0])
    blocks = sum(os.stat(f).st_blocks * 512 for f in files)
    if max(tree, blocks) + part_a > 63 * 2**20:
        print(f"gpu_session check: stage A would carry {(tree + part_a) / 2**20:.1f} MiB "
              f"({(blocks + part_a) / 2**20:.1f} MiB in disk blocks) of 64: move bench/results out "
              f"for the device calls (docs/gpu_session.md, 'Session 37')")
print(f"gpu_session check: {len(calls)} calls, {len(errors)} problems (tree {tree / 2**20:.1f} MiB)")
sys.exit(1 if errors else 0)
PY
  rm -f "$tmp"
  return $rc
}

collect() {  # collect DIR: one call's returned files -> $RESULTS (JSON, PNG; checks under validation/), $LOGS
  local src=${1:?usage: collect FILES_AT_DIR}
  mkdir -p "$RESULTS/validation" "$LOGS"
  for f in "$src"/*.json "$src"/*.png; do
    [ -e "$f" ] || continue
    case $(basename "$f") in
      gpu_report.json|bwd_check.json|fwd_check*.json|wo_*.json|ranges_*.json|profile_call.json) cp -v "$f" "$RESULTS/validation/" ;;
      *) cp -v "$f" "$RESULTS/" ;;
    esac
  done
  for f in "$src"/*.log; do if [ -e "$f" ]; then cp -v "$f" "$LOGS/"; fi; done
}

summary() {  # the numbers the README's performance section and issue 6 need
  RESULTS=$RESULTS python3 - <<'PY'
import glob, json, os

R = os.environ["RESULTS"]
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None

v = load(f"{R}/validation/gpu_report.json")
print("gpu_report.json:", "present" if v else "missing")
for name in ("fwd_check", "fwd_check_fast", "wo_cases", "wo_fast"):
    r = load(f"{R}/validation/{name}.json")
    print(f"{name}:", r["summary"] if r and "summary" in r else "missing")
b = load(f"{R}/validation/bwd_check.json")
if b:
    print(f"bwd_check: {b.get('passed')}/{b.get('total')} cases; determinism",
          [(d["name"], d.get("bit_identical"), d.get("pass")) for d in b.get("determinism", [])])
    for row in b.get("bench", []) if isinstance(b.get("bench"), list) else []:
        if "det_ms" in row and "ms" in row:
            print(f"  bwd {row.get('name', '?')}: deterministic / default = {row['det_ms'] / row['ms']:.3f} (<= 1.15)")
# issue 6 item 3: fwd+bwd TFLOP/s >= 1.05 x best peer, B=4 S=8K (case 0)
ISSUE_PEERS = {"full": 629, "causal": 580, "sliding_window": 438, "causal_document": 473, "document": 550,
               "shared_question": 312, "prefix_lm_causal": 556, "global_sliding_window": 374}
for path in sorted(glob.glob(f"{R}/bench-*.json")):
    rows = load(path)["results"]
    print(f"\n{os.path.basename(path)}: mask, ours fwd+bwd TF, best same-run peer, ratio, issue peer, ratio")
    for case in sorted({(r["B"], r["S"], r["H"], r["Hk"], r["D"]) for r in rows}):
        for mask in dict.fromkeys(r["mask"] for r in rows):
            rs = [r for r in rows if (r["B"], r["S"], r["H"], r["Hk"], r["D"]) == case and r["mask"] == mask]
            ours = next((r.get("fwdbwd_tflops") for r in rs if r["system"] == "paddle_flashmask"), None)
            peers = [(r.get("fwdbwd_tflops"), r["system"]) for r in rs if r["system"] != "paddle_flashmask" and r.get("fwdbwd_tflops")]
            best = max(peers) if peers else (None, "-")
            ip = ISSUE_PEERS.get(mask) if case[:2] == (4, 8192) and case[2:] == (16, 16, 128) else None
            f = lambda x: "-" if x is None else f"{x:.1f}"
            ratio = lambda a, c: "-" if a is None or not c else f"{a / c:.2f}"
            err = next((r["error"][:60] for r in rs if r["system"] == "paddle_flashmask" and "error" in r), "")
            print(f"  {case} {mask:22s} {f(ours):>7} {f(best[0]):>7} ({best[1]}) {ratio(ours, best[0]):>5} "
                  f"{f(ip):>5} {ratio(ours, ip):>5} {err}")
e = load(f"{R}/e2e_step.json")
if e:
    print("\ne2e_step:", {k: (round(r["tokens_per_s"]) if r.get("ok") else r.get("error", "")[:80])
                         for k, r in e["results"].items()})
    print("  loss check:", e["comparison"].get("loss_check_pass"), " speedups:",
          {k: round(s["speedup"], 3) for k, s in e["comparison"].get("speedups", {}).items()})
c = load(f"{R}/cp_scaling.json")
if c:
    print("\ncp_scaling:", c["world_size"], "GPUs, speedup", c["speedup"], "errors", c["max_rel_error_vs_single_device"])
PY
}

appendix() {  # rewrite the appendix of $DOC (docs/gpu_session.md) with the current calls
  local tmp
  tmp=$(mktemp)
  for c in $CALLS; do "$c"; done > "$tmp"
  CALLS_FILE=$tmp DOC=$DOC python3 - <<'PY'
import os, re
path = os.environ["DOC"]
text = open(path).read()
import json
out = []
for line in open(os.environ["CALLS_FILE"]):
    if line.startswith("{"):
        call = json.loads(line)
        out += ["run arguments: " + line.rstrip(), "the command, readable:"]
        out += ["    " + c for c in call["command"].splitlines()]
    elif line.strip():
        out.append(line.rstrip())
    else:
        out.append("")
block = "<!-- calls:begin -->\n```text\n" + "\n".join(out).rstrip() + "\n```\n<!-- calls:end -->"
text = re.sub(r"<!-- calls:begin -->.*<!-- calls:end -->", lambda m: block, text, flags=re.S)
open(path, "w").write(text)
PY
  rm -f "$tmp"
}

case "${1:-all}" in
  all) for c in $CALLS; do "$c"; done ;;
  call*) if [[ " $CALLS $BY_NAME_ONLY " == *" $1 "* ]]; then "$1"; else usage; fi ;;
  check) shift; check "$@" ;;
  collect) shift; collect "$@" ;;
  summary) summary ;;
  appendix) appendix ;;
  *) usage ;;
esac
