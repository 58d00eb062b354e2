#!/bin/bash
# compat/triton_qa set-up, called by run.sh: upstream sources, client venv, fixtures, the working
# copy with the ports moved to QA_PORT_BASE, the per-suite model repositories. All under $QA.
set -euo pipefail
H=$(cd "$(dirname "$0")" && pwd)
: "${QA:?}" "${QA_PORT_BASE:?}" "${SERVER_GIT:?}" "${CLIENT_GIT:?}" "${SERVER_COMMIT:?}" "${WB_VENV:?}"
mkdir -p "$QA" && cd "$QA"
# 1. upstream sources: the server's qa/ and example models at SERVER_COMMIT, the client's examples
rm -rf src && mkdir -p src/client
git --git-dir="$SERVER_GIT" archive "$SERVER_COMMIT" qa docs/examples | tar -x -C src
git --git-dir="$CLIENT_GIT" archive HEAD src/python/examples | tar -x -C src/client
git --git-dir="$CLIENT_GIT" rev-parse --short HEAD > src/client.commit
# 2. client venv (never the product's)
if [ ! -f venv/.installed ]; then
    rm -rf venv && python3 -m venv venv
    venv/bin/pip install --quiet --progress-bar off 'tritonclient[all]==2.73.0' numpy onnx pytest requests psutil \
        ml_dtypes pillow sseclient-py
    touch venv/.installed
fi
# 3. fixtures, with upstream's generators (a Python with onnx, numpy and torch: the product's venv)
FIXTURE_PY=${FIXTURE_PY:-$WB_VENV/bin/python}
if [ ! -f data/.built ]; then
    rm -rf data && D=$QA/data && (cd src/qa/common \
        && $FIXTURE_PY gen_qa_models.py --onnx --models_dir="$D/qa_model_repository" \
        && $FIXTURE_PY gen_qa_models.py --onnx --variable --models_dir="$D/qa_variable_model_repository" \
        && $FIXTURE_PY gen_qa_identity_models.py --onnx --models_dir="$D/qa_identity_model_repository" \
        && $FIXTURE_PY gen_qa_ort_scalar_models.py --models_dir="$D/qa_scalar_models" \
        && $FIXTURE_PY gen_qa_models.py --ensemble --models_dir="$D/qa_ensemble_model_repository/qa_model_repository" \
        && $FIXTURE_PY gen_qa_models.py --ensemble --variable --models_dir="$D/qa_ensemble_model_repository/qa_variable_model_repository" \
        && $FIXTURE_PY gen_qa_identity_models.py --ensemble --models_dir="$D/qa_ensemble_model_repository/qa_identity_model_repository" \
        && $FIXTURE_PY gen_qa_models.py --libtorch --models_dir="$D/qa_model_repository_libtorch") > fixtures.log 2>&1
    touch data/.built
fi
# 4. the working copy: ports 8000/8001/8002 -> QA_PORT_BASE +0/+1/+2, localhost -> 127.0.0.1
B=$QA_PORT_BASE
rm -rf work && cp -r src/qa work && mkdir -p work/clients && cp src/client/src/python/examples/*.py work/clients/
grep -rlE "localhost|:800[0-2]\b" --include=*.py --include=*.sh work | xargs -r sed -i -E \
    "s/localhost:8000\b/127.0.0.1:$B/g; s/localhost:8001\b/127.0.0.1:$((B + 1))/g; s/localhost:8002\b/127.0.0.1:$((B + 2))/g; \
     s/\}:8000\b/}:$B/g; s/\}:8001\b/}:$((B + 1))/g; s/\}:8002\b/}:$((B + 2))/g; s/\"localhost\"/\"127.0.0.1\"/g"
# 5. the per-suite model repositories
FIXTURE_PY=$FIXTURE_PY bash "$H/build_models.sh" > build_models.log 2>&1
echo "setup done: server $(cut -c1-8 <<< "$SERVER_COMMIT"), client $(cat src/client.commit), ports $B-$((B + 2))"
