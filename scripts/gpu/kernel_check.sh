#!/usr/bin/env bash
# One GPU call that checks and times the FP8 MLA decode kernel (no SGLang needed: the image's torch and
# triton are enough), writing everything under $OUT:
#   1. the kernel's GPU tests through the CUDA path (tests/gpu, conftest-free: the image has no pydantic);
#   2. benchmarks/fp8_mla_cuda_quick.py: correctness checks, then CUDA-graph us per layer and eager host us
#      on the key shapes, beside an earlier copy of kernels/ in the same process when BASELINE holds one
#      (a folder with kernels_old/, e.g. `git archive REV kernels | tar -x -C .old && mv .old/kernels .old/kernels_old`);
#   3. the same call in pools of 6.3M and 19.3M tokens (a live server's FP8 pool at mem-fraction 0.1 / 0.3).
# Usage: scripts/gpu/kernel_check.sh [TEST_SECONDS] [BENCH_SECONDS]   (BASELINE=.old by default)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/kernel-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
BASELINE=${BASELINE:-.old}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$OUT/gpu.txt" 2>&1
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' >>"$OUT/gpu.txt" 2>&1

# -k: the whole host-side module, and every decode test that runs the CUDA path (the auto dispatch picks
# it on sm_90 when no Triton config is given); the Triton-config tests JIT-compile for minutes.
timeout "${1:-80}" python3 -m pytest --noconftest -q -p no:cacheprovider \
  tests/gpu/test_fp8_mla_cuda_host.py tests/gpu/test_fp8_mla_decode.py -k "cuda or large_default or batch_128" \
  2>&1 | tee "$OUT/pytest.log"
echo "pytest rc=${PIPESTATUS[0]}" | tee -a "$OUT/pytest.log"

base=()
[ -d "$BASELINE/kernels_old" ] && base=(--baseline "$BASELINE")
timeout "${2:-110}" python3 benchmarks/fp8_mla_cuda_quick.py --no-triton "${base[@]}" \
  --shapes 16x64x8192,16x64x2048,8x64x32768,8x8x2048,16x8x8192,16x1x131072,8x1x131072,8x128x8192,64x8x8192,128x64x8192 \
  --pools 16x8x2048:6284825,19258615 --out "$OUT/quick.json" 2>&1 | tee "$OUT/quick.log"
echo "quick rc=${PIPESTATUS[0]}" | tee -a "$OUT/quick.log"
