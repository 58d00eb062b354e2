#!/bin/bash
source "$(dirname "$0")/lib.sh"
W=$QA/work/L0_infer; R=$QA/results/L0_infer${RSUFFIX}; rm -rf $R; mkdir -p $R; cd $W
res() { echo "$1 $2" >> $R/checks.txt; echo "$1 $2"; }
export BACKENDS="onnx python" ENSEMBLES=${ENSEMBLES:-1} NOBATCH=1 BATCH=1 TRITON_SERVER_CPU_ONLY=1
# exact flags of test.sh first
SERVER_ARGS="--model-repository=$W/models --exit-timeout-secs=120 --backend-config=python,stub-timeout-seconds=120 --backend-config=python,shm-default-byte-size=1048576"
SERVER_LOG=$R/server_exact_flags.log
SERVER_TIMEOUT=20 run_server_live && { res PASS server_start_exact_flags; kill_server; } || res FAIL "server_start_exact_flags: $(tail -n 1 $R/server_exact_flags.log)"
SERVER_ARGS="--model-repository=$W/models --exit-timeout-secs=120"; SERVER_LOG=$R/server_default.log
if run_server; then res PASS server_start_default_exit_on_error
else
  res FAIL "server_start_default_exit_on_error: $(grep -i -m3 'error\|fail' $R/server_default.log | tr '\n' ' ' | cut -c1-400)"
  SERVER_ARGS="--model-repository=$W/models --exit-timeout-secs=120 --exit-on-error=false"; SERVER_LOG=$R/server.log
  SERVER_TIMEOUT=400 run_server_settled || res FAIL server_start_exit_on_error_false
fi
unavailable_models > $R/unavailable_models.txt 2>&1
rm -f test_results.txt
timeout 2400 $PY -m unittest -v ${INFER_FILTER:-infer_test} > $R/infer_test.log 2>&1; res RC$? infer_test
cp test_results.txt $R/ 2>/dev/null
kill_server
echo DONE
