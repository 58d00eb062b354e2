#!/usr/bin/env bash
# Issue 22 (DALI): perf_analyzer against `workbench serve` on the sample repository, models digits_jpeg
# (the ensemble: DALI JPEG decode/resize/scale -> digits_mlp) and digits_jpeg_preprocess (the DALI model
# alone), HTTP binary tensors and gRPC, -b 1, concurrency 1 and 16, 3 windows of 3 s each (stability
# check off: -s 999), after a warm-up at c=16. Input: 16 held-out digits as 32x32 JPEGs (UINT8 [n],
# 630-700 bytes each), rotated by perf_analyzer. Peer: the same pipeline run by DALI directly in a loop
# (batch 1 and batch 16, no server).
#   flock /tmp/bench.lock bash bench/backend_dali.sh [OUT_DIR]
# Env: PYTHON (the venv's python), PERF_ANALYZER (default /tmp/bench_bin/perf_analyzer), REPO (sample repo).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-/work/main/.venv/bin/python}
PA=${PERF_ANALYZER:-/tmp/bench_bin/perf_analyzer}
REPO=${REPO:-$ROOT/sample_models/repository}
OUT=${1:-/tmp/bench_work/results/dali-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
export PYTHONPATH=$ROOT PYTHONDONTWRITEBYTECODE=1
"$PY" - "$OUT/jpegs.json" <<'PYEOF'
import io, json, sys
import numpy as np
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
x, y = load_digits(return_X_y=True)
_, x_test, _, _ = train_test_split(x, y, test_size=0.25, random_state=0)
rows = []
for pixels in x_test[:16]:
    gray = np.clip(np.round(pixels.reshape(8, 8) * 255 / 16), 0, 255).astype(np.uint8)
    image = Image.fromarray(gray, mode="L").resize((32, 32), Image.Resampling.NEAREST)
    buf = io.BytesIO(); image.save(buf, format="JPEG", quality=90); data = list(buf.getvalue())
    rows.append({"IMAGE": {"content": data, "shape": [len(data)]}})
json.dump({"data": rows}, open(sys.argv[1], "w"))
print("jpeg sizes", sorted(len(r["IMAGE"]["content"]) for r in rows))
PYEOF
read -r HTTP_PORT GRPC_PORT < <("$PY" -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]; print(*[x.getsockname()[1] for x in s])')
"$PY" -m workbench.hosts.cli serve --model-repository="$REPO" --model-control-mode=explicit \
    --load-model=digits_jpeg --http-address=127.0.0.1 --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" \
    --metrics-port=0 >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$HTTP_PORT/v2/models/digits_jpeg/ready" >/dev/null && break; sleep 0.5
done
echo "== $(date -u +%FT%TZ) server ready (http $HTTP_PORT, grpc $GRPC_PORT); $(nproc) CPUs; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
for model in digits_jpeg digits_jpeg_preprocess; do
  for proto in http grpc; do
    if [[ $proto == http ]]; then url=127.0.0.1:$HTTP_PORT fmt="--input-tensor-format=binary --output-tensor-format=binary"
    else url=127.0.0.1:$GRPC_PORT fmt=""; fi
    # shellcheck disable=SC2086
    timeout 60 "$PA" -m $model -u $url -i $proto $fmt -b 1 --input-data "$OUT/jpegs.json" \
        --concurrency-range 16 -p 1000 -s 999 -r 3 --measurement-mode time_windows >/dev/null 2>&1
    for c in 1 16; do
      # shellcheck disable=SC2086
      timeout 90 "$PA" -m $model -u $url -i $proto $fmt -b 1 --input-data "$OUT/jpegs.json" \
          --percentile 99 --measurement-mode time_windows -p 3000 -s 999 -r 3 --concurrency-range $c \
          -f "$OUT/$model.$proto.c$c.csv" >"$OUT/$model.$proto.c$c.log" 2>&1
      "$PY" - "$OUT/$model.$proto.c$c.csv" "$model" "$proto" "$c" <<'PYEOF'
import csv, sys
row = next(csv.DictReader(open(sys.argv[1])))
print(f"{sys.argv[2]:24s} {sys.argv[3]:5s} c={sys.argv[4]:>2s}  {float(row['Inferences/Second']):8.1f} infer/s  "
      f"p50 {int(row['p50 latency'])/1000:6.2f} ms  p99 {int(row['p99 latency'])/1000:6.2f} ms")
PYEOF
    done
  done
done
kill $SERVER; wait $SERVER 2>/dev/null; trap - EXIT
echo "== peer: the pipeline in DALI directly (no server), model.dali of $REPO/digits_jpeg_preprocess"
"$PY" - "$REPO/digits_jpeg_preprocess/1/model.dali" "$OUT/jpegs.json" <<'PYEOF'
import json, sys, time
import numpy as np
from nvidia.dali.pipeline import Pipeline
jpegs = [np.array(r["IMAGE"]["content"], np.uint8) for r in json.load(open(sys.argv[2]))["data"]]
for batch in (1, 16):
    pipe = Pipeline.deserialize(filename=sys.argv[1], batch_size=batch, num_threads=1, device_id=None,
                                exec_async=False, exec_pipelined=False, prefetch_queue_depth=1)
    pipe.build()
    def once(i):
        pipe.feed_input("IMAGE", [jpegs[(i + k) % 16] for k in range(batch)]); pipe.run()
    for i in range(50): once(i)
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < 3: once(n); n += 1
    dt = time.perf_counter() - t
    print(f"DALI direct batch {batch:2d}: {n * batch / dt:8.1f} images/s, {dt / n * 1000:.3f} ms per run")
PYEOF
echo "== done $(date -u +%FT%TZ)"
