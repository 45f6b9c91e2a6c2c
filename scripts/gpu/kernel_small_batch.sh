#!/usr/bin/env bash
# Issue #47 in one GPU call (one H200, about 6 minutes; nothing to install: the image's torch 2.11 and triton 3.6
# are enough, no SGLang, no pydantic). Everything lands under $OUT, at most 8 files:
#   gpu.txt           the GPU, driver, versions, whether FlashMLA and ncu are there
#   pytest.log        the CUDA path's GPU tests (tests/gpu/test_fp8_mla_decode.py -k cuda): the small-batch plan
#                     with 1, a few and 64 clusters a row, cluster sizes 8/4/2, 8-128 heads, scales, FP16 Q, graph
#                     replay with new lengths and its counters back at zero; and every earlier CUDA-path test
#   bench.log, small_batch_checks.json, small_batch_timing.json, small_batch.md
#                     benchmarks/fp8_mla_small_batch.py: errors vs fp32 (bar 2e-3), graph replays, then CUDA-graph
#                     us per layer of ours (new = clusters of 8, cl4, legacy = the 2026-12-01 plan, old = .old's
#                     kernels_old if carried) and FlashMLA FP8 side by side on the issue's shapes and 8/16 heads x
#                     batch 1/2/4/8 x 2K-128K; the markdown says MET/MISSED for the issue's bar
#   ncu.txt           (if ncu is on the image) a handful of counters for 128x64x8K (what bounds the many-head
#                     path, as it is and as mh3: 3 CTAs per SM) and 8x1x8K (the small-batch kernel)
# Prerequisite, where pip reaches PyPI (not on the GPU machine): scripts/gpu/fetch_flashmla.sh, which writes
# .flashmla/ (FlashMLA alone, 15 MB); carry it with the call: run(carry=[".flashmla"]). Without it the run still
# checks and times ours (no FlashMLA column, so no ratios). Optional: an earlier kernels/ as .old/kernels_old/.
# Order: the benchmark first (what the call is for), then pytest, then ncu; each stage has its timeout, so
# the whole call stays under ~8.5 minutes (about 5.5-6 expected).
# Usage: scripts/gpu/kernel_small_batch.sh [CHECK_S=90] [TIMING_S=160] [PYTEST_S=110] [NCU_S_EACH=45]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kernel-small-batch}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
[ -d .flashmla/sgl_kernel ] && export PYTHONPATH="$PWD/.flashmla${PYTHONPATH:+:$PYTHONPATH}"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(0))'
  python3 -c 'from sgl_kernel.flash_mla import flash_mla_with_kvcache, _flashmla_import_error as e; print("flashmla", e or "ok")'
  echo "ncu: $(command -v ncu || echo missing)"
} >"$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

# The benchmark in processes of its own: a device fault ends a process (and its CUDA context), so the checks
# run first, apart; if they crashed, the timing runs the unchanged implementations first, then the new ones.
bench() { timeout "$1" python3 benchmarks/fp8_mla_small_batch.py --out "$OUT" "${base[@]}" "${@:2}" 2>&1 | tee -a "$OUT/bench.log"; return "${PIPESTATUS[0]}"; }
base=()
[ -d .old/kernels_old ] && base=(--baseline .old)
bench "${1:-90}" --tag _checks --sections env,checks,graph
rc=$?
echo "checks rc=$rc (0: all pass, 3: some fail, else a crash or the timeout)" | tee -a "$OUT/bench.log"
t=${2:-160}
if [ "$rc" = 0 ] || [ "$rc" = 3 ]; then
  bench "$t" --tag _timing --sections timing,host
  echo "timing rc=$?" | tee -a "$OUT/bench.log"
  tags=(_checks _timing)
else
  bench $((t * 2 / 3)) --tag _timing_base --sections timing --impls legacy,old,flashmla
  echo "timing (legacy, old, FlashMLA) rc=$?" | tee -a "$OUT/bench.log"
  bench $((t / 3)) --tag _timing_new --sections timing,host --impls new,cl4,new16,mh3
  echo "timing (the small-batch plan) rc=$?" | tee -a "$OUT/bench.log"
  tags=(_checks _timing_base _timing_new)
fi
files=()
for tag in "${tags[@]}"; do [ -f "$OUT/small_batch$tag.json" ] && files+=("$OUT/small_batch$tag.json"); done
[ ${#files[@]} -gt 0 ] && python3 benchmarks/fp8_mla_small_batch.py --report "${files[@]}" --md "$OUT/small_batch.md" | tail -8

timeout "${3:-110}" python3 -m pytest --noconftest -q -p no:cacheprovider --maxfail=10 \
  tests/gpu/test_fp8_mla_decode.py -k cuda 2>&1 | tee "$OUT/pytest.log"
echo "pytest rc=${PIPESTATUS[0]}" | tee -a "$OUT/pytest.log"

if command -v ncu >/dev/null; then
  metrics=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
  metrics+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct
  metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__warps_eligible.avg.per_cycle_active
  metrics+=,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
  metrics+=,sm__inst_executed_pipe_tensor_op_hmma.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
  metrics+=,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread
  # the 64/128-head kernel as it is (one split, 2 CTAs per SM), its 3-CTA variant (mh3), the small-batch kernel
  for run in "128x64x8192" "128x64x8192 2:32:3:Q_REG_KSTEPS=8" "8x1x8192"; do
    read -r shape pcfg <<<"$run"
    echo "=== ncu $shape ${pcfg:-default}" >>"$OUT/ncu.txt"
    timeout "${4:-45}" ncu --clock-control none -k regex:mla_fp8_split -c 1 --metrics "$metrics" \
      python3 benchmarks/fp8_mla_cuda_quick.py --profile "$shape" ${pcfg:+--profile-config "$pcfg"} >>"$OUT/ncu.txt" 2>&1
    echo "ncu $shape ${pcfg:-default} rc=$?" | tee -a "$OUT/ncu.txt"
  done
  grep -E "===|mla_fp8|gpu__time|throughput|hit_rate|warps_|issue_active|inst_executed|pipe_|launch__" "$OUT/ncu.txt" | tail -60
fi
ls -la "$OUT"
