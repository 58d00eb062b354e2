#!/bin/bash
source "$(dirname "$0")/lib.sh"
W=$QA/work/L0_shared_memory; R=$QA/results/L0_shared_memory; rm -rf $R; mkdir -p $R; cd $W
res() { echo "$1 $2" >> $R/checks.txt; echo "$1 $2"; }
one() { # repo test_id client_type extra_args
  SERVER_ARGS="--model-repository=$1 --log-verbose=1 $4"; SERVER_LOG=$R/$2.$3.server.log
  if ! run_server; then res FAIL "$2.$3 (server start)"; return; fi
  export CLIENT_TYPE=$3
  timeout 300 $PY -m unittest -v shared_memory_test.$2 > $R/$2.$3.client.log 2>&1
  local rc=$?
  kill_server
  local st=PASS; [ $rc -ne 0 ] && st=FAIL
  [ "$SERVER_RC" != "0" ] && st="$st(server-exit=$SERVER_RC)"
  res $st "$2.$3"
}
for ct in http grpc; do one $W/models SharedMemoryTest.test_client_shm_disabled_by_default $ct ""; done
for i in test_invalid_create_shm test_valid_create_set_register test_unregister_before_register test_unregister_after_register test_reregister_after_register test_unregister_after_inference test_register_after_inference test_too_big_shm test_mixed_raw_shm test_unregisterall test_infer_offset_out_of_bound test_infer_byte_size_out_of_bound test_infer_integer_overflow test_register_out_of_bound test_register_reserved_names test_register_invalid_shm_key test_python_client_leak; do
  for ct in http grpc; do one $W/models SharedMemoryTest.$i $ct "--allow-client-shm=true"; done
done
for t in test_unregister_shm_during_inference_single_req test_unregister_shm_during_inference_multiple_req test_unregister_shm_after_inference; do
  for ct in http grpc; do one $W/python_models TestSharedMemoryUnregister.${t}_$ct $ct "--allow-client-shm=true"; done
done
export BACKENDS="python onnx"
for ct in http grpc; do one $W/models_large SharedMemoryTest.test_large_shm_register_offset $ct "--allow-client-shm=true"; done
echo DONE
