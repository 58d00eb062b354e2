#!/bin/bash
# Triton's qa/L0_infer_reshape (github:triton-inference-server/server) against `workbench serve`,
# CPU only: upstream's own model generator (gen_qa_reshape_models.py: --onnx --libtorch --variable,
# then --ensemble, as upstream's gen_qa_model_repository runs it), its test.sh's custom_* models,
# and infer_reshape_test.py unchanged but for the ports. See compat/README.md.
#
#   bash compat/infer_reshape/run.sh       (from the project checkout, after `make setup`)
#
# Env: PY (default the checkout's .venv python); SERVER_GIT: a bare git directory (clone or mirror) of github:triton-inference-server/server;
# SCRATCH (default /tmp/infer_reshape): upstream files, models, server.log and client.log;
# HTTP_PORT / GRPC_PORT (default 18600 / 18601): free ports for the server.
# Triton's C++ "identity" test backend (custom_* and the ensembles' nop_* models) is stood in for
# by a Python model written here (OUTPUT<i> = INPUT<i>). Not runnable: test_ff2 and test_ff4 also
# ask for TensorRT plan models (none on a CPU).
set -euo pipefail
PROJECT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-$PROJECT/.venv/bin/python}
SERVER_GIT=${SERVER_GIT:-/work/.mirror/triton-inference-server+server/repo}
SCRATCH=${SCRATCH:-/tmp/infer_reshape}
HTTP_PORT=${HTTP_PORT:-18600}
GRPC_PORT=${GRPC_PORT:-18601}

rm -rf "$SCRATCH" && mkdir -p "$SCRATCH/data"
git --git-dir="$SERVER_GIT" archive HEAD qa/common qa/L0_infer_reshape | tar -x -C "$SCRATCH"
echo "server $(git --git-dir="$SERVER_GIT" rev-parse --short HEAD)"
Q=$SCRATCH/qa; D=$SCRATCH/data; M=$Q/L0_infer_reshape/models
sed -i "s/{_tritonserver_ipaddr}:8000/{_tritonserver_ipaddr}:$HTTP_PORT/g; s/{_tritonserver_ipaddr}:8001/{_tritonserver_ipaddr}:$GRPC_PORT/g" \
    "$Q/common/infer_util.py"
(cd "$Q/common" && PYTHONPATH= "$PY" gen_qa_reshape_models.py --onnx --libtorch --variable --models_dir="$D/reshape" >/dev/null \
    && PYTHONPATH= "$PY" gen_qa_reshape_models.py --ensemble --models_dir="$D/ensemble" >/dev/null)
mkdir -p "$M" && cp -r "$D"/reshape/* "$D"/ensemble/* "$M/"
for i in nobatch_zero_3_float32 nobatch_zero_4_float32 zero_1_float32 zero_2_float32 zero_3_float32 zero_4_float32 \
         nobatch_zero_1_int32 nobatch_zero_2_int32 nobatch_zero_3_int32 zero_1_int32 zero_2_int32 zero_3_int32; do
    cp -r "$M/onnx_$i" "$M/custom_$i" && rm -rf "$M/custom_$i"/1/*
    sed -i "s/^platform:.*/backend: \"identity\"/; s/^name:.*/name: \"custom_$i\"/" "$M/custom_$i/config.pbtxt"
    echo "instance_group [ { kind: KIND_CPU }]" >> "$M/custom_$i/config.pbtxt"
done
for config in $(grep -l '^backend: *"identity"' "$M"/*/config.pbtxt); do
    sed -i 's/^backend: *"identity"/backend: "python"/' "$config"
    mkdir -p "$(dirname "$config")/1"
    cat > "$(dirname "$config")/1/model.py" <<'PY'
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Stand-in for Triton's identity test backend: OUTPUT<i> = INPUT<i>, in config order."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.pairs = list(zip([i["name"] for i in config["input"]], [o["name"] for o in config["output"]]))

    def execute(self, requests):
        responses = []
        for request in requests:
            tensors = [pb_utils.Tensor(out, t.as_numpy()) for name, out in self.pairs
                       if (t := pb_utils.get_input_tensor_by_name(request, name)) is not None]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
PY
done
cd "$Q/L0_infer_reshape"
PYTHONPATH=$PROJECT "$PY" -m workbench.hosts.cli serve --model-repository="$M" --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" \
    --allow-metrics=false > "$SCRATCH/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 180); do curl -sf "127.0.0.1:$HTTP_PORT/v2/health/ready" >/dev/null && break; sleep 1; done
PYTHONPATH= "$PY" infer_reshape_test.py > "$SCRATCH/client.log" 2>&1 || true
tail -3 "$SCRATCH/client.log"
grep -E "^(FAIL|ERROR):" "$SCRATCH/client.log" || true
