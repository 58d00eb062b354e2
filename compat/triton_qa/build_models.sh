#!/bin/bash
# compat/triton_qa (called by run.sh): builds the per-suite model repositories the upstream test.sh
# files expect, under $QA/work, from the fixtures in $QA/data and the stand-ins in standin/.
set -euo pipefail
H=$(cd "$(dirname "$0")" && pwd)
: "${QA:?run compat/triton_qa/run.sh}"
Q=$QA/work
D=$QA/data
EX=$QA/src/docs/examples/model_repository
STANDIN=$H/standin/identity_model.py

# identity-backend -> python stand-in
standin() {  # dir
  for m in "$@"; do
    sed -i 's/^backend: *"identity"/backend: "python"/' $m/config.pbtxt
    mkdir -p $m/1 && cp $STANDIN $m/1/model.py
  done
}

examples() {  # dest
  rm -rf $1 && mkdir -p $1
  for m in simple simple_dyna_sequence simple_identity simple_int8 simple_sequence simple_string; do
    cp -r $EX/$m $1/
  done
}

# ---- L0_http / L0_grpc example models
examples $Q/L0_http/models
examples $Q/L0_grpc/models
# L0_http python_unit_test_models (http_test.py)
M=$Q/L0_http/python_unit_test_models; rm -rf $M; mkdir -p $M
for m in onnx_zero_1_float32 onnx_zero_1_object onnx_zero_1_float16 onnx_zero_3_float32; do cp -r $D/qa_identity_model_repository/$m $M/; done
cp -r $M/onnx_zero_1_object $M/onnx_zero_1_object_1_element && (cd $M/onnx_zero_1_object_1_element && sed -i "s/onnx_zero_1_object/onnx_zero_1_object_1_element/" config.pbtxt && sed -i "0,/-1/{s/-1/1/}" config.pbtxt)
cp -r $M/onnx_zero_1_float32 $M/onnx_zero_1_float32_queue && (cd $M/onnx_zero_1_float32_queue && sed -i "s/onnx_zero_1_float32/onnx_zero_1_float32_queue/" config.pbtxt && printf 'dynamic_batching { \n    max_queue_delay_microseconds: 1000000\n    preferred_batch_size: [ 8 ]\n    default_queue_policy {\n        max_queue_size: 1\n    }\n}\n' >> config.pbtxt)
cp -r $EX/simple_identity $M/
cp -r $EX/simple_identity $M/simple_identity_int64 && (cd $M/simple_identity_int64 && sed -i "s/TYPE_STRING/TYPE_INT64/" config.pbtxt && sed -i "s/simple_identity/simple_identity_int64/" config.pbtxt)
# L0_grpc grpc_test_models
G=$Q/L0_grpc/grpc_test_models; rm -rf $G; mkdir -p $G
cp -r $EX/simple $G/
cp -r $Q/python_models/string_identity $G/string_identity && mkdir -p $G/string_identity/1 && mv $G/string_identity/model.py $G/string_identity/1/model.py
sed -i "s/dims: \[ 1 \]/dims: [ -1 ]/g" $G/string_identity/config.pbtxt

# ---- L0_infer (BACKENDS="onnx python", TARGET=cpu)
I=$Q/L0_infer/models; rm -rf $I; mkdir -p $I
cp -r $D/qa_model_repository/onnx* $I/ && rm -rf $I/onnx_*bf16*
for onnx_model in $(find $D/qa_model_repository/ -maxdepth 1 -type d -regex '.*onnx_.*'); do
  [[ "$onnx_model" == *bf16* ]] && continue
  python_model=$(echo $onnx_model | sed 's/onnx/python/g' | sed 's,'"$D/qa_model_repository/"',,g')
  mkdir -p $I/$python_model/1/
  cat $onnx_model/config.pbtxt | sed 's/platform:.*//g' | sed 's/version_policy.*/backend:\ "python"/g' | sed 's/onnx/python/g' > $I/$python_model/config.pbtxt
  cp $onnx_model/output0_labels.txt $I/$python_model
  is_swap=0
  for st in float32 int32 int16 int8; do
    mt=${st}_${st}_${st}
    if [ $python_model == python_$mt ] || [ $python_model == python_nobatch_$mt ]; then
      cp $Q/python_models/sub_add/model.py $I/$python_model/1/; is_swap=1
    fi
  done
  [ $is_swap == 0 ] && cp $Q/python_models/add_sub/model.py $I/$python_model/1/
done
cp -r $D/qa_ensemble_model_repository/qa_model_repository/*onnx* $I/
rm -rf $I/*onnx*bf16*
cp -r $D/qa_ensemble_model_repository/qa_model_repository/nop_* $I/
for n in $I/nop_*; do mkdir -p $n/1; done
standin $I/nop_*
for EM in wrong_label_int32_float32_float32 label_override_int32_float32_float32 mix_type_int32_float32_float32 batch_to_nobatch_float32_float32_float32 batch_to_nobatch_nobatch_float32_float32_float32 nobatch_to_batch_float32_float32_float32 nobatch_to_batch_nobatch_float32_float32_float32 mix_nobatch_batch_float32_float32_float32; do
  mkdir -p $Q/ensemble_models/$EM/1 && cp -r $Q/ensemble_models/$EM $I/
done
for FW in onnx python; do
  for MC in $(ls $I/${FW}*/config.pbtxt); do echo "instance_group [ { kind: KIND_CPU }]" >> $MC; done
done
cp -r $Q/custom_models/custom_zero_1_float32 $I/ && mkdir -p $I/custom_zero_1_float32/1 && echo "instance_group [ { kind: KIND_CPU }]" >> $I/custom_zero_1_float32/config.pbtxt
cp -r $I/custom_zero_1_float32 $I/custom_nobatch_zero_1_float32
(cd $I/custom_zero_1_float32 && sed -i "s/max_batch_size: 1/max_batch_size: 8/" config.pbtxt && sed -i "s/dims: \[ 1 \]/dims: \[ -1 \]/" config.pbtxt)
(cd $I/custom_nobatch_zero_1_float32 && sed -i "s/custom_zero_1_float32/custom_nobatch_zero_1_float32/" config.pbtxt && sed -i "s/max_batch_size: 1/max_batch_size: 0/" config.pbtxt && sed -i "s/dims: \[ 1 \]/dims: \[ -1, -1 \]/" config.pbtxt)
standin $I/custom_zero_1_float32 $I/custom_nobatch_zero_1_float32

# ---- L0_shared_memory
S=$Q/L0_shared_memory; rm -rf $S/models $S/python_models $S/models_large; mkdir -p $S/models
cp -r $EX/simple $S/models/
mkdir -p $S/python_models/simple/1/
cp $Q/python_models/execute_delayed_model/model.py $S/python_models/simple/1/
cp $Q/python_models/execute_delayed_model/config.pbtxt $S/python_models/simple/
mkdir -p $S/models_large
for backend in python onnx; do
  model="${backend}_int32_int32_int32"; md="$S/models_large/${model}"
  if [[ $backend == "python" ]]; then
    mkdir -p $md/1; cp $Q/python_models/add_sub/model.py $md/1/; cp $Q/python_models/add_sub/config.pbtxt $md/
    sed -i 's/TYPE_FP32/TYPE_INT32/g' $md/config.pbtxt; echo "max_batch_size: 8" >> $md/config.pbtxt
  else
    mkdir -p $md; cp -r $D/qa_model_repository/${model}/1 $md/1; cp $D/qa_model_repository/${model}/config.pbtxt $md/; cp $D/qa_model_repository/${model}/output0_labels.txt $md/
  fi
done

# ---- L0_client_nobatch
C=$Q/L0_client_nobatch/models; rm -rf $C; mkdir -p $C; cp -r $D/qa_model_repository/onnx_* $C/; rm -rf $C/*bf16*

echo built

# ---- L0_client_nobatch (test.sh: MODELDIR=./qa_model_repository)
C=$Q/L0_client_nobatch/qa_model_repository; rm -rf $C $Q/L0_client_nobatch/models; mkdir -p $C; cp -r $D/qa_model_repository/onnx_* $C/

# ---- L0_string_io
M=$Q/L0_string_io/models; rm -rf $M; mkdir -p $M
cp -r $D/qa_identity_model_repository/onnx_zero_1_object $M/
cp -r $Q/python_models/string_identity $M/ && mkdir -p $M/string_identity/1 && mv $M/string_identity/model.py $M/string_identity/1/model.py
(cd $M/string_identity && sed -i "s/\[ 1 \]/\[ 8 \]/" config.pbtxt)

# ---- L0_infer_zero
M=$Q/L0_infer_zero/models; rm -rf $M; mkdir -p $M
cp -r $D/qa_identity_model_repository/* $M/ && cp -r $D/qa_ensemble_model_repository/qa_identity_model_repository/* $M/
rm -rf $M/plan_compatible*
for n in $M/nop_*; do mkdir -p $n/1; done; standin $M/nop_*

# ---- L0_infer_variable (cpu target; onnx only)
M=$Q/L0_infer_variable/models; rm -rf $M
cp -r $D/qa_variable_model_repository $M
cp -r $D/qa_ensemble_model_repository/qa_variable_model_repository/*onnx* $D/qa_ensemble_model_repository/qa_variable_model_repository/nop_* $M/
rm -rf $M/onnx_*bf16* $M/*onnx*bf16*
for n in $M/nop_*; do mkdir -p $n/1; done; standin $M/nop_*
for MC in $(ls $M/onnx*/config.pbtxt); do echo "instance_group [ { kind: KIND_CPU }]" >> $MC; done

# ---- L0_output_name
M=$Q/L0_output_name/models; rm -rf $M; mkdir -p $M
cp -r $D/qa_identity_model_repository/*_nobatch_zero_1_float32 $M/

# ---- L0_scalar_io
M=$Q/L0_scalar_io/models; rm -rf $M; mkdir -p $M; cp -r $D/qa_scalar_models/* $M/

# ---- L0_server_status (poll mode; only onnx models exist here)
M=$Q/L0_server_status/models; rm -rf $M; cp -r $D/qa_model_repository $M

# ---- L0_parameters
M=$Q/L0_parameters/model_repository
mkdir -p $M/identity/1 $M/ensemble/1
grep -q 'backend: "python"' $M/identity/config.pbtxt || standin $M/identity
M=$Q/L0_parameters/models; rm -rf $M
mkdir -p $M/identity_fp32/1 $M/identity_bytes/1
cp $Q/python_models/identity_fp32/config.pbtxt $M/identity_fp32/; cp $Q/python_models/identity_fp32/model.py $M/identity_fp32/1/
cp $Q/python_models/identity_fp32/config.pbtxt $M/identity_bytes/; cp $Q/python_models/identity_fp32/model.py $M/identity_bytes/1/
(cd $M/identity_bytes && sed -i 's/identity_fp32/identity_bytes/' config.pbtxt && sed -i 's/TYPE_FP32/TYPE_STRING/' config.pbtxt)

# ---- L0_input_validation
V=$Q/L0_input_validation
rm -rf $V/models2; cp -r $V/models $V/models2
mkdir -p $V/models2/pt_identity/1
${FIXTURE_PY:-python3} -c "import torch; torch.jit.save(torch.jit.script(torch.nn.Identity()), '$V/models2/pt_identity/1/model.pt')"
cat > $V/models2/pt_identity/config.pbtxt <<EOL
name: "pt_identity"
backend: "pytorch"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [8]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [8]
  }
]
dynamic_batching {
    max_queue_delay_microseconds: 1000000
}
EOL
cp -r $D/qa_model_repository/onnx_object_int32_int32 $V/models2/
rm -rf $V/test_models; mkdir -p $V/test_models
echo built2

# ---- simple_string_dyna_sequence stand-in (C++ dyna_sequence backend -> python), as test.sh's sed + model.py
for d in $Q/L0_http/models $Q/L0_grpc/models; do
  M=$d/simple_string_dyna_sequence; rm -rf $M; cp -r $EX/simple_dyna_sequence $M
  sed -i "s/simple_dyna_sequence/simple_string_dyna_sequence/g" $M/config.pbtxt
  sed -i 's/^platform: .*/backend: "python"/g' $M/config.pbtxt
  sed -i "/CONTROL_SEQUENCE_CORRID/{n;s/data_type:.*/data_type: TYPE_STRING/}" $M/config.pbtxt
  sed -i "s/count: 2/count: 1/" $M/config.pbtxt
  rm -f $M/1/model.onnx; cp $H/standin/dyna_sequence_model.py $M/1/model.py
done
echo built3

# ---- L0_grpc models_mc (run_grpc2.sh): the 7 models of L0_grpc/models + densenet_onnx as config only (8 in the index,
#      as simple_grpc_model_control.py counts; explicit mode never loads densenet_onnx)
W=$Q/L0_grpc; rm -rf $W/models_mc; cp -r $W/models $W/models_mc
mkdir -p $W/models_mc/densenet_onnx && cp $EX/densenet_onnx/config.pbtxt $EX/densenet_onnx/densenet_labels.txt $W/models_mc/densenet_onnx/
echo built4
