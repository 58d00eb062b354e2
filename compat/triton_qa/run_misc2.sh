#!/bin/bash
source "$(dirname "$0")/lib.sh"
Q=$QA/work; RR=$QA/results
res() { echo "$1 $2" >> $R/checks.txt; echo "$1 $2"; }
# infer_zero with BACKENDS=onnx
S=L0_infer_zero; R=$RR/$S; cd $Q/$S
SERVER_ARGS="--model-repository=$Q/$S/models"; SERVER_LOG=$R/server2.log; run_server || res FAIL server_start2
rm -f test_results.txt; BACKENDS=onnx timeout 1200 $PY -m unittest -v infer_zero_test > $R/infer_zero_test_onnx.log 2>&1; res RC$? infer_zero_test_BACKENDS_onnx; kill_server
# infer_variable: plan/libtorch filtered
S=L0_infer_variable; R=$RR/$S; cd $Q/$S
SERVER_ARGS="--model-repository=$Q/$S/models --exit-timeout-secs=120"; SERVER_LOG=$R/server2.log; run_server || res FAIL server_start2
timeout 1800 $PY $H/run_patched.py infer_variable_test > $R/infer_variable_test_onnx.log 2>&1; res RC$? infer_variable_test_onnx_only; kill_server
# output_name: onnx only
S=L0_output_name; R=$RR/$S; cd $Q/$S
SERVER_ARGS="--model-repository=$Q/$S/models"; SERVER_LOG=$R/server2.log; run_server || res FAIL server_start2
TRIALS=onnx timeout 300 $PY $H/run_patched.py output_name_test OutputNameValidationTest > $R/output_name_test_onnx.log 2>&1; res RC$? output_name_test_onnx_only; kill_server
# server_status without bf16 (CPU ORT cannot run bf16 Add)
S=L0_server_status; R=$RR/$S; cd $Q/$S
rm -rf models; cp -r $QA/data/qa_model_repository models; rm -rf models/*bf16*; cp -r $QA/data/qa_model_repository_libtorch/libtorch_* models/
SERVER_ARGS="--repository-poll-secs=1 --model-control-mode=poll --model-repository=$Q/$S/models"; SERVER_LOG=$R/server2.log
run_server || res FAIL server_start2
unavailable_models > $R/unavailable2.txt
export TRITON_SERVER_VERSION=$(curl -s http://127.0.0.1:$HTTP_PORT/v2 | $PY -c "import json,sys; print(json.load(sys.stdin)['version'])")  # the server's own version (was a hard-coded 2.73.0)
rm -f test_results.txt; timeout 600 $PY -m unittest -v server_status_test.ServerMetadataTest > $R/ServerMetadataTest2.log 2>&1; res RC$? ServerMetadataTest
rm -fr models/libtorch_int32_int32_int32/2 models/libtorch_int32_int32_int32/3 models/onnx_int32_int32_int32/2 models/onnx_int32_int32_int32/3
sleep 3
curl -s -X POST http://127.0.0.1:$HTTP_PORT/v2/repository/index > $R/index_after2.json
rm -f test_results.txt; timeout 600 $PY -m unittest -v server_status_test.ModelMetadataTest > $R/ModelMetadataTest2.log 2>&1; res RC$? ModelMetadataTest
kill_server
echo DONE
