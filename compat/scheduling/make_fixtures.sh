#!/bin/bash
# compat/scheduling (called by setup.sh): the ONNX QA fixtures into $QA/data with upstream's
# qa/common generators (client venv), the ensembles, ONNX copies under the libtorch_* /
# openvino_* / plan_* names, and $QA/data_dec: L0_decoupled's fan_repeat needs
# libtorch_nobatch_int32_int32_int32 with 1-D dynamic inputs, outputs OUTPUT__0/OUTPUT__1 and
# OUTPUT__1 = INPUT0 + INPUT1 (the plain ONNX copy cannot load once test.sh sets its dims to [ 1 ]).
set -euxo pipefail
: "${QA:?}"
D=$QA/data; PY=$QA/venv/bin/python
cd "$QA/src/qa/common"
$PY gen_qa_models.py --onnx --models_dir="$D/qa_model_repository"
$PY gen_qa_models.py --onnx --variable --models_dir="$D/qa_variable_model_repository"
$PY gen_qa_identity_models.py --onnx --models_dir="$D/qa_identity_model_repository"
$PY gen_qa_sequence_models.py --onnx --models_dir="$D/qa_sequence_model_repository"
$PY gen_qa_sequence_models.py --onnx --variable --models_dir="$D/qa_variable_sequence_model_repository"
$PY gen_qa_dyna_sequence_models.py --onnx --models_dir="$D/qa_dyna_sequence_model_repository"
$PY gen_qa_implicit_models.py --onnx --models_dir="$D/qa_sequence_implicit_model_repository"
$PY gen_qa_dyna_sequence_implicit_models.py --onnx --models_dir="$D/qa_dyna_sequence_implicit_model_repository"
E=$D/qa_ensemble_model_repository
$PY gen_qa_models.py --ensemble --models_dir="$E/qa_model_repository"
$PY gen_qa_sequence_models.py --ensemble --models_dir="$E/qa_sequence_model_repository"
$PY gen_qa_models.py --ensemble --variable --models_dir="$E/qa_variable_model_repository"
# libtorch_* / openvino_* / plan_* names -> ONNX copies
R=$D/qa_model_repository
for b in libtorch openvino plan; do
    for t in float32_float32_float32 int32_int32_int32 float32_int32_int32 int32_float32_float32 nobatch_float32_float32_float32 nobatch_int32_int32_int32; do
        [ -d "$R/onnx_$t" ] || continue
        rm -rf "$R/${b}_$t" && cp -r "$R/onnx_$t" "$R/${b}_$t"
        sed -i "s/onnx_$t/${b}_$t/" "$R/${b}_$t/config.pbtxt"
    done
done
# libtorch ensembles: OUTPUT__n -> OUTPUTn (the substitutes are ONNX)
grep -rl "OUTPUT__" --include=config.pbtxt "$E/qa_model_repository" | grep libtorch | xargs -r sed -i "s/OUTPUT__\([0-9]\)/OUTPUT\1/g"
# L0_decoupled's libtorch_nobatch_int32_int32_int32 stand-in (from gen_qa_models.create_onnx_modelfile)
OUT=$QA/data_dec; rm -rf "$OUT"; mkdir -p "$OUT"
OUT=$OUT $PY - <<'PY'
import os, sys, types
import numpy as np
sys.argv = ["x"]
import gen_qa_models as g, test_util, onnx
g.tu = test_util; g.onnx = onnx
out = os.environ["OUT"]
g.FLAGS = types.SimpleNamespace(variable=True, tensorrt_compat=False, models_dir=out, onnx_opset=0)
for v in (1, 2, 3):
    g.create_onnx_modelfile(out, 0, v, (-1,), (-1,), (-1,), np.int32, np.int32, np.int32, swap=True)
PY
M=$OUT/libtorch_nobatch_int32_int32_int32
cp -r "$R/libtorch_nobatch_int32_int32_int32" "$M"
for v in 1 2 3; do cp "$OUT/onnx_nobatch_int32_int32_int32/$v/model.onnx" "$M/$v/model.onnx"; done
M=$M $PY - <<'PY'
import os, onnx
for v in (1, 2, 3):
    p = os.path.join(os.environ["M"], str(v), "model.onnx")
    m = onnx.load(p); ren = {"OUTPUT0": "OUTPUT__0", "OUTPUT1": "OUTPUT__1"}
    for n in m.graph.node:
        n.output[:] = [ren.get(o, o) for o in n.output]
    for o in m.graph.output:
        o.name = ren.get(o.name, o.name)
    onnx.save(m, p)
PY
sed -i 's/dims:.*\[.*\]/dims: [ -1 ]/g; s/name: "OUTPUT0"/name: "OUTPUT__0"/; s/name: "OUTPUT1"/name: "OUTPUT__1"/' "$M/config.pbtxt"
echo "fixtures done"
