#!/bin/bash
# compat/python_backend: the QA fixtures the bls / ensemble suites copy from $DATADIR, generated
# with NVIDIA's own qa/common generators: the ONNX ones with the client venv (onnx), the
# TorchScript ones with the product venv's python (it has torch; nothing is installed into it).
# Called by setup.sh with QA and WB_VENV set.
set -euo pipefail
D=$QA/data; PY=$QA/venv/bin/python; TPY=${TORCH_PY:-$WB_VENV/bin/python}
cd "$QA/src/qa/common"
rm -rf "$D/qa_model_repository" "$D/qa_sequence_implicit_model_repository" "$D/torch_tmp"
mkdir -p "$D"
$PY gen_qa_models.py --onnx --models_dir="$D/qa_model_repository" > "$D.onnx.log" 2>&1
$PY gen_qa_implicit_models.py --onnx --models_dir="$D/qa_sequence_implicit_model_repository" > "$D.implicit.log" 2>&1
$TPY gen_qa_models.py --libtorch --models_dir="$D/torch_tmp" > "$D.libtorch.log" 2>&1
for m in libtorch_nobatch_float32_float32_float32 libtorch_float32_float32_float32; do
    cp -r "$D/torch_tmp/$m" "$D/qa_model_repository/"
done
rm -rf "$D/torch_tmp"
echo "fixtures: $(ls "$D/qa_model_repository" | wc -l) models"
