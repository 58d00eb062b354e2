#!/usr/bin/env bash
# mlp at concurrency 16 over HTTP (binary tensors; MLServer: JSON, it has no binary extension), ours next to
# MLServer / KServe / Triton in one sitting, via the shared harness's run_peer.sh (one call per peer):
#   bash bench/peers_mlp_c16.sh [OUT_DIR]
# ours = `workbench serve` on /tmp/bench_work/triton_repo (mlp: dynamic_batching { max_queue_delay_microseconds: 1000 }),
# HTTP only (--grpc none) unless GRPC=1 (then gRPC too), metrics on a free port. Env: PEERS (run order), REPS=2,
# SHARED_BENCH, GRPC.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SB=${SHARED_BENCH:-$ROOT/../shared/bench}
OUT=${1:-/tmp/bench_work/results/ours-mlp-c16-$(date +%Y%m%d-%H%M%S)}
PEERS=${PEERS:-mlserver triton ours kserve}
export LOADGEN_CONC="" PYTHONDONTWRITEBYTECODE=1
export OURS_ARGS=none OURS_CMD="$ROOT/.venv/bin/workbench serve --http-address=127.0.0.1"' --model-repository=$BENCH_REPO --http-port=$HTTP_PORT --grpc-port=$GRPC_PORT --metrics-port=0'
GRPC_ARGS=(--grpc none)
[[ ${GRPC:-0} == 1 ]] && GRPC_ARGS=()
mkdir -p "$OUT"
exec > >(tee -a "$OUT/peers.log") 2>&1
echo "== peers_mlp_c16 $(date -Is) peers='$PEERS' out=$OUT"
(while sleep 20; do { date +%T; top -bn1 -w 200 | sed -n '1,3p;7,12p'; } >>"$OUT/load.log"; done) &
MON=$!
trap 'kill $MON 2>/dev/null' EXIT
for p in $PEERS; do
  echo "== peer $p $(date +%T)"
  if [[ $p == ours ]]; then
    bash "$SB/run_peer.sh" ours --out "$OUT" --models mlp --conc "16" --reps "${REPS:-2}" "${GRPC_ARGS[@]}" --http-formats binary
  else
    bash "$SB/run_peer.sh" "$p" --out "$OUT" --models mlp --conc "16" --reps "${REPS:-2}" "${GRPC_ARGS[@]}"
  fi
done
python3 "$SB/summarize.py" "$OUT" >/dev/null
echo "== done $(date +%T); tables: $OUT/tables.md"
