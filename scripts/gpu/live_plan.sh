#!/usr/bin/env bash
# Several live sweeps in one device call, in order, each resumed where an earlier call left it, none starting
# an attempt it could not finish before the call ends:
#   scripts/gpu/live_plan.sh SECONDS EST SWEEP_FILE...
# SECONDS: the wall time the sweeps may take in all; EST: the longest one attempt takes, its server start
# included (no attempt starts with less than EST left). Each sweep is `live_h200.sh sweep` with START_WITHIN
# set from what is left; JIT caches are not packed (SAVE_JIT=0: the next call follows on the same warm machine).
set -uo pipefail
cd "$(dirname "$0")/../.."
end=$((SECONDS + $1))
est=$2
shift 2
for sweep in "$@"; do
  left=$((end - SECONDS))
  if [ "$left" -le "$est" ]; then
    echo "live_plan: $sweep not started (${left} s left, an attempt takes up to ${est} s)"
    continue
  fi
  echo "live_plan: $sweep, ${left} s left"
  START_WITHIN=$((left - est)) SAVE_JIT=0 bash scripts/gpu/live_h200.sh sweep "$left" "$sweep" || true
done
