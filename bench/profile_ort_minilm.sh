#!/usr/bin/env bash
# py-spy (--native, 8 s at 100 Hz) on `workbench serve` serving the harness's minilm while perf_analyzer runs
# c=16 HTTP binary; writes /tmp/wt-ort/prof_native.txt (py-spy raw format) and the perf_analyzer log.
#   flock /tmp/bench.lock bash bench/profile_ort_minilm.sh      (py-spy: /tmp/prof-venv, see ../shared/bench)
set -u
WT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p /tmp/wt-ort
cd "$WT"
PYTHONPATH=$WT setsid /work/main/.venv/bin/workbench serve --model-repository=/tmp/bench_work/triton_repo \
  --http-port=8800 --grpc-port=8801 --metrics-port=8802 --model-control-mode=explicit --load-model=minilm \
  > /tmp/wt-ort/prof.server.log 2>&1 &
SPID=$!
for i in $(seq 60); do curl -sf localhost:8800/v2/models/minilm/ready && break; sleep 0.5; done
PA="/tmp/bench_bin/perf_analyzer"
$PA -m minilm -u localhost:8800 -i http --input-tensor-format=binary --output-tensor-format=binary -b 1 \
  --input-data /tmp/bench_work/data/minilm.json --measurement-mode time_windows -s 999 -r 2 -p 2000 --concurrency-range 16 >/dev/null 2>&1
$PA -m minilm -u localhost:8800 -i http --input-tensor-format=binary --output-tensor-format=binary -b 1 \
  --input-data /tmp/bench_work/data/minilm.json --measurement-mode time_windows -s 999 -r 4 -p 3000 --concurrency-range 16 -v > /tmp/wt-ort/prof.pa.log 2>&1 &
PAPID=$!
sleep 2
/tmp/prof-venv/bin/py-spy record --pid $SPID --duration 8 --rate 100 --native --format raw -o /tmp/wt-ort/prof_native.txt > /tmp/wt-ort/pyspy.log 2>&1
wait $PAPID
kill -TERM $SPID; wait $SPID
