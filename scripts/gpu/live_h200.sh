#!/usr/bin/env bash
# The live-server runs behind benchmarks/results/real-h200.md, step by step, on a GPU host without
# network that has this checkout and the real-target kit's wheelhouse parts (.wh/part*of*/):
#
#   scripts/gpu/live_h200.sh install .whp/part1of2 [.whp/extra]   # each part in its own call if need be
#                                   (a .jit-cache/jit-cache.tar.gz carried along is restored: FlashInfer, Triton and
#                                    Inductor caches a sweep saved to $OUT — the first server starts in ~90 s, not ~280)
#   scripts/gpu/live_h200.sh setup                               # model, target repos, hosts.yaml, smoke
#   scripts/gpu/live_h200.sh sweep [SECONDS] [SWEEP_FILE]        # the all-backends sweep (resumable; with
#                                   START_WITHIN=S no attempt starts after S seconds, so none is cut at SECONDS)
#   scripts/gpu/live_h200.sh tests [PYTEST ARGS]                 # tests/gpu/test_real_sglang.py
#   scripts/gpu/live_h200.sh slurm [SWEEP_FILE]                  # the same through a one-node Slurm (.slurmdebs/)
#     (.slurmdebs/: on a Debian 12 machine with network, `cd .slurmdebs && apt-get download slurmctld slurmd
#      slurm-client slurm-wlm-basic-plugins munge libmunge2 libhwloc15 libnuma1 liblz4-1 libgcrypt20
#      libgpg-error0 libaudit1 libcap-ng0 libpam0g libudev1 libbz2-1.0 zlib1g libdbus-1-3 libsystemd0`, ≈ 5 MB)
#
# Results (the results dir as a tarball, logs) go to $OUT when it is set.
set -euo pipefail
SITE=${SITE:-/tmp/site}
ROOT=${ROOT:-/tmp/harness-real}
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
# NVLink multicast stays off on a shared box (also inside the servers: setup_host.py writes it in hosts.yaml).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD:$SITE"   # the harness itself: pydantic and ijson from the wheelhouse

save_results() {  # profile traces stay behind (tens of MB); live_pool.py keeps what it reads of them
  [ -d "$ROOT/results" ] && tar -czf "$OUT/results.tar.gz" --exclude='*.trace.json.gz' -C "$ROOT" results || true
  [ "${SAVE_JIT:-1}" = 1 ] && save_jit_cache  # SAVE_JIT=0: the next call follows on the same warm machine
  return 0
}
# The JIT caches a server start fills (FlashInfer's kernels, Triton's, Inductor's), for the next machine: bring
# $OUT/jit-cache.tar.gz back as .jit-cache/jit-cache.tar.gz and carry it with the next install.
JIT_DIRS=(.cache/flashinfer .triton)
save_jit_cache() {
  local dirs=() d
  for d in "${JIT_DIRS[@]}"; do [ -d "$HOME/$d" ] && dirs+=("$HOME/$d"); done
  for d in /tmp/torchinductor_*; do [ -d "$d" ] && dirs+=("$d"); done
  [ ${#dirs[@]} -gt 0 ] && tar -czf "$OUT/jit-cache.tar.gz" -P "${dirs[@]}" 2>/dev/null || true
}
restore_jit_cache() {
  [ -f .jit-cache/jit-cache.tar.gz ] && tar -xzf .jit-cache/jit-cache.tar.gz -P && echo "restored the JIT caches" || true
}

case "${1:-}" in
  install)
    shift
    restore_jit_cache
    for p in "$@"; do
      if compgen -G "$p/*.tar.xz" >/dev/null; then parts+=("$p"); else
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$p"/*.whl
      fi
    done
    [ -n "${parts+x}" ] && bash real-target/install_wheelhouse.sh "${parts[@]}" --target "$SITE"
    du -sh "$SITE" ;;
  setup)
    wheel=$(ls "$SITE.wheels"/sglang-*.whl)
    python3 real-target/setup_host.py --site "$SITE" --sglang-wheel "$wheel" --root "$ROOT"
    nvidia-smi --query-gpu=index,name,memory.used --format=csv
    PYTHONPATH="$ROOT/sglang-gpu0/python:$SITE" python3 -c \
      "import sglang, flashinfer, sgl_kernel; from sglang.srt.server_args import ServerArgs; print('sglang', sglang.__version__, 'flashinfer', flashinfer.__version__)"
    python3 -m harness validate experiments/real-h200/*.yaml experiments/real-h200/real-size/*.yaml --against "$ROOT/sglang-gpu0" ;;
  sweep)
    sweep_file=${3:-experiments/real-h200/all-backends.yaml}
    hosts=$(python3 -c "import json; print(','.join(json.load(open('$ROOT/target.json'))['sweep_hosts']))")
    resume=()
    last=$(python3 -c "from pathlib import Path; from harness.results.store import ResultsStore as S
print((S(Path('$ROOT/results')).runs_of_sweep(Path('$sweep_file')) or [''])[-1])")
    [ -n "$last" ] && resume=(--resume "$last")
    [ -n "${START_WITHIN:-}" ] && resume+=(--start-within "$START_WITHIN")
    set +e
    timeout "${2:-540}" python3 -m harness sweep "$sweep_file" --hosts "$hosts" \
      --hosts-file "$ROOT/hosts.yaml" --results-dir "$ROOT/results" "${resume[@]}" 2>&1 | tee -a "$OUT/sweep.log"
    rc=${PIPESTATUS[0]}
    set -e
    case "$sweep_file" in
      experiments/real-h200/all-backends.yaml) python3 benchmarks/real_h200.py "$ROOT/results" --out "$OUT/real-h200" || true ;;
      experiments/real-h200/cuda-pool-ratio.yaml) python3 benchmarks/live_pool.py "$ROOT/results" --out "$OUT/fp8_mla_live_pool" || true ;;
      experiments/real-h200/real-size/*) python3 benchmarks/real_size.py "$ROOT/results" --out "$OUT/real-size" || true ;;
    esac
    save_results
    exit "$rc" ;;
  tests)
    shift
    set +e
    HARNESS_REAL_TARGET="$ROOT/target.json" python3 -m pytest -v -rs -p no:cacheprovider tests/gpu/test_real_sglang.py "$@" \
      2>&1 | tee "$OUT/gpu-tests.log"
    rc=${PIPESTATUS[0]}
    set -e
    save_results
    exit "$rc" ;;
  slurm)
    prefix=/tmp/slurm-prefix
    mkdir -p "$prefix"
    for f in .slurmdebs/*.deb; do dpkg -x "$f" "$prefix"; done
    # slurmd's cgroup/v2 plugin wants system.slice for its scope; a container without systemd has none.
    [ -d /sys/fs/cgroup/system.slice ] || mkdir /sys/fs/cgroup/system.slice
    set +e
    python3 scripts/gpu/slurm_live.py --prefix "$prefix" --root "$ROOT" --sweep "${2:-experiments/real-h200/slurm.yaml}"
    rc=$?
    set -e
    exit "$rc" ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
