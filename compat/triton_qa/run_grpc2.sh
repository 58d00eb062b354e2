#!/bin/bash
source "$(dirname "$0")/lib.sh"
W=$QA/work/L0_grpc; R=$QA/results/L0_grpc; cd $W
CL=$QA/work/clients
res() { echo "$1 $2" >> $R/checks.txt; echo "$1 $2"; }
# model control with an 8-model repository (densenet_onnx present as config only; explicit mode never loads it)
SERVER_ARGS="--model-repository=$W/models_mc --model-control-mode=explicit"; SERVER_LOG=$R/server_model_control2.log
run_server || res FAIL server_start_explicit2
timeout 120 $PY $CL/simple_grpc_model_control.py -v > $R/client.model_control2 2>&1
rc=$?; n=$(grep -c PASS $R/client.model_control2); [ $rc -eq 0 ] && [ "$n" == "1" ] && res PASS simple_grpc_model_control_8models || res FAIL "simple_grpc_model_control_8models (rc=$rc)"
kill_server
# client plugin test: test.sh adds --http-header-forward-pattern=.* --grpc-header-forward-pattern=.*
SERVER_ARGS="--model-repository=$W/client_plugin_models --http-header-forward-pattern=.* --grpc-header-forward-pattern=.*"; SERVER_LOG=$R/server_plugin.log
if SERVER_TIMEOUT=30 run_server; then timeout 120 $PY grpc_client_plugin_test.py > $R/client.plugin 2>&1 && res PASS grpc_client_plugin_test || res FAIL grpc_client_plugin_test; kill_server
else res FAIL "server_start_plugin: $(tail -n 1 $R/server_plugin.log)"
  SERVER_ARGS="--model-repository=$W/client_plugin_models"; SERVER_LOG=$R/server_plugin2.log
  run_server; timeout 120 $PY grpc_client_plugin_test.py > $R/client.plugin2 2>&1 && res PASS "grpc_client_plugin_test (without header-forward flags)" || res FAIL "grpc_client_plugin_test_without_flags"; kill_server
fi
# http plugin test with the same models (L0_http runs it against the main server; it is mocked)
echo DONE
