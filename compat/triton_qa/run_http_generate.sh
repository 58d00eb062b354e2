#!/bin/bash
# L0_http's generate endpoint section (test.sh: python_models/generate_models, generate_endpoint_test.py, 18 cases)
source "$(dirname "$0")/lib.sh"
W=$QA/work/L0_http; R=$QA/results/L0_http; mkdir -p $R; cd $W
res() { echo "$1 $2" >> $R/checks.txt; echo "$1 $2"; }
SERVER_ARGS="--model-repository=$W/../python_models/generate_models --log-verbose=1"; SERVER_LOG=$R/server_generate.log
run_server || res FAIL server_start_generate
rm -f test_results.txt
timeout 600 $PY -m unittest -v generate_endpoint_test > $R/generate_endpoint_test.log 2>&1; res RC$? generate_endpoint_test
kill_server
echo DONE
