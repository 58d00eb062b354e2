#!/bin/bash
# Triton's protocol QA suites (qa/L0_http, L0_grpc, L0_infer, L0_shared_memory and the smaller ones
# run_misc.sh lists) against `workbench serve`. The one entry point of this harness.
#
#   bash compat/triton_qa/run.sh [STEP ...]    (default: every step below, one after the other)
#
# Steps: http http_generate grpc grpc2 infer shm misc misc2 (run_<step>.sh; grpc2 after grpc,
# http_generate after http, misc2 after misc). Results: $QA/results/<suite>/ (checks.txt, logs),
# counted by bench/triton_qa_tally.py $COMPAT_OUT. Env: see compat/lib.sh and
#   QA            scratch folder (default $COMPAT_OUT/protocol)
#   QA_PORT_BASE  HTTP port; gRPC +1, metrics +2 (default 19000)
#   SKIP_SETUP=1  reuse $QA/work as it is (setup.sh rebuilds it; venv and fixtures are kept)
# The steps run every check and record each outcome (no `set -e` in them); this script stops on a
# set-up error only.
set -euo pipefail
H=$(cd "$(dirname "$0")" && pwd)
source "$H/../lib.sh"
QA=${QA:-$COMPAT_OUT/protocol}
QA_PORT_BASE=${QA_PORT_BASE:-19000}
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(http http_generate grpc grpc2 infer shm misc misc2)
SERVER_GIT=$(upstream_git SERVER_GIT server)
CLIENT_GIT=$(upstream_git CLIENT_GIT client)
export QA QA_PORT_BASE SERVER_GIT CLIENT_GIT SERVER_COMMIT
[ "${SKIP_SETUP:-0}" = 1 ] || bash "$H/setup.sh"
mkdir -p "$QA/results"
for step in "${STEPS[@]}"; do
    start=$(date +%s); rc=0
    echo "== $step $(date -u +%T)"
    bash "$H/run_$step.sh" > "$QA/results/run_$step.out" 2>&1 || rc=$?
    printf '%s\t%s\t%s\n' "$step" "$rc" "$(( $(date +%s) - start ))" | tee -a "$QA/results/steps.tsv"
done
