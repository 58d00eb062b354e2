#!/usr/bin/env bash
# Issue 20 target 3: the Python-backend identity model (../shared/bench/peers/triton_python_identity_model.py,
# the harness's /tmp/bench_work/triton_py_repo/identity folder) served by the real Triton (T) and by
# `workbench serve` (W), both from the same model folder, perf_analyzer at c=16, batch 1, HTTP binary and gRPC,
# rounds alternating T, W, T, W, ... inside one run under the benchmark lock. Prints a table of medians.
#
#   bash bench/python_backend_vs_triton.sh [OUT_DIR]
#
# Env: ROUNDS=3 (rounds per server), INTERVAL=2000 (ms per window), WINDOWS=3, CONC=16, PROTOS="http grpc",
#      PORT_BASE=8300 (ours: BASE/BASE+1/BASE+2; Triton: BASE+10..12), SHARED_BENCH, WB_BIN (the venv's workbench),
#      LOCK=/tmp/bench.lock (set LOCK=none to run unlocked), PA=/tmp/bench_bin/perf_analyzer,
#      B_SRC=<another source tree of workbench>: also serve it as "B" (ports BASE+20..22), measured T, W, B, ...
#      (before/after comparisons in one run; e.g. `git archive <commit> | tar -x -C /tmp/b`).
# Both servers start (and warm up) before the lock is taken; only the measurement loop holds it.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SB=${SHARED_BENCH:-$ROOT/../shared/bench}
[[ -d $SB ]] || SB=/work/shared/bench
WORK=${BENCH_WORK:-/tmp/bench_work}
PA=${PA:-${BENCH_BIN:-/tmp/bench_bin}/perf_analyzer}
WB_BIN=${WB_BIN:-$ROOT/.venv/bin/workbench}
[[ -x $WB_BIN ]] || WB_BIN=/work/main/.venv/bin/workbench
ROUNDS=${ROUNDS:-3} INTERVAL=${INTERVAL:-2000} WINDOWS=${WINDOWS:-3} CONC=${CONC:-16}
PROTOS=${PROTOS:-"http grpc"} BASE=${PORT_BASE:-8300} LOCK=${LOCK:-/tmp/bench.lock}
OUT=${1:-$WORK/results/pyback-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT/raw"
SRC=$WORK/triton_py_repo/identity
[[ -f $SRC/config.pbtxt ]] || { echo "no $SRC (run the harness's make_models.py)" >&2; exit 1; }
REPO=$OUT/repo
mkdir -p "$REPO" && ln -sfn "$SRC" "$REPO/identity"   # one repository holding only `identity`, for both
DATA=(); [[ -f $WORK/data/identity.json ]] && DATA=(--input-data "$WORK/data/identity.json")
log() { echo "[pyback $(date +%H:%M:%S)] $*"; }

W_HTTP=$BASE W_GRPC=$((BASE + 1)) W_METRICS=$((BASE + 2))
T_HTTP=$((BASE + 10)) T_GRPC=$((BASE + 11)) T_METRICS=$((BASE + 12))
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
setsid env PYTHONPATH="$ROOT" "$WB_BIN" serve --model-repository="$REPO" --http-address=127.0.0.1 \
  --http-port=$W_HTTP --grpc-port=$W_GRPC --metrics-port=$W_METRICS >"$OUT/ours.server.log" 2>&1 &
PIDS+=($!)
LABELS="T W"
if [[ -n ${B_SRC:-} ]]; then
  setsid env PYTHONPATH="$B_SRC" "$WB_BIN" serve --model-repository="$REPO" --http-address=127.0.0.1 \
    --http-port=$((BASE + 20)) --grpc-port=$((BASE + 21)) --metrics-port=$((BASE + 22)) >"$OUT/b.server.log" 2>&1 &
  PIDS+=($!)
  LABELS="T W B"
fi
setsid bash "$SB/tritonserver.sh" --model-repository="$REPO" --http-address=127.0.0.1 --http-port=$T_HTTP \
  --grpc-address=127.0.0.1 --grpc-port=$T_GRPC --metrics-address=127.0.0.1 --metrics-port=$T_METRICS \
  >"$OUT/triton.server.log" 2>&1 &
PIDS+=($!)
for port in $W_HTTP $T_HTTP ${B_SRC:+$((BASE + 20))}; do
  for _ in $(seq 1 180); do
    curl -sf "http://127.0.0.1:$port/v2/models/identity/ready" >/dev/null && break
    sleep 1
  done
  curl -sf "http://127.0.0.1:$port/v2/models/identity/ready" >/dev/null || { echo "server on $port not ready" >&2; exit 1; }
done
log "both ready; out=$OUT"

pa() {  # label proto round [extra...]
  local label=$1 proto=$2 round=$3; shift 3
  local port fmt=()
  if [[ $label == T ]]; then port=$T_HTTP; [[ $proto == grpc ]] && port=$T_GRPC
  elif [[ $label == B ]]; then port=$((BASE + 20)); [[ $proto == grpc ]] && port=$((BASE + 21))
  else port=$W_HTTP; [[ $proto == grpc ]] && port=$W_GRPC; fi
  [[ $proto == http ]] && fmt=(--input-tensor-format=binary --output-tensor-format=binary)
  timeout 120 "$PA" -m identity -u "127.0.0.1:$port" -i "$proto" "${fmt[@]}" -b 1 "${DATA[@]}" --percentile 99 \
    --measurement-mode time_windows -s 999 -r "$WINDOWS" --concurrency-range "$CONC" "$@"
}

measure() {
  echo "machine probe: $(python3 -c '
import time, numpy as np
a = np.ones(32 * 2**20, np.uint8); b = np.empty_like(a); t = time.perf_counter()
for _ in range(10): np.copyto(b, a)
print(f"numpy 32 MiB copy {320 / 1024 / (time.perf_counter() - t):.2f} GB/s")' 2>/dev/null || echo n/a)"
  for proto in $PROTOS; do
    for label in $LABELS; do pa $label "$proto" 0 -p 1000 >"$OUT/raw/${label}__${proto}__warmup.log" 2>&1; done
    for r in $(seq 1 "$ROUNDS"); do
      for label in $LABELS; do
        base=$OUT/raw/${label}__${proto}__r$r
        if pa $label "$proto" "$r" -p "$INTERVAL" -f "$base.csv" --verbose-csv -v >"$base.log" 2>&1; then
          log "$label $proto r$r: $(tail -1 "$base.csv" | cut -d, -f2) infer/s, p99 $(tail -1 "$base.csv" | cut -d, -f13) us"
        else
          log "$label $proto r$r: FAILED (see $base.log)"
        fi
      done
    done
  done
}
export -f measure pa log
export OUT PROTOS ROUNDS LABELS BASE INTERVAL WINDOWS CONC PA W_HTTP W_GRPC T_HTTP T_GRPC
export DATA_FLAGS="${DATA[*]}"
if [[ $LOCK == none ]]; then measure; else flock "$LOCK" bash -c 'DATA=($DATA_FLAGS); measure'; fi 2>&1 | tee "$OUT/run.log"

python3 - "$OUT" <<'EOF'
import csv, glob, os, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "raw", "*__r*.csv"))):
    label, proto, _ = os.path.basename(path)[:-4].split("__")
    with open(path) as f:
        rec = list(csv.DictReader(f))[-1]
    rows.setdefault((proto, label), []).append((float(rec["Inferences/Second"]), float(rec["p99 latency"]) / 1000))
lines = ["| protocol | Triton infer/s (rounds) | workbench infer/s (rounds) | Triton median | workbench median | ratio W/T | p99 ms T / W (median) |",
         "|---|---|---|---|---|---|---|"]
extra = []
for proto in ("http", "grpc"):
    t, w = rows.get((proto, "T"), []), rows.get((proto, "W"), [])
    if not t or not w:
        continue
    mt, mw = statistics.median(x for x, _ in t), statistics.median(x for x, _ in w)
    pt, pw = statistics.median(p for _, p in t), statistics.median(p for _, p in w)
    lines.append(f"| {proto} | {' / '.join(f'{x:.0f}' for x, _ in t)} | {' / '.join(f'{x:.0f}' for x, _ in w)} | "
                 f"{mt:.0f} | {mw:.0f} | **{mw / mt:.2f}** | {pt:.1f} / {pw:.1f} |")
    b = rows.get((proto, "B"), [])
    if b:
        mb = statistics.median(x for x, _ in b)
        extra.append(f"| {proto} | {' / '.join(f'{x:.0f}' for x, _ in b)} | {mb:.0f} | {mb / mt:.2f} | {mw / mb:.2f} | "
                     f"{statistics.median(p for _, p in b):.1f} |")
if extra:
    lines += ["", "| protocol | B infer/s (rounds) | B median | ratio B/T | ratio W/B | p99 ms B |",
              "|---|---|---|---|---|---|", *extra]
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
