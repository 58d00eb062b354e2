#!/bin/bash
# The smaller suites. Usage: run_misc.sh [suite ...]
source "$(dirname "$0")/lib.sh"
Q=$QA/work; RR=$QA/results
SUITES=${@:-"L0_client_nobatch L0_string_io L0_infer_zero L0_infer_variable L0_output_name L0_scalar_io L0_input_validation L0_parameters L0_server_status"}
res() { echo "$1 $2" >> $R/checks.txt; echo "$1 $2"; }
ut() { # logname timeout args...
  local name=$1 to=$2; shift 2
  rm -f test_results.txt
  timeout $to $PY -m unittest -v "$@" > $R/$name.log 2>&1; local rc=$?
  res RC$rc $name; cp test_results.txt $R/$name.results 2>/dev/null
}
for S in $SUITES; do
  R=$RR/$S; rm -rf $R; mkdir -p $R; cd $Q/$S
  case $S in
  L0_client_nobatch)
    SERVER_ARGS="--model-repository=$Q/$S/qa_model_repository"; SERVER_LOG=$R/server.log
    run_server || { res FAIL "server start: $(grep -i -m2 'error' $R/server.log | tr '\n' ' ' | cut -c1-300)"; SERVER_ARGS="$SERVER_ARGS --exit-on-error=false"; run_server_settled; unavailable_models > $R/unavailable.txt; }
    ut client_test 600 client_test; kill_server;;
  L0_string_io)
    SERVER_ARGS="--model-repository=$Q/$S/models"; SERVER_LOG=$R/server.log
    run_server || res FAIL server_start
    ut string_client_test 600 string_client_test; kill_server;;
  L0_infer_zero)
    SERVER_ARGS="--model-repository=$Q/$S/models"; SERVER_LOG=$R/server.log
    run_server || { res FAIL "server start: $(grep -i -m2 'error' $R/server.log | tr '\n' ' ' | cut -c1-300)"; SERVER_ARGS="$SERVER_ARGS --exit-on-error=false"; run_server_settled; unavailable_models > $R/unavailable.txt; }
    BACKENDS="onnx python" ut infer_zero_test 1200 infer_zero_test; kill_server;;
  L0_infer_variable)
    SERVER_ARGS="--model-repository=$Q/$S/models --exit-timeout-secs=120"; SERVER_LOG=$R/server.log
    run_server || { res FAIL "server start: $(grep -i -m2 'error' $R/server.log | tr '\n' ' ' | cut -c1-300)"; SERVER_ARGS="$SERVER_ARGS --exit-on-error=false"; run_server_settled; unavailable_models > $R/unavailable.txt; }
    BACKENDS="onnx" TRITON_SERVER_CPU_ONLY=1 ut infer_variable_test 1800 infer_variable_test; kill_server;;
  L0_output_name)
    SERVER_ARGS="--model-repository=$Q/$S/models"; SERVER_LOG=$R/server.log
    run_server || res FAIL server_start
    ut output_name_test 300 output_name_test.OutputNameValidationTest; kill_server;;
  L0_scalar_io)
    SERVER_ARGS="--model-repository=$Q/$S/models"; SERVER_LOG=$R/server.log
    run_server || res FAIL server_start
    BACKENDS=onnx ut scalar_test 300 scalar_test; kill_server
    rm -rf $R/models_bad; cp -r $Q/$S/models $R/models_bad; sed -i "s/dims.*/dims:\[2\]/g" $R/models_bad/onnx_scalar_1dim/config.pbtxt
    SERVER_ARGS="--model-repository=$R/models_bad"; SERVER_LOG=$R/server_bad.log
    if SERVER_TIMEOUT=60 run_server; then res FAIL "scalar_1dim_dims2_must_fail_load (server started)"; kill_server; else res PASS scalar_1dim_dims2_must_fail_load; fi;;
  L0_input_validation)
    SERVER_ARGS="--model-repository=$Q/$S/models"; SERVER_LOG=$R/server1.log
    run_server || res FAIL server_start1
    timeout 300 $PY -m pytest -v input_validation_test.py::InputValTest > $R/InputValTest.log 2>&1; res RC$? InputValTest; kill_server
    SERVER_ARGS="--model-repository=$Q/$S/models2 --allow-client-shm=true --exit-on-error=false"; SERVER_LOG=$R/server2.log
    run_server_settled || res FAIL server_start2; unavailable_models > $R/unavailable2.txt
    timeout 300 $PY -m pytest -v input_validation_test.py::InputShapeTest > $R/InputShapeTest.log 2>&1; res RC$? InputShapeTest; kill_server
    SERVER_ARGS="--model-repository=$Q/$S/test_models --model-control-mode=explicit --log-verbose=1"; SERVER_LOG=$R/server3.log
    run_server || res FAIL server_start3
    timeout 300 $PY -m pytest -s -v input_validation_test.py::ModelNameValidationTest > $R/ModelNameValidationTest.log 2>&1; res RC$? ModelNameValidationTest; kill_server;;
  L0_parameters)
    for t in test_params test_params_reserved_rejected test_headers test_grpc_header_forward_pattern_case_sensitive test_headers_reserved_rejected; do
      SERVER_ARGS="--model-repository=$Q/$S/model_repository --exit-timeout-secs=120"
      case $t in
        test_headers) SERVER_ARGS+=" --grpc-header-forward-pattern MY_HEADER.* --http-header-forward-pattern MY_HEADER.*";;
        test_grpc_header_forward_pattern_case_sensitive) SERVER_ARGS+=" --grpc-header-forward-pattern (?-i)MY_HEADER.*";;
        test_headers_reserved_rejected) SERVER_ARGS+=" --grpc-header-forward-pattern .* --http-header-forward-pattern .*";;
      esac
      SERVER_LOG=$R/server.$t.log
      if SERVER_TIMEOUT=60 run_server; then ut parameters_test.$t 300 parameters_test.InferenceParametersTest.$t; kill_server
      else res FAIL "parameters_test.$t (server start: $(tail -n 1 $R/server.$t.log | cut -c1-200))"; fi
    done
    for ct in http grpc; do
      SERVER_ARGS="--model-repository=$Q/$S/models --log-verbose=1"; SERVER_LOG=$R/server.class_count.$ct.log
      run_server || res FAIL server_start_class_count
      CLIENT_TYPE=$ct ut class_count_test.$ct 300 class_count_test; kill_server
    done;;
  L0_server_status)
    rm -rf $Q/$S/models; cp -r $QA/data/qa_model_repository $Q/$S/models
    [ -d $QA/data/qa_model_repository_libtorch ] && cp -r $QA/data/qa_model_repository_libtorch/libtorch_* $Q/$S/models/ 2>/dev/null
    SERVER_ARGS="--repository-poll-secs=1 --model-control-mode=poll --model-repository=$Q/$S/models"; SERVER_LOG=$R/server.log
    run_server || { res FAIL "server start: $(grep -i -m2 'error' $R/server.log | tr '\n' ' ' | cut -c1-300)"; SERVER_ARGS="$SERVER_ARGS --exit-on-error=false"; run_server_settled; }
    unavailable_models > $R/unavailable.txt
    export TRITON_SERVER_VERSION=$(curl -s http://127.0.0.1:$HTTP_PORT/v2 | $PY -c "import json,sys; print(json.load(sys.stdin)['version'])")
    echo "TRITON_SERVER_VERSION=$TRITON_SERVER_VERSION (taken from the server)" > $R/version.txt
    ut ServerMetadataTest 600 server_status_test.ServerMetadataTest
    rm -fr models/libtorch_int32_int32_int32/2 models/libtorch_int32_int32_int32/3 models/onnx_int32_int32_int32/2 models/onnx_int32_int32_int32/3
    [ -d models/plan_float16_float32_float32 ] && cp -r models/plan_float16_float32_float32/1 models/plan_float16_float32_float32/7
    sleep 3
    curl -s -X POST http://127.0.0.1:$HTTP_PORT/v2/repository/index > $R/index_after.json
    ut ModelMetadataTest 600 server_status_test.ModelMetadataTest
    kill_server;;
  esac
done
echo DONE
