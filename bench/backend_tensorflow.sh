#!/usr/bin/env bash
# Issue 22, tensorflow backend: digits_savedmodel (TF SavedModel) next to digits_mlp v1 (ONNX Runtime, the same
# weights) in one `workbench serve`, with the real perf_analyzer at concurrency 1 and 16, HTTP (binary tensors)
# and gRPC; then each library called directly in a loop (batch 1, one thread) as the peer line.
#   flock /tmp/bench.lock bash bench/backend_tensorflow.sh [OUT_DIR]
# Env: PYTHON (default /work/main/.venv/bin/python), REPO (the sample repository), PA (perf_analyzer wrapper),
# INTERVAL (ms per window, 2000), WINDOWS (max windows until 3 agree, 6). Prints one markdown row per model x protocol x concurrency.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-/work/main/.venv/bin/python}
REPO=${REPO:-$ROOT/sample_models/repository}
PA=${PA:-/tmp/bench_bin/perf_analyzer}
INTERVAL=${INTERVAL:-2000} WINDOWS=${WINDOWS:-6}
OUT=${1:-/tmp/bench_work/results/tensorflow-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
export PYTHONPATH=$ROOT PYTHONDONTWRITEBYTECODE=1 TF_CPP_MIN_LOG_LEVEL=2

# input data: the first 64 held-out digits, one request each (perf_analyzer's --input-data JSON)
"$PYTHON" - "$OUT/pixels.json" <<'EOF'
import json, sys
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
x, y = load_digits(return_X_y=True)
_, x_test, _, _ = train_test_split(x, y, test_size=0.25, random_state=0)
rows = [{"pixels": {"content": [float(v) for v in r], "shape": [64]}} for r in x_test[:64]]
json.dump({"data": rows}, open(sys.argv[1], "w"))
EOF

read -r HTTP_PORT GRPC_PORT < <("$PYTHON" -c "from workbench.testing.process import free_ports; print(*free_ports(2))")
"$PYTHON" -m workbench.hosts.cli serve --model-repository="$REPO" --model-control-mode=explicit \
  --load-model=digits_savedmodel --load-model=digits_mlp --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" \
  --metrics-port=0 >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 120); do
  curl -sf "localhost:$HTTP_PORT/v2/models/digits_savedmodel/ready" >/dev/null && \
    curl -sf "localhost:$HTTP_PORT/v2/models/digits_mlp/versions/1/ready" >/dev/null && break
  sleep 1
done

echo "| model | protocol | concurrency | infer/s | p50 ms | p99 ms |"
echo "|---|---|---:|---:|---:|---:|"
for model in digits_savedmodel digits_mlp; do
  version=""; [[ $model == digits_mlp ]] && version="-x 1"
  for proto in http grpc; do
    url="localhost:$HTTP_PORT"; fmt="--input-tensor-format=binary --output-tensor-format=binary"
    [[ $proto == grpc ]] && { url="localhost:$GRPC_PORT"; fmt=""; }
    for c in 1 16; do
      csv="$OUT/${model}__${proto}__c$c.csv"
      # shellcheck disable=SC2086
      timeout 120 "$PA" -m "$model" $version -u "$url" -i "$proto" $fmt -b 1 --input-data "$OUT/pixels.json" \
        --percentile 99 --measurement-mode time_windows -p "$INTERVAL" -s 999 -r "$WINDOWS" \
        --concurrency-range "$c" -f "$csv" >"$OUT/${model}__${proto}__c$c.log" 2>&1 || echo "  (perf_analyzer failed: $csv)"
      "$PYTHON" - "$csv" "$model" "$proto" "$c" <<'EOF'
import csv, sys
path, model, proto, c = sys.argv[1:]
try:
    row = next(csv.DictReader(open(path)))
except (OSError, StopIteration):
    sys.exit(0)
print(f"| {model} | {proto} | {c} | {float(row['Inferences/Second']):.0f} | "
      f"{int(row['p50 latency']) / 1000:.2f} | {int(row['p99 latency']) / 1000:.2f} |")
EOF
    done
  done
done
kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null

# peer line: each library alone, batch 1, a loop of calls (no server)
"$PYTHON" - "$REPO" <<'EOF'
import sys, time
import numpy as np
from workbench.config.tensorflow_signature import import_tensorflow
tf = import_tensorflow()
import onnxruntime as ort
repo = sys.argv[1]
x = np.random.default_rng(0).integers(0, 17, (1, 64)).astype(np.float32)
serve = tf.saved_model.load(f"{repo}/digits_savedmodel/1/model.savedmodel").signatures["serving_default"]
opts = ort.SessionOptions(); opts.intra_op_num_threads = 1
sess = ort.InferenceSession(f"{repo}/digits_mlp/1/model.onnx", opts, providers=["CPUExecutionProvider"])
calls = {"tensorflow signature call": lambda: serve(pixels=tf.constant(x))["logits"].numpy(),
         "onnxruntime session.run": lambda: sess.run(["logits"], {"pixels": x})[0]}
for name, call in calls.items():
    for _ in range(200):
        call()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < 3:
        call(); n += 1
    took = time.perf_counter() - start
    print(f"direct {name}: {n / took:.0f} calls/s ({took / n * 1e6:.0f} us per call)")
EOF
