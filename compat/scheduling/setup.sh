#!/bin/bash
# compat/scheduling set-up, called by run.sh: client venv, the server's qa/ at $SERVER_COMMIT in
# $QA/src (ports moved to QA_PORT_BASE, paths to the tritonserver wrapper and the fixtures), the
# fixtures with upstream's generators, the stand-ins, and the edits each suite needs (README.md
# lists them and why). Everything under $QA. The line numbers cut from upstream scripts are those
# of the pinned commit; every cut is checked.
set -euo pipefail
H=$(cd "$(dirname "$0")" && pwd)
: "${QA:?}" "${QA_PORT_BASE:?}" "${SERVER_GIT:?}" "${PB_GIT:?}" "${SERVER_COMMIT:?}"
B=$QA_PORT_BASE
mkdir -p "$QA" && cd "$QA"
# 1. client venv (never the product's)
if [ ! -f venv/.installed ]; then
    rm -rf venv && python3 -m venv venv
    venv/bin/pip install --quiet --progress-bar off "tritonclient[all]==2.51.0" numpy onnx requests
    touch venv/.installed
fi
# 2. upstream tests; the wrapper and the stand-ins: our Python models for Triton's C++ test
# backends, and python_backend's decoupled examples repeat_int32 / square_int32 (fetched, as is)
rm -rf src bin standins dropped pyhook && mkdir -p src bin standins/repeat_int32/1 standins/square_int32/1 pyhook
git --git-dir="$SERVER_GIT" archive "$SERVER_COMMIT" qa docs/examples | tar -x -C src
{ echo "#!$QA/venv/bin/python"; tail -n +2 "$H/tritonserver"; } > bin/tritonserver && chmod +x bin/tritonserver
cp -r "$H/standins/identity" "$H/standins/sequence" standins/
for m in repeat square; do
    git --git-dir="$PB_GIT" show "HEAD:examples/decoupled/${m}_model.py" > "standins/${m}_int32/1/model.py"
    git --git-dir="$PB_GIT" show "HEAD:examples/decoupled/${m}_config.pbtxt" > "standins/${m}_int32/config.pbtxt"
done
cp "$H"/../pyhook/*.py pyhook/
# 3. ports 8000/8001/8002 -> B, B+1, B+2; Triton's paths -> the wrapper and $QA/data
cd src/qa
grep -rlE ':800[0-2]\b' --include=*.py --include=*.sh . | xargs -r sed -i -E "s/:8000\b/:$B/g; s/:8001\b/:$((B + 1))/g; s/:8002\b/:$((B + 2))/g"
find . -name "*.sh" -print0 | xargs -0 sed -i "s#/opt/tritonserver/bin/tritonserver#$QA/bin/tritonserver#g; s#/data/inferenceserver/\${REPO_VERSION}#$QA/data#g"
# 4. per-suite edits
mkdir -p L0_simple_ensemble/models/simple/1 L0_simple_ensemble/models/simple/2
cp ../docs/examples/model_repository/simple/1/model.onnx L0_simple_ensemble/models/simple/1/
cp ../docs/examples/model_repository/simple/1/model.onnx L0_simple_ensemble/models/simple/2/
# L0_decoupled: the python trial only (custom = C++ backends); the stand-ins in both repositories;
# test.direct.sh runs decoupled_test_direct.py, without the ensemble trials (lines 63-67)
(cd L0_decoupled && rm -rf python_models && cp -r models python_models \
    && for d in python_models models; do cp -r "$QA/standins/repeat_int32" "$QA/standins/square_int32" $d/; mkdir -p $d/identity_int32/1; \
        for m in fan_repeat nested_square repeat_square sequence_repeat simple_repeat; do mkdir -p $d/$m/1; done; done \
    && sed 's/^TRIALS="python custom"/TRIALS="python"/' test.sh > test.harness.sh && grep -q '^TRIALS="python"$' test.harness.sh \
    && sed '63,67d' decoupled_test.py > decoupled_test_direct.py \
    && sed 's/^DECOUPLED_TEST=decoupled_test.py/DECOUPLED_TEST=decoupled_test_direct.py/' test.harness.sh > test.direct.sh)
(cd L0_lifecycle && touch libtriton_identity.so && sed -i 's/cpu, gpu = "KIND_CPU", "KIND_GPU"/cpu, gpu = "KIND_CPU", "KIND_CPU"/' lifecycle_test.py)
# L0_response_cache: without the Redis sections (no redis-server here)
(cd L0_response_cache && { sed -n 1,84p test.sh; sed -n 154,276p test.sh; echo 'RET=0'; sed -n 357,383p test.sh; echo 'exit $RET'; } > test.harness.sh)
# L0_model_queue: header + test_priority_with_policy only (test_max_priority_levels takes several GB)
(cd L0_model_queue && { sed -n 1,68p test.sh | sed 's/^rm -fr \*.log  models custom_zero_1_float32/rm -fr models custom_zero_1_float32/'; sed -n 330,394p test.sh; } > test.harness.sh)
# L0_batcher: the preserve-ordering and queue-timeout sections alone (test.preserve.sh)
(cd L0_batcher && s=$(grep -n "^TEST_CASE=test_multi_batch_preserve_ordering" test.sh | cut -d: -f1) && e=$(grep -n "^# instance_queue_test" test.sh | cut -d: -f1) \
    && { sed -n "1,$(grep -n "^source ../common/util.sh" test.sh | cut -d: -f1)p" test.sh; echo 'RET=0; CLIENT_LOG=./preserve_client.log'; sed -n "${s},$((e - 1))p" test.sh; echo 'exit $RET'; } > test.preserve.sh)
# L0_lifecycle: a failed server start or kill goes on to the next block (exit 1 -> RET=1), `kill 0`
# never runs, and the grep for Triton's AsyncUnload()/OnLoadFinal() log lines may find none
(cd L0_lifecycle && sed -E 's/^(\s*)kill \$SERVER_PID\s*$/\1{ [ "$SERVER_PID" != "0" ] \&\& kill $SERVER_PID; } || true/; s/^(\s*)wait \$SERVER_PID\s*$/\1wait $SERVER_PID || true/; s/^(\s*)exit 1\s*$/\1RET=1; echo "*** harness: continuing after a failed server start"/' test.sh \
    | sed 's/`grep -o -e .AsyncUnload(). -e .OnLoadFinal(). $SERVER_LOG`/`grep -o -e "AsyncUnload()" -e "OnLoadFinal()" $SERVER_LOG || true`/' > test.harness.sh \
    && grep -q 'AsyncUnload()" -e "OnLoadFinal()" $SERVER_LOG || true' test.harness.sh)
# L0_model_update: test.l5.sh runs only the four sequence-batcher instance-update cases (issue 33 L5),
# in each rate-limit mode; L0_lifecycle: test.poll.sh only the poll-mode cases
# test_dynamic_file_delete and test_multiple_model_repository_polling (its lines 737-798)
(cd L0_model_update && c=TestInstanceUpdate.test_ && sed "s#^    python instance_update_test.py > #    python instance_update_test.py ${c}oldest_scheduler_update_with_ongoing_sequences ${c}oldest_scheduler_update_no_ongoing_sequences ${c}direct_scheduler_update_with_ongoing_sequences ${c}direct_scheduler_update_no_ongoing_sequences > #" test.sh > test.l5.sh \
    && grep -q "instance_update_test.py ${c}oldest" test.l5.sh)
# L0_model_update: test.rl.sh, the same for the three rate-limiter resource cases
(cd L0_model_update && c=TestInstanceUpdate.test_instance_resource_ && sed "s#^    python instance_update_test.py > #    python instance_update_test.py ${c}decrease ${c}increase ${c}increase_above_explicit > #" test.sh > test.rl.sh \
    && grep -q "instance_update_test.py ${c}decrease" test.rl.sh)
(cd L0_lifecycle && [ "$(sed -n 737p test.harness.sh)" = "# LifeCycleTest.test_dynamic_file_delete" ] \
    && [ "$(sed -n 799,800p test.harness.sh | tail -1)" = "# LifeCycleTest.test_multiple_model_repository_control" ] \
    && { sed -n 1,76p test.harness.sh; sed -n 737,798p test.harness.sh; echo 'if [ $RET -eq 0 ]; then echo -e "\n***\n*** Test Passed\n***"; else echo -e "\n***\n*** Test Failed\n***"; fi; exit $RET'; } > test.poll.sh)
# L0_lifecycle: test.shutdown.sh only the shutdown cases test_shutdown_dynamic, _sequence, _ensemble
# (lines 1555-1665) and test_shutdown_with_live_connection (lines 2111-2139)
(cd L0_lifecycle && [ "$(sed -n 1555p test.harness.sh)" = "# LifeCycleTest.test_shutdown_dynamic" ] \
    && [ "$(sed -n 1667p test.harness.sh)" = "# LifeCycleTest.test_load_gpu_limit" ] \
    && [ "$(sed -n 2111p test.harness.sh)" = "# LifeCycleTest.test_shutdown_with_live_connection" ] \
    && [ "$(sed -n 2140p test.harness.sh)" = "# LifeCycleTest.test_add_custom_config" ] \
    && { sed -n 1,76p test.harness.sh; sed -n 1555,1665p test.harness.sh; sed -n 2111,2139p test.harness.sh; echo 'if [ $RET -eq 0 ]; then echo -e "\n***\n*** Test Passed\n***"; else echo -e "\n***\n*** Test Failed\n***"; fi; exit $RET'; } > test.shutdown.sh)
# L0_lifecycle: test.reload.sh only the reload cases test_model_availability_on_reload, _2, _3 and
# test_model_reload_fail (lines 1118-1307, each of the first three over gRPC and HTTP)
(cd L0_lifecycle && [ "$(sed -n 1118p test.harness.sh)" = "# LifeCycleTest.test_model_availability_on_reload" ] \
    && [ "$(sed -n 1309p test.harness.sh)" = "# LifeCycleTest.test_load_same_model_different_platform" ] \
    && { sed -n 1,76p test.harness.sh; sed -n 1118,1307p test.harness.sh; echo 'if [ $RET -eq 0 ]; then echo -e "\n***\n*** Test Passed\n***"; else echo -e "\n***\n*** Test Failed\n***"; fi; exit $RET'; } > test.reload.sh)
cd "$QA"
# 5. fixtures (ONNX, with upstream's generators in the client venv), ensembles, and the names of
# libtorch_* / openvino_* / plan_* fixtures as ONNX copies (the cases need only the name)
if [ ! -f data/.built ]; then
    rm -rf data data_dec && bash "$H/make_fixtures.sh" > fixtures.log 2>&1 && touch data/.built
fi
{ grep -rl "KIND_GPU" --include=config.pbtxt data || true; } | xargs -r sed -i 's/KIND_GPU/KIND_CPU/g'  # none left on a rerun
# L0_decoupled's fan_repeat: a libtorch_nobatch_int32_int32_int32 stand-in with 1-D inputs
for f in test.harness.sh test.direct.sh; do
    sed -i "s#cp -r \$DATADIR/libtorch_nobatch_int32_int32_int32 \$MODELDIR/.#cp -r $QA/data_dec/libtorch_nobatch_int32_int32_int32 \$MODELDIR/.#" src/qa/L0_decoupled/$f
done
echo "setup done: server $(cut -c1-8 <<< "$SERVER_COMMIT"), ports $B-$((B + 2))"
