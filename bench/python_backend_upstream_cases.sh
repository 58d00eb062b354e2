#!/bin/bash
# NVIDIA's own test cases for issue 33's causes 3, 8 and 10, run unchanged (ports rewritten)
# against `workbench serve`: L0_backend_python async_execute/concurrency_test.py (all),
# decoupled/decoupled_test.py -k "execute_cancel or bls_cancel or bls_ignore_cancel" and
# lifecycle/lifecycle_test.py -k grpc_error, with their models from qa/python_models and
# qa/L0_backend_python/decoupled/models, set up as their test.sh does.
#
# usage: SERVER_GIT=<bare clone of triton-inference-server/server> bench/python_backend_upstream_cases.sh [CODE_DIR] [TAG]
#   CODE_DIR: the checkout whose code the server runs (default: this one); the client and the
#   server use $VENV (default: CODE_DIR's .venv, else /work/main/.venv). Scratch: $QA (default
#   /tmp/python_backend_cases), ports 19350-19352. Prints each selection's pytest summary.
set -u
CODE=$(cd "${1:-$(dirname "$0")/..}" && pwd); TAG=${2:-run}
G="git --git-dir=${SERVER_GIT:?a bare clone of triton-inference-server/server}"
VENV=${VENV:-$CODE/.venv}; [ -x "$VENV/bin/python" ] || VENV=/work/main/.venv
Q=${QA:-/tmp/python_backend_cases}; rm -rf "$Q"; mkdir -p "$Q/models" "$Q/common"
add() { mkdir -p "$Q/models/$1/1"
  $G show "HEAD:$2/model.py" > "$Q/models/$1/1/model.py" 2>/dev/null || $G show "HEAD:$2/1/model.py" > "$Q/models/$1/1/model.py"
  $G show "HEAD:$2/config.pbtxt" > "$Q/models/$1/config.pbtxt"; }
for m in async_execute_decouple async_execute_decouple_bls execute_grpc_error decoupled_grpc_error \
         execute_cancel response_sender_until_cancelled; do add $m qa/python_models/$m; done
for m in decoupled_bls_cancel decoupled_bls_async_cancel decoupled_bls_cancel_after_complete; do
  add $m qa/L0_backend_python/decoupled/models/$m; done
echo "model_transaction_policy { decoupled: True }" >> "$Q/models/execute_cancel/config.pbtxt"  # decoupled/test.sh
(cd "$Q/models/execute_grpc_error" && sed -i 's/^max_batch_size:.*/max_batch_size: 8/' config.pbtxt &&  # lifecycle/test.sh
  echo "dynamic_batching { preferred_batch_size: [8], max_queue_delay_microseconds: 1200000 }" >> config.pbtxt)
for f in test_util.py shm_util.py; do $G show "HEAD:qa/common/$f" > "$Q/common/$f"; done
cat > "$Q/common/triton_shm_monitor.py" <<'PY'
class SharedMemoryManager:  # stand-in: upstream's leak probe reads Triton's own pool layout
    def __init__(self, name):
        self.name = name

    def free_memory(self):
        return 0
PY
cd "$Q"
$G show HEAD:qa/L0_backend_python/async_execute/concurrency_test.py > concurrency_test.py
$G show HEAD:qa/L0_backend_python/decoupled/decoupled_test.py > decoupled_test.py
$G show HEAD:qa/L0_backend_python/lifecycle/lifecycle_test.py > lifecycle_test.py
sed -i 's/localhost:8001/localhost:19351/; s/:8001"/:19351"/; s/:8002\//:19352\//' ./*_test.py
PYTHONPATH=$CODE "$VENV/bin/workbench" serve --model-repository="$Q/models" --http-port=19350 \
  --grpc-port=19351 --metrics-port=19352 --log-verbose=1 > "$Q/decoupled_server.log" 2>&1 &
SPID=$!
trap 'kill $SPID 2>/dev/null; wait $SPID 2>/dev/null' EXIT
for _ in $(seq 1 240); do curl -sf localhost:19350/v2/health/ready > /dev/null && break; sleep 0.5; done
export SERVER_LOG=$Q/decoupled_server.log PYTHONPATH=$Q/common TRITONSERVER_IPADDR=localhost
run() { echo "== $TAG $1 ${2:+-k \"$2\"}"
  "$VENV/bin/python" -m pytest -p no:randomly -p no:cacheprovider -q "$1" ${2:+-k "$2"} 2>&1 | grep -E "^FAILED|passed|failed"; }
run concurrency_test.py ""
run decoupled_test.py "execute_cancel or bls_cancel or bls_ignore_cancel"
run lifecycle_test.py "grpc_error"
