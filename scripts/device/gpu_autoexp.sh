#!/usr/bin/env bash
# The multi-GPU fault scenarios under `autoexp run`, on the 2-GPU machine, in two device calls:
#
#   scripts/device/gpu_autoexp.sh start    # call 1: the >= 10 min healthy run (detached), then
#                                          #   every fault x {600 s, 30 s} collective timeout
#                                          #   side by side (~5 min); its table and logs to $OUT
#   scripts/device/gpu_autoexp.sh faults   # the faults alone, one call (~6 min)
#   scripts/device/gpu_autoexp.sh finish   # call 2 (within the machine's warm window): wait for
#                                          #   the healthy run, then the whole table and logs
#
# Needs the monitor's own dependencies as wheels in .whl (the machine has torch, not pydantic &c.).
set -uo pipefail
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"  # the NCCL environment (multicast off); use_wheels, env_report
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:?set OUT}
W=${W:-/tmp/gpu_autoexp}
use_wheels "$ROOT"
S=scripts/device/gpu_scenarios.py

pack() {  # logs with the work dir's paths made relative
  python3 $S table "$W" "$OUT/outcomes.json" | tee "$OUT/summary.txt"
  tar -czf "$OUT/logs.tar.gz" -C "$W" --exclude='checkpoints' --exclude='*.db-*' . 2>/dev/null
}

case "${1:-}" in
  start)
    rm -rf "$W" && mkdir -p "$W"
    env_report "$OUT/env.txt"
    python3 $S start-healthy "$W"
    python3 $S faults "$W" --timeouts 600,30 --limit-s "${LIMIT_S:-330}"
    pack ;;
  faults)  # only the fault scenarios side by side (no healthy run): one call
    rm -rf "$W" && mkdir -p "$W"
    env_report "$OUT/env.txt"
    python3 $S faults "$W" --timeouts 600,30 --limit-s "${LIMIT_S:-330}"
    pack ;;
  finish)
    for _ in $(seq 1 100); do  # the healthy run's monitor writes its exit code when done
      [ -s "$W/healthy/monitor.log" ] && grep -q "stop: Job completed\|stop: " "$W/healthy/monitor.log" && break
      sleep 5
    done
    sleep 3
    pack ;;
  *) echo "usage: $0 start|faults|finish" >&2; exit 2 ;;
esac
