#!/bin/bash
# L0_http reproduction (CPU, onnx+python), against workbench.
source "$(dirname "$0")/lib.sh"
W=$QA/work/L0_http; R=$QA/results/L0_http; rm -rf $R; mkdir -p $R; cd $W
CL=$QA/work/clients
res() { echo "$1 $2" >> $R/checks.txt; echo "$1 $2"; }
SERVER_ARGS="--model-repository=$W/models --allow-client-shm=true"; SERVER_LOG=$R/server_main.log
run_server || { res FAIL server_start_main; }
$PY $CL/simple_http_health_metadata.py -v > $R/client.health 2>&1 && res PASS simple_http_health_metadata || res FAIL simple_http_health_metadata
for c in simple_http_aio_infer_client simple_http_infer_client simple_http_async_infer_client simple_http_shm_string_client simple_http_shm_client simple_http_string_infer_client simple_http_sequence_sync_infer_client; do
  timeout 120 $PY $CL/$c.py -v > $R/client.$c 2>&1 && res PASS $c || res FAIL $c
done
timeout 120 $PY $CL/reuse_infer_objects_client.py -v > $R/client.reuse 2>&1 && res PASS reuse_infer_objects_client || res FAIL reuse_infer_objects_client
timeout 60 $PY $CL/simple_http_infer_client.py -u 127.0.0.1:$HTTP_PORT/base_path -v > $R/client.base_path_url 2>&1
rc=$?; if [ $rc -ne 0 ] && grep -q "POST /base_path/v2/models/simple/infer" $R/client.base_path_url; then res PASS base_path_url; else res FAIL base_path_url; fi
timeout 120 $PY http_client_plugin_test.py > $R/client.plugin 2>&1 && res PASS http_client_plugin_test || res FAIL http_client_plugin_test
kill_server
# model control
SERVER_ARGS="--model-repository=$W/models --model-control-mode=explicit"; SERVER_LOG=$R/server_model_control.log
run_server || res FAIL server_start_explicit
timeout 120 $PY $CL/simple_http_model_control.py -v > $R/client.model_control 2>&1
rc=$?; n=$(grep -c PASS $R/client.model_control); [ $rc -eq 0 ] && [ "$n" == "1" ] && res PASS simple_http_model_control || res FAIL simple_http_model_control
grep -q "Invalid config override" $R/server_model_control.log && res PASS server_log_invalid_config_override || res HARNESS server_log_invalid_config_override
kill_server
# dyna sequence
SERVER_ARGS="--model-repository=$W/models"; SERVER_LOG=$R/server_dyna.log
run_server || res FAIL server_start_dyna
timeout 120 $PY $CL/simple_http_sequence_sync_infer_client.py -v -d > $R/client.dyna 2>&1 && res PASS simple_http_sequence_sync_infer_client_dyna || res FAIL simple_http_sequence_sync_infer_client_dyna
# binary / JSON combinations (same server args as test.sh)
U=http://127.0.0.1:$HTTP_PORT/v2/models/simple/infer
IN='{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}'
S='\[2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32\]'; Z='\[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0\]'
curlcheck() { # name body expect_code(200|!200) n_sum n_zero [errtext]
  local code; code=$(curl -s -w %{http_code} -o $R/curl.$1 -d"$2" $U)
  local ok=1
  if [ "$3" == "200" ]; then [ "$code" == "200" ] || ok=0; else [ "$code" != "200" ] || ok=0; fi
  [ -n "$4" ] && { [ "$(grep -c "$S" $R/curl.$1)" == "$4" ] || ok=0; }
  [ -n "$5" ] && { [ "$(grep -c "$Z" $R/curl.$1)" == "$5" ] || ok=0; }
  [ -n "$6" ] && { [ "$(grep -c -F "$6" $R/curl.$1)" == "1" ] || ok=0; }
  echo "code=$code" >> $R/curl.$1
  [ $ok == 1 ] && res PASS curl_$1 || res FAIL curl_$1
}
curlcheck json_default "{\"inputs\":[$IN]}" 200 1 1
curlcheck out0_bin_out1_json "{\"inputs\":[$IN],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true}},{\"name\":\"OUTPUT1\",\"parameters\":{\"binary_data\":false}}]}" 200 0 1
curlcheck out0_bin_out1_default "{\"inputs\":[$IN],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true}},{\"name\":\"OUTPUT1\"}]}" 200 0 1
curlcheck binary_data_output_no_outputs "{\"parameters\":{\"binary_data_output\":true},\"inputs\":[$IN]}" 200 0 0
curlcheck binary_data_output_out0_json "{\"parameters\":{\"binary_data_output\":true},\"inputs\":[$IN],\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":false}},{\"name\":\"OUTPUT1\"}]}" 200 1 1
curlcheck data_too_short '{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}]}' x "" "" "{\"error\":\"Failed to parse 'data' field: shape does not match true shape\"}"
curlcheck data_too_long '{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18]}]}' x "" "" "{\"error\":\"Unable to parse 'data': Shape does not match true shape of 'data' field\"}"
curlcheck after_bad_requests "{\"inputs\":[$IN]}" 200 1 1
kill_server
# python http aio test
SERVER_ARGS="--model-repository=$W/models --allow-client-shm=true"; SERVER_LOG=$R/server_aio.log
run_server || res FAIL server_start_aio
timeout 300 $PY -m unittest -v python_http_aio_test > $R/python_http_aio_test.log 2>&1; res RC$? python_http_aio_test
kill_server
# http_test.py
SERVER_ARGS="--model-repository=$W/python_unit_test_models --model-control-mode=explicit --load-model=*"; SERVER_LOG=$R/server_http_test.log
run_server || res FAIL server_start_http_test
rm -f test_results.txt
timeout 900 $PY -m unittest -v ${HTTP_TEST_FILTER:-http_test} > $R/http_test.log 2>&1; res RC$? http_test
cp test_results.txt $R/ 2>/dev/null
kill_server
echo DONE
