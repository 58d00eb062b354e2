# compat/triton_qa: sourced by each run_*.sh step (run.sh exports QA, QA_PORT_BASE, WB_PROJECT,
# WB_VENV). Runs `workbench serve` like qa/common/util.sh's run_server / kill_server: one server
# at a time, started and stopped by its PID, on loopback ports QA_PORT_BASE +0/+1/+2.
H=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${QA:?run compat/triton_qa/run.sh}" "${WB_PROJECT:?}" "${WB_VENV:?}"
WB=$WB_VENV/bin/workbench
PY=$QA/venv/bin/python
export PATH=$QA/venv/bin:$PATH
export TRITONSERVER_IPADDR=127.0.0.1
HTTP_PORT=${QA_PORT_BASE:-19000}; GRPC_PORT=$((HTTP_PORT + 1)); METRICS_PORT=$((HTTP_PORT + 2))
export HTTP_PORT GRPC_PORT METRICS_PORT
SERVER_TIMEOUT=${SERVER_TIMEOUT:-180}
SERVER_PID=0

run_server() {  # uses $SERVER_ARGS and $SERVER_LOG; waits for ready (or for $1: live)
  SERVER_PID=0
  local probe=${1:-ready}
  PYTHONPATH=$WB_PROJECT $WB serve $SERVER_ARGS --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 \
      --http-port $HTTP_PORT --grpc-port $GRPC_PORT --metrics-port $METRICS_PORT > $SERVER_LOG 2>&1 &
  local pid=$!
  local i
  for i in $(seq 1 $((SERVER_TIMEOUT*2))); do
    if ! kill -0 $pid 2>/dev/null; then echo "server exited early (see $SERVER_LOG)"; wait $pid; return 1; fi
    if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 http://127.0.0.1:$HTTP_PORT/v2/health/$probe)" == "200" ]; then
      SERVER_PID=$pid; return 0
    fi
    sleep 0.5
  done
  echo "server not $probe after ${SERVER_TIMEOUT}s (see $SERVER_LOG)"; kill $pid; wait $pid; return 1
}

# like run_server but only waits for live (for servers whose readiness is expected false)
run_server_live() {
  run_server live
}

kill_server() {
  if [ "$SERVER_PID" != "0" ]; then
    kill $SERVER_PID 2>/dev/null
    local i
    for i in $(seq 1 60); do kill -0 $SERVER_PID 2>/dev/null || break; sleep 0.5; done
    if kill -0 $SERVER_PID 2>/dev/null; then echo "server $SERVER_PID did not stop in 30s; SIGKILL"; kill -9 $SERVER_PID; fi
    wait $SERVER_PID; SERVER_RC=$?
    SERVER_PID=0
  fi
}

# start; accept "live" and wait until no model is LOADING (bounded)
run_server_settled() {
  run_server_live || return 1
  local i
  for i in $(seq 1 $((SERVER_TIMEOUT*2))); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 http://127.0.0.1:$HTTP_PORT/v2/health/ready)" == "200" ]; then return 0; fi
    local idx; idx=$(curl -s --max-time 5 -X POST http://127.0.0.1:$HTTP_PORT/v2/repository/index)
    if [ -n "$idx" ] && ! echo "$idx" | grep -q LOADING; then return 0; fi
    sleep 0.5
  done
  return 0
}
unavailable_models() {  # prints name + reason of models not READY
  curl -s -X POST http://127.0.0.1:$HTTP_PORT/v2/repository/index | $PY -c "import json,sys; [print(m['name'], m.get('version',''), m.get('state'), '|', m.get('reason','')) for m in json.load(sys.stdin) if m.get('state')!='READY']"
}
