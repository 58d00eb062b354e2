#!/bin/bash
# L0_grpc reproduction (CPU, onnx+python), against workbench.
source "$(dirname "$0")/lib.sh"
W=$QA/work/L0_grpc; R=$QA/results/L0_grpc; rm -rf $R; mkdir -p $R; cd $W
CL=$QA/work/clients
res() { echo "$1 $2" >> $R/checks.txt; echo "$1 $2"; }
SERVER_ARGS="--model-repository=$W/models --allow-client-shm=true"; SERVER_LOG=$R/server_main.log
run_server || res FAIL server_start_main
timeout 60 $PY $CL/simple_grpc_health_metadata.py -v > $R/client.health 2>&1 && res PASS simple_grpc_health_metadata || res FAIL simple_grpc_health_metadata
for c in simple_grpc_aio_infer_client simple_grpc_aio_sequence_stream_infer_client simple_grpc_infer_client simple_grpc_async_infer_client simple_grpc_string_infer_client simple_grpc_sequence_stream_infer_client simple_grpc_sequence_sync_infer_client simple_grpc_shm_string_client simple_grpc_shm_client simple_grpc_keepalive_client simple_grpc_custom_args_client grpc_explicit_byte_content_client grpc_explicit_int_content_client grpc_explicit_int8_content_client grpc_client; do
  timeout 120 $PY $CL/$c.py -v > $R/client.$c 2>&1
  rc=$?; n=$(grep -c PASS $R/client.$c)
  if [ $rc -eq 0 ] && [ "$n" == "1" ]; then res PASS $c; else res FAIL "$c (rc=$rc, PASS lines=$n)"; fi
done
timeout 120 $PY $CL/reuse_infer_objects_client.py -v -i grpc -u 127.0.0.1:$GRPC_PORT > $R/client.reuse 2>&1 && res PASS reuse_infer_objects_client_grpc || res FAIL reuse_infer_objects_client_grpc
kill_server
SERVER_ARGS="--model-repository=$W/grpc_test_models"; SERVER_LOG=$R/server_grpc_test.log
run_server || res FAIL server_start_grpc_test
timeout 300 $PY -m unittest -v python_unit_test.GrpcTest > $R/python_unit_test_GrpcTest.log 2>&1; res RC$? python_unit_test.GrpcTest
# grpc_client_plugin_test needs client_plugin_models: run by run_grpc2.sh
kill_server
# compression (test.sh passes --grpc-infer-response-compression-level=high; greps client GRPC_TRACE output)
SERVER_ARGS="--model-repository=$W/models --grpc-infer-response-compression-level=high"; SERVER_LOG=$R/server_compress.log
if run_server; then
  GRPC_TRACE=compression,channel GRPC_VERBOSITY=DEBUG timeout 60 $PY $CL/simple_grpc_infer_client.py -v -C deflate > $R/client.compress 2>&1
  rc=$?; [ $rc -eq 0 ] && grep -q "Compressed\[deflate\]" $R/client.compress && res PASS grpc_compress_deflate || res FAIL "grpc_compress_deflate (rc=$rc)"
  kill_server
else
  res FAIL "server_start_compress (flag --grpc-infer-response-compression-level)"
  SERVER_ARGS="--model-repository=$W/models"; SERVER_LOG=$R/server_compress2.log
  run_server
  GRPC_TRACE=compression,channel GRPC_VERBOSITY=DEBUG timeout 60 $PY $CL/simple_grpc_infer_client.py -v -C deflate > $R/client.compress 2>&1
  rc=$?; [ $rc -eq 0 ] && grep -q "Compressed\[deflate\]" $R/client.compress && res PASS "grpc_compress_deflate (without server flag)" || res FAIL "grpc_compress_deflate_without_flag (rc=$rc)"
  kill_server
fi
SERVER_ARGS="--model-repository=$W/models --model-control-mode=explicit"; SERVER_LOG=$R/server_model_control.log
run_server || res FAIL server_start_explicit
timeout 120 $PY $CL/simple_grpc_model_control.py -v > $R/client.model_control 2>&1
rc=$?; n=$(grep -c PASS $R/client.model_control); [ $rc -eq 0 ] && [ "$n" == "1" ] && res PASS simple_grpc_model_control || res FAIL "simple_grpc_model_control (rc=$rc)"
grep -q "Invalid config override" $R/server_model_control.log && res PASS server_log_invalid_config_override || res HARNESS server_log_invalid_config_override
kill_server
SERVER_ARGS="--model-repository=$W/models"; SERVER_LOG=$R/server_dyna.log
run_server || res FAIL server_start_dyna
for c in simple_grpc_sequence_stream_infer_client simple_grpc_sequence_sync_infer_client; do
  timeout 120 $PY $CL/$c.py -v -d > $R/client.dyna.$c 2>&1 && res PASS ${c}_dyna || res FAIL ${c}_dyna
done
kill_server
SERVER_ARGS="--model-repository=$W/models --allow-client-shm=true"; SERVER_LOG=$R/server_aio.log
run_server || res FAIL server_start_aio
timeout 300 $PY -m unittest -v python_grpc_aio_test > $R/python_grpc_aio_test.log 2>&1; res RC$? python_grpc_aio_test
# grpc health probe stand-in: grpc.health.v1 Check via raw channel
timeout 30 $PY - > $R/client.health_probe 2>&1 <<'PYEOF'
import grpc
import os
ch = grpc.insecure_channel("127.0.0.1:" + os.environ["GRPC_PORT"])
# grpc.health.v1.Health/Check with an empty HealthCheckRequest; response field 1 = status (1 = SERVING)
call = ch.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda x: x, response_deserializer=lambda x: x)
resp = call(b"", timeout=5)
print("raw response", resp)
print("status: SERVING" if resp == b"\x08\x01" else "status: other")
PYEOF
grep -q "status: SERVING" $R/client.health_probe && res PASS grpc_health_probe_online || res FAIL grpc_health_probe_online
kill_server
# restricted protocol
SERVER_ARGS="--model-repository=$W/models --grpc-restricted-protocol=model-repository:admin-key=admin-value --grpc-restricted-protocol=inference,health:infer-key=infer-value"; SERVER_LOG=$R/server_restricted.log
if run_server; then
  timeout 300 $PY -m unittest -v python_unit_test.RestrictedProtocolTest > $R/python_unit_test_Restricted.log 2>&1; res RC$? python_unit_test.RestrictedProtocolTest
  kill_server
else
  res FAIL "server_start_restricted (flag --grpc-restricted-protocol)"
fi
echo DONE
