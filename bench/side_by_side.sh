#!/usr/bin/env bash
# Our server next to MLServer / KServe / Triton in one sitting, on the shared harness's models (mlp, minilm):
#   bash bench/side_by_side.sh [OUT_DIR]        (default /tmp/bench_work/results/ours-side-by-side-<timestamp>)
# What ../shared/bench/run_all.sh does (setup, models, raw ORT, one run_peer.sh per peer, summarize.py), except
# that ours is measured over HTTP only (`--grpc none`: no gRPC frontend yet) and started with our own flags
# (OURS_ARGS=none: the harness runs OURS_CMD verbatim with BENCH_REPO/HTTP_PORT exported).
# Env: PEERS="kserve ours mlserver triton" (order = run order), CONC="1 4 16", REPS=2, INTERVAL=3000,
#      SHARED_BENCH (default ../shared/bench beside the checkout). ~25 min for the four servers.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SB=${SHARED_BENCH:-$ROOT/../shared/bench}
OUT=${1:-/tmp/bench_work/results/ours-side-by-side-$(date +%Y%m%d-%H%M%S)}
PEERS=${PEERS:-kserve ours mlserver triton}
SWEEP=(--conc "${CONC:-1 4 16}" --reps "${REPS:-2}" --interval "${INTERVAL:-3000}")
export LOADGEN_CONC="" PYTHONDONTWRITEBYTECODE=1
export OURS_ARGS=none OURS_CMD="$ROOT/.venv/bin/workbench serve --http-address=127.0.0.1"' --model-repository=$BENCH_REPO --http-port=$HTTP_PORT'
mkdir -p "$OUT"
exec > >(tee -a "$OUT/side_by_side.log") 2>&1
echo "== side_by_side $(date -Is) peers='$PEERS' out=$OUT"
lscpu | grep -E "Model name|^CPU\(s\)" >"$OUT/machine.txt"
# other processes competing for the 2 cores show up here (top every 20 s)
(while sleep 20; do { date +%T; top -bn1 -w 200 | sed -n '1,3p;7,12p'; } >>"$OUT/load.log"; done) &
MON=$!
trap 'kill $MON 2>/dev/null' EXIT
bash "$SB/setup.sh" && /tmp/bench_venvs/tools/bin/python "$SB/make_models.py" || exit 1
/tmp/bench_venvs/tools/bin/python "$SB/raw_ort.py" --work /tmp/bench_work --out "$OUT/raw_ort.json" || exit 1
for p in $PEERS; do
  echo "== peer $p $(date +%T)"
  if [[ $p == ours ]]; then
    bash "$SB/run_peer.sh" ours --out "$OUT" "${SWEEP[@]}" --grpc none --http-formats "binary json"
  else
    bash "$SB/run_peer.sh" "$p" --out "$OUT" "${SWEEP[@]}"
  fi
done
python3 "$SB/summarize.py" "$OUT" >/dev/null
echo "== done $(date +%T); tables: $OUT/tables.md"
