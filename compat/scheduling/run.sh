#!/bin/bash
# Triton's scheduling and lifecycle QA suites (qa/L0_sequence_batcher, L0_batcher, L0_lifecycle,
# ...; the list below) run unchanged, apart from the edits README.md lists, against `workbench
# serve`. The one entry point of this harness.
#
#   bash compat/scheduling/run.sh [SUITE[:SCRIPT] ...]   (default: $DEFAULT_SUITES, one after another)
#
# e.g. `run.sh L0_batcher:test.preserve.sh` runs L0_batcher's preserve-ordering sections alone.
#
#   bash compat/scheduling/run.sh --case SUITE REPO "SERVER_ARGS" TESTFILE TESTID
#
# runs one unittest case (e.g. SequenceBatcherTest.test_backlog_fill_no_end) of $QA/src/qa/SUITE
# against a fresh server on REPO (a folder, relative to the suite's) with SERVER_ARGS, with the
# environment the caller gives (e.g. BATCHER_TYPE=VARIABLE); after a full run of that suite (its
# models are built by its test.sh). Result in $QA/cases/case.jsonl (not counted by the tally), logs
# beside it.
# Results: $QA/results/<suite>.jsonl (one line per unittest case, written by pyhook/ in the
# client), <suite>.out (the suite's output), suites.tsv (suite, exit status, seconds); counted by
# bench/triton_qa_tally.py $COMPAT_OUT. Env: see compat/lib.sh and
#   QA              scratch folder (default $COMPAT_OUT/scheduling)
#   QA_PORT_BASE    HTTP port; gRPC +1, metrics +2 (default 19100)
#   SUITE_TIMEOUT   seconds per suite (default: per suite below); a suite stopped by it counts
#                   what it recorded, its servers are stopped by PID
#   WATCHDOG_RSS_KB a server this harness started that grows past it is stopped (default 8 GB)
#   SKIP_SETUP=1    reuse $QA/src as it is (setup.sh rebuilds it; venv and fixtures are kept)
set -euo pipefail
H=$(cd "$(dirname "$0")" && pwd)
source "$H/../lib.sh"
QA=${QA:-$COMPAT_OUT/scheduling}
QA_PORT_BASE=${QA_PORT_BASE:-19100}
DEFAULT_SUITES="L0_sequence_batcher L0_dyna_sequence_batcher L0_batcher L0_model_queue L0_rate_limiter
L0_lifecycle L0_request_cancellation L0_model_update L0_simple_ensemble L0_decoupled L0_response_cache
L0_optional_input L0_model_config"
SUITES=("$@")
[ ${#SUITES[@]} -gt 0 ] || read -r -a SUITES <<< "$(echo $DEFAULT_SUITES)"
SERVER_GIT=$(upstream_git SERVER_GIT server)
PB_GIT=$(upstream_git PB_GIT python_backend)
export QA QA_PORT_BASE SERVER_GIT PB_GIT SERVER_COMMIT
# --case: the tree as its suite left it (its test.sh built the models)
[ "${SKIP_SETUP:-0}" = 1 ] || [ "${SUITES[0]:-}" = --case ] || bash "$H/setup.sh"

export TRITON_DIR=$QA DATADIR=$QA/data
export TEST_WINDOWS=0 TEST_VALGRIND=0 TEST_SYSTEM_SHARED_MEMORY=0 TEST_CUDA_SHARED_MEMORY=0 TEST_JETSON=0
export SERVER_TIMEOUT=${SERVER_TIMEOUT:-120}
export PATH=$QA/venv/bin:$PATH PYTHONPATH=$QA/pyhook PYTEST_PLUGINS=qa_pytest_record
mkdir -p "$QA/results"; touch "$QA/server_pids"

# a server of this harness (a PID it recorded) that grows past WATCHDOG_RSS_KB is stopped
watchdog() {
    local pid rss
    while sleep 3; do
        for pid in $(cat "$QA/server_pids"); do
            # a recorded PID that now names another program (reused) is left alone
            tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline" | grep -q -- ' serve ' || continue
            rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status" 2>/dev/null) || continue
            if [ -n "$rss" ] && [ "$rss" -gt "${WATCHDOG_RSS_KB:-8000000}" ]; then
                echo "$(date -u +%T) watchdog: server $pid at ${rss} kB, stopped" >> "$QA/results/watchdog.log"
                kill -9 "$pid" 2>/dev/null || true
            fi
        done
    done
}
watchdog & WATCHDOG=$!
trap 'kill $WATCHDOG 2>/dev/null || true' EXIT

run_suite() {
    local suite=${1%%:*} script=test.sh limit=1200 rc=0 start n0 tag
    [[ $1 == *:* ]] && script=${1#*:}
    local -a envs=(BACKENDS="${BACKENDS:-onnx python}")
    case $suite in
        L0_sequence_batcher) limit=3600; envs+=(ENSEMBLES=0);;
        L0_dyna_sequence_batcher) envs=(BACKENDS=onnx QA_DROP_BACKENDS=dyna_sequence);;
        L0_batcher|L0_model_update) limit=2400;;
        L0_model_queue) [[ $1 == *:* ]] || script=test.harness.sh;;
        L0_rate_limiter) limit=1500;;
        L0_lifecycle) limit=3000; envs+=(TRITON_SERVER_VERSION="${TRITON_SERVER_VERSION:-0.1.0}" QA_STANDINS_AS_BACKENDS=1)
            [[ $1 == *:* ]] || script=test.harness.sh;;
        L0_simple_ensemble) envs+=(QA_EXTRA_ARGS="--exit-on-error=false --strict-readiness=false");;
        L0_decoupled) envs+=(QA_EXTRA_ARGS="--exit-on-error=false --strict-readiness=false")
            [[ $1 == *:* ]] || script=test.harness.sh;;
        L0_response_cache) limit=900; [[ $1 == *:* ]] || script=test.harness.sh;;
        L0_optional_input) limit=900;;
        L0_model_config) limit=1800;;
    esac
    limit=${SUITE_TIMEOUT:-$limit}
    tag=$suite; [ "$script" = test.sh ] || [ "$script" = test.harness.sh ] || tag=$suite.${script%.sh}; tag=${tag/.test./.}
    rm -f "$QA/results/$tag.jsonl"
    n0=$(wc -l < "$QA/server_pids")
    start=$(date +%s)
    echo "== $tag ($script, limit ${limit} s) $(date -u +%T)"
    if [ "$suite" = L0_model_config ]; then   # our driver: test.sh's rules for the CPU backends
        (env "${envs[@]}" QA_MC_RES="$QA/results/$tag.jsonl" timeout --kill-after=30 "$limit" \
            "$QA/venv/bin/python" "$H/model_config_driver.py") > "$QA/results/$tag.out" 2>&1 || rc=$?
    else
        (cd "$QA/src/qa/$suite" && env "${envs[@]}" QA_RESULTS="$QA/results/$tag.jsonl" \
            timeout --kill-after=30 "$limit" bash "$script" harness) > "$QA/results/$tag.out" 2>&1 || rc=$?
    fi
    stop_recorded_servers "$QA/server_pids" "$n0" >> "$QA/results/$tag.out"
    printf '%s\t%s\t%s\n' "$tag" "$rc" "$(( $(date +%s) - start ))" | tee -a "$QA/results/suites.tsv"
}

run_case() {
    local suite=$1 repo=$2 args=$3 file=$4 id=$5 pid rc=0 n0 log
    mkdir -p "$QA/cases"
    log=$QA/cases/$(tr -c 'A-Za-z0-9_.\n' _ <<< "$suite.$id")
    cd "$QA/src/qa/$suite"
    n0=$(wc -l < "$QA/server_pids")
    # shellcheck disable=SC2086 # SERVER_ARGS is a list of flags
    "$QA/bin/tritonserver" --model-repository="$repo" $args > "$log.server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 240); do
        curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$QA_PORT_BASE/v2/health/ready" && break
        kill -0 $pid 2>/dev/null || { echo "server exited (see $log.server.log)"; break; }
        sleep 0.5
    done
    QA_RESULTS=$QA/cases/case.jsonl SERVER_PID=$pid SERVER_LOG=$log.server.log \
        timeout "${CASE_TIMEOUT:-600}" python3 "$file" "$id" > "$log.client.log" 2>&1 || rc=$?
    kill $pid 2>/dev/null || true
    wait $pid 2>/dev/null || true
    stop_recorded_servers "$QA/server_pids" "$n0"
    echo "case $suite $id: exit $rc (client log $log.client.log)"
}

if [ "${SUITES[0]:-}" = --case ]; then run_case "${SUITES[@]:1}"; exit; fi
for suite in "${SUITES[@]}"; do run_suite "$suite"; done
