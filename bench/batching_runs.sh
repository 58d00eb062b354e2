#!/usr/bin/env bash
# Issue 3 (dynamic batching) measurements, one sitting: bash bench/batching_runs.sh [OUT_DIR]
#   1. minilm_encoder (sample repository, real sentences padded to 32 tokens) at c=1,4,16,32:
#      no batching, and dynamic_batching with max_queue_delay_microseconds 0 / 2000 / 10000
#   2. in-process ORT on the same ONNX file, batch 1..32 (bench/raw_ort_minilm.py)
#   3. the harness's mlp at c=16 with max_queue_delay_microseconds 0 / 100 / 1000 / 5000 (+ c=32 at 1000)
#   + digits_mlp (sample repository) at c=1,16 without batching and with delay 0 / 100 / 1000
#   extras (not in the default STEPS): ORT spinning on/off in-process and in the server, 2 instances x 1 thread
# Machine-speed probes (shared raw_ort.py, batch 1) at the start and the end. Each sweep point: bench/batching_sweep.py.
# Env: STEPS="minilm raw mlp digits" (subset/order; also: extras, confirm, final), MINILM_CFGS, MLP_DELAYS, DIGITS_CFGS.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/wb_batching/run-$(date +%H%M%S)}
STEPS=${STEPS:-minilm raw mlp digits}
MINILM_CFGS=${MINILM_CFGS:-none delay=0 delay=2000 delay=10000}
MLP_DELAYS=${MLP_DELAYS:-0 100 1000 5000}
DIGITS_CFGS=${DIGITS_CFGS:-none delay=0 delay=100 delay=1000}
PY=.venv/bin/python
mkdir -p "$OUT/data"
exec > >(tee -a "$OUT/runs.log") 2>&1
(while sleep 20; do { date +%T; top -bn1 -w 200 | sed -n '1,3p;7,11p'; } >>"$OUT/load.log"; done) &
MON=$!
trap 'kill $MON 2>/dev/null' EXIT
$PY bench/make_inputs.py "$OUT/data" --seq-len 32 || exit 1
SHAPES=(--pa-arg=--shape --pa-arg=input_ids:32 --pa-arg=--shape --pa-arg=attention_mask:32
        --pa-arg=--shape --pa-arg=token_type_ids:32)
probe() { /tmp/bench_venvs/tools/bin/python ../shared/bench/raw_ort.py --work /tmp/bench_work --batches 1 --repeats 1 \
            --seconds 3 --warmup 0.3 --out "$OUT/probe_$1.json" | sed "s/^/[probe $1 $(date +%T)] /"; }
probe start
for step in $STEPS; do
  echo "== $step $(date +%T)"
  case $step in
    minilm)
      for cfg in $MINILM_CFGS; do
        $PY bench/batching_sweep.py --src-repo sample_models/repository --model minilm_encoder --batching "$cfg" \
          --conc 1,4,16,32 --out "$OUT/minilm" --label "$cfg" --input-data "$OUT/data/minilm_encoder.json" "${SHAPES[@]}"
      done;;
    raw)
      $PY bench/raw_ort_minilm.py --input-data "$OUT/data/minilm_encoder.json" --out "$OUT/raw_ort_minilm.json";;
    mlp)
      for d in $MLP_DELAYS; do
        conc=16; [[ $d == 1000 ]] && conc=16,32
        $PY bench/batching_sweep.py --src-repo /tmp/bench_work/triton_repo --model mlp --batching "delay=$d" \
          --conc "$conc" --out "$OUT/mlp" --label "delay=$d" --input-data /tmp/bench_work/data/mlp.json
      done;;
    digits)
      for cfg in $DIGITS_CFGS; do
        $PY bench/batching_sweep.py --src-repo sample_models/repository --model digits_mlp --batching "$cfg" \
          --conc 1,16 --out "$OUT/digits" --label "$cfg" --input-data "$OUT/data/digits_mlp.json"
      done;;
    extras)
      $PY bench/raw_ort_minilm.py --input-data "$OUT/data/minilm_encoder.json" --batches 1,8,16,32 --spinning 0 \
        --out "$OUT/raw_ort_minilm_nospin.json"
      $PY bench/raw_ort_minilm.py --input-data "$OUT/data/minilm_encoder.json" --batches 16,32 \
        --out "$OUT/raw_ort_minilm_spin.json"
      $PY bench/batching_sweep.py --src-repo sample_models/repository --model minilm_encoder --batching delay=0 \
        --param session.intra_op.allow_spinning=1 --conc 16,32 --out "$OUT/minilm" --label "delay=0+spin" \
        --input-data "$OUT/data/minilm_encoder.json" "${SHAPES[@]}"
      $PY bench/batching_sweep.py --src-repo sample_models/repository --model minilm_encoder --batching delay=0 \
        --instance-count 2 --intra-op 1 --conc 16,32 --out "$OUT/minilm" --label "delay=0+2x1thread" \
        --input-data "$OUT/data/minilm_encoder.json" "${SHAPES[@]}"
      $PY bench/batching_sweep.py --src-repo sample_models/repository --model digits_mlp --batching delay=0 \
        --instance-count 2 --conc 1,16 --out "$OUT/digits" --label "delay=0+2inst" --input-data "$OUT/data/digits_mlp.json"
      ;;
    confirm)  # best minilm configs again next to raw ORT, batch histograms; digits_mlp c=1 with and without batcher
      $PY bench/raw_ort_minilm.py --input-data "$OUT/data/minilm_encoder.json" --batches 8,16,32 --out "$OUT/raw_ort_minilm.json"
      for cfg in delay=0 delay=2000; do
        $PY bench/batching_sweep.py --src-repo sample_models/repository --model minilm_encoder --batching "$cfg" \
          --param session.intra_op.allow_spinning=1 --conc 1,16,32 --out "$OUT/minilm" --label "$cfg+spin" \
          --input-data "$OUT/data/minilm_encoder.json" "${SHAPES[@]}"
      done
      $PY bench/raw_ort_minilm.py --input-data "$OUT/data/minilm_encoder.json" --batches 8,16,32 --out "$OUT/raw_ort_minilm_after.json"
      i=0
      for cfg in none delay=0 none delay=0; do
        i=$((i + 1))
        $PY bench/batching_sweep.py --src-repo sample_models/repository --model digits_mlp --batching "$cfg" \
          --conc 1 --out "$OUT/digits" --label "$cfg-$i" --input-data "$OUT/data/digits_mlp.json"
      done
      ;;
    final)  # minilm c=32, served vs in-process in the same minutes: raw, 5 configs, raw, 5 configs, raw
      for r in 1 2; do
        $PY bench/raw_ort_minilm.py --input-data "$OUT/data/minilm_encoder.json" --batches 16,32 --out "$OUT/raw_ort_minilm_$r.json"
        for cfg in delay=0 delay=0+spin delay=10000 delay=10000+spin delay=10000,pref=16+spin; do
          spin=(); [[ $cfg == *+spin ]] && spin=(--param session.intra_op.allow_spinning=1)
          $PY bench/batching_sweep.py --src-repo sample_models/repository --model minilm_encoder --batching "${cfg%+spin}" \
            "${spin[@]}" --conc 32 --out "$OUT/minilm" --label "$cfg-r$r" \
            --input-data "$OUT/data/minilm_encoder.json" "${SHAPES[@]}"
        done
      done
      $PY bench/raw_ort_minilm.py --input-data "$OUT/data/minilm_encoder.json" --batches 16,32 --out "$OUT/raw_ort_minilm_3.json"
      ;;
  esac
done
probe end
echo "== done $(date +%T) -> $OUT"
