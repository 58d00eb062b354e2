#!/usr/bin/env bash
# Issue 4 benchmark, ours only (peers: GRPC=1 bash bench/peers_mlp_c16.sh):
#   (1) digits_mlp over HTTP (binary tensors) vs gRPC at concurrency $CONC;
#   (2) a large input, [64, 3, 224, 224] FP32 (38.5 MB per request) through `image_mean` (ONNX ReduceMean over H, W
#       -> [64, 3]), plain vs `--shared-memory system`, over HTTP and gRPC, at concurrency $BIG_CONC.
#   bash bench/grpc_shm.sh [OUT_DIR]
# Every point is perf_analyzer, -p $INTERVAL ms windows x $WINDOWS, p99; average batch from the statistics API is not
# needed here (no batching effect is measured). Writes OUT_DIR/table.md and raw logs; exit status = failed points.
# Env: PORT=8000, GRPC_PORT=8001, CONC="1 4 16 32", BIG_CONC="1 4", INTERVAL=3000, WINDOWS=3, PERF_ANALYZER.
set -uo pipefail
cd "$(dirname "$0")/.."
PA=${PERF_ANALYZER:-/tmp/bench_bin/perf_analyzer}
PORT=${PORT:-8000} GRPC_PORT=${GRPC_PORT:-8001} CONC=${CONC:-1 4 16 32} BIG_CONC=${BIG_CONC:-1 4}
INTERVAL=${INTERVAL:-3000} WINDOWS=${WINDOWS:-3}
OUT=${1:-/tmp/wb_grpc_shm/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT/repo"
log() { echo "[grpc_shm $(date +%H:%M:%S)] $*" >&2; }

cp -r sample_models/repository/digits_mlp "$OUT/repo/"
.venv/bin/python - "$OUT/repo" <<'EOF'
import sys
from pathlib import Path
import onnx
from onnx import TensorProto, helper
repo = Path(sys.argv[1]) / "image_mean"
(repo / "1").mkdir(parents=True, exist_ok=True)
graph = helper.make_graph(
    [helper.make_node("ReduceMean", ["IMAGE"], ["MEAN"], axes=[2, 3], keepdims=0)], "image_mean",
    [helper.make_tensor_value_info("IMAGE", TensorProto.FLOAT, ["N", 3, 224, 224])],
    [helper.make_tensor_value_info("MEAN", TensorProto.FLOAT, ["N", 3])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
onnx.save(model, str(repo / "1" / "model.onnx"))
(repo / "config.pbtxt").write_text('name: "image_mean"\nbackend: "onnxruntime"\nmax_batch_size: 64\n'
    'input [ { name: "IMAGE" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]\n'
    'output [ { name: "MEAN" data_type: TYPE_FP32 dims: [ 3 ] } ]\n')
EOF
.venv/bin/python bench/make_inputs.py "$OUT" >/dev/null

.venv/bin/workbench serve --model-repository "$OUT/repo" --http-address=127.0.0.1 --http-port "$PORT" \
  --grpc-port "$GRPC_PORT" --metrics-port 0 --allow-client-shm=true >"$OUT/server.log" 2>&1 &
SPID=$!
trap 'kill -TERM $SPID 2>/dev/null; wait $SPID 2>/dev/null' EXIT
for m in digits_mlp image_mean; do
  for _ in $(seq 120); do
    [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v2/models/$m/ready")" == 200 ]] && break
    sleep 0.5
  done
done

FAILS=0
echo "| model | protocol | shm | batch | conc | infer/s | p50 ms | p99 ms |" >"$OUT/table.md"
echo "|---|---|---|---:|---:|---:|---:|---:|" >>"$OUT/table.md"
point() {  # model proto shm batch conc extra...
  local model=$1 proto=$2 shm=$3 batch=$4 conc=$5; shift 5
  local url="localhost:$PORT" base="$OUT/${model}__${proto}__${shm}__c$conc"
  [[ $proto == grpc ]] && url="localhost:$GRPC_PORT"
  local cmd=("$PA" -m "$model" -u "$url" -i "$proto" -b "$batch" --concurrency-range "$conc" --percentile 99
             --measurement-mode time_windows -p "$INTERVAL" -s 999 -r "$WINDOWS" -f "$base.csv" "$@")
  [[ $shm == system ]] && cmd+=(--shared-memory system --output-shared-memory-size 1024)
  echo "${cmd[*]}" >"$base.cmd"
  if ! timeout 300 "${cmd[@]}" >"$base.log" 2>&1 || grep -qiE 'error|fail' "$base.log"; then
    FAILS=$((FAILS + 1)); log "$model $proto $shm c=$conc FAILED (see $base.log)"; return
  fi
  local tput p50 p99
  tput=$(sed -n 's/.*Throughput: \([0-9.]*\) infer\/sec.*/\1/p' "$base.log" | head -1)
  p50=$(sed -n 's/.*p50 latency: \([0-9]*\) usec.*/\1/p' "$base.log" | head -1)
  p99=$(sed -n 's/.*p99 latency: \([0-9]*\) usec.*/\1/p' "$base.log" | head -1)
  log "$model $proto $shm b=$batch c=$conc: $tput infer/s, p99 $p99 us"
  printf '| %s | %s | %s | %s | %s | %s | %.2f | %.2f |\n' "$model" "$proto" "$shm" "$batch" "$conc" "$tput" \
    "$(echo "$p50/1000" | bc -l)" "$(echo "$p99/1000" | bc -l)" >>"$OUT/table.md"
}
for c in $CONC; do
  point digits_mlp http none 1 "$c" --input-data "$OUT/digits_mlp.json"
  point digits_mlp grpc none 1 "$c" --input-data "$OUT/digits_mlp.json"
done
for c in $BIG_CONC; do
  for proto in http grpc; do
    point image_mean "$proto" none 64 "$c"
    point image_mean "$proto" system 64 "$c"
  done
done
cat "$OUT/table.md"
exit "$FAILS"
