#!/usr/bin/env python3
"""compat/scheduling (run by run.sh with the client venv's python): L0_model_config restricted to the
onnx/python/ensemble/common dirs.

Replays test.sh's rules: failure dirs must make the server fail to start with an
`E....` log line containing one of the expected texts (grep regex); success dirs
must start and GET config must match one of the expected files (compare_status.py).
noautofill_platform/* runs with
platform onnxruntime_onnx, --strict-model-config=true
and again with --disable-auto-complete-config. Ports $QA_PORT_BASE +0/+1/+2; one JSON line per
case in $QA/results/L0_model_config.jsonl.
"""

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

QA = os.environ["QA"]
PORT = int(os.environ["QA_PORT_BASE"])
SRC = os.path.join(QA, "src", "qa", "L0_model_config")
WORK = os.path.join(QA, "work_model_config")
RES = os.environ.get("QA_MC_RES", os.path.join(QA, "results", "L0_model_config.jsonl"))
SERVER = os.path.join(QA, "bin", "tritonserver")
PY = os.path.join(QA, "venv", "bin", "python")
ENV = dict(os.environ)
ENV.pop("PYTHONPATH", None)
ENV.pop("QA_RESULTS", None)
only = sys.argv[1:]


READY_TIMEOUT = int(os.environ.get("QA_READY_TIMEOUT", "20"))


def ready(proc, timeout=READY_TIMEOUT):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            return False
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{PORT}/v2/health/ready", timeout=1).status == 200:
                return True
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.5)
    return False


def start(models, args, log):
    with open(log, "w") as f:
        command = [SERVER, f"--model-repository={models}", *args]
        p = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=ENV)
    ok = ready(p)
    return p, ok


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def record(case, outcome, msg=""):
    with open(RES, "a") as f:
        f.write(json.dumps({"test": case, "outcome": outcome, "msg": msg[:1500]}) + "\n")
    print(outcome, case, msg[:200].replace("\n", " "))


def expected_texts(d):
    out = []
    for e in sorted(os.listdir(d)):
        if e.startswith("expected"):
            with open(os.path.join(d, e)) as file:
                out.append(file.read().rstrip("\n"))
    return out


def grep_error(log, ex):
    # same as: grep ^E[0-9][0-9][0-9][0-9].*"$EX"  (basic regex; EX may hold \[ \] escapes)
    r = subprocess.run(["grep", "^E[0-9][0-9][0-9][0-9].*" + ex, log], capture_output=True, text=True)
    return r.returncode == 0


def error_lines(log):
    with open(log, errors="replace") as file:
        return [line.strip() for line in file if re.match(r"^E\d{4}", line)]


def prep_python(d):
    # test.sh: model.py at the model root is copied into 1/; some dirs get python_models/auto_complete/model.py
    if os.path.isfile(os.path.join(d, "model.py")):
        os.makedirs(os.path.join(d, "1"), exist_ok=True)
        shutil.copy(os.path.join(d, "model.py"), os.path.join(d, "1", "model.py"))
    auto = os.path.join(QA, "src", "qa", "python_models", "auto_complete", "model.py")
    if os.path.basename(d) in (
        "input_mismatch_datatype",
        "input_mismatch_dims",
        "output_mismatch_datatype",
        "output_mismatch_dims",
        "incomplete_output",
        "unknown_input",
        "unknown_output",
        "empty_config",
    ):
        os.makedirs(os.path.join(d, "1"), exist_ok=True)
        if not os.path.exists(os.path.join(d, "1", "model.py")):
            shutil.copy(auto, os.path.join(d, "1", "model.py"))


def ensure_version_dirs(models):
    for m in os.listdir(models):
        md = os.path.join(models, m)
        has_config = os.path.isdir(md) and os.path.isfile(os.path.join(md, "config.pbtxt"))
        if has_config and not any(x.isdigit() for x in os.listdir(md)):
            os.makedirs(os.path.join(md, "1"), exist_ok=True)


def failure_case(rel, args=("--strict-model-config=false",), platform=None, tag=None):
    case = tag or rel
    if only and not any(o in case for o in only):
        return
    target = os.path.join(SRC, rel)
    models = os.path.join(WORK, "models")
    shutil.rmtree(models, ignore_errors=True)
    os.makedirs(models)
    name = os.path.basename(rel)
    if os.path.isfile(os.path.join(target, "config.pbtxt")):
        shutil.copytree(target, os.path.join(models, name))
        exdir = os.path.join(models, name)
    else:
        for x in os.listdir(target):
            s = os.path.join(target, x)
            (shutil.copytree if os.path.isdir(s) else shutil.copy)(s, os.path.join(models, x))
        exdir = models
    if "python" in rel:
        for m in os.listdir(models):
            if os.path.isdir(os.path.join(models, m)):
                prep_python(os.path.join(models, m))
    ensure_version_dirs(models)
    if platform:
        cfg = os.path.join(models, name, "config.pbtxt")
        if os.path.isfile(cfg):
            with open(cfg) as file:
                t = "\n".join(line for line in file.read().split("\n") if "platform:" not in line)
            with open(cfg, "w") as file:
                file.write(t + f'\nplatform: "{platform}"\n')
    log = os.path.join(WORK, "logs", case.replace("/", ".") + ".log")
    p, ok = start(models, list(args), log)
    if ok:
        stop(p)
        record(case, "fail", "unexpected success starting server (model loaded)")
        return
    stop(p)
    exs = expected_texts(exdir)
    if any(grep_error(log, ex) for ex in exs):
        record(case, "pass")
    else:
        record(case, "fail", "expected: " + " || ".join(exs) + "\n  got: " + " | ".join(error_lines(log))[-900:])


def success_case(rel):
    case = rel
    if only and not any(o in case for o in only):
        return
    target = os.path.join(SRC, rel)
    name = os.path.basename(rel)
    models = os.path.join(WORK, "models")
    shutil.rmtree(models, ignore_errors=True)
    os.makedirs(models)
    if os.path.isfile(os.path.join(target, "config.pbtxt")) or name.startswith("no_config"):
        shutil.copytree(target, os.path.join(models, name))
    else:
        for x in os.listdir(target):
            s = os.path.join(target, x)
            (shutil.copytree if os.path.isdir(s) else shutil.copy)(s, os.path.join(models, x))
    if "python" in rel:
        for m in os.listdir(models):
            if os.path.isdir(os.path.join(models, m)):
                prep_python(os.path.join(models, m))
    ensure_version_dirs(models)
    log = os.path.join(WORK, "logs", case.replace("/", ".") + ".log")
    p, ok = start(models, ["--strict-model-config=false"], log)
    if not ok:
        stop(p)
        record(case, "fail", "unable to start server: " + " | ".join(error_lines(log))[-900:])
        return
    r = subprocess.run(
        [
            PY,
            os.environ.get("QA_COMPARE", os.path.join(SRC, "compare_status.py")),
            "--expected_dir",
            os.path.join(models, name),
            "--model",
            name,
        ],
        capture_output=True,
        text=True,
        env=ENV,
    )
    stop(p)
    if r.returncode == 0:
        record(case, "pass")
    elif r.returncode == 3:
        record(case, "harness-only", "GPU-machine expected file: " + r.stdout[-600:])
    else:
        record(case, "fail", "unexpected model config: " + (r.stdout + r.stderr)[-1400:])


os.makedirs(os.path.join(WORK, "logs"), exist_ok=True)
# cpu_instance fixture (test.sh copies the onnx identity model)
ci = os.path.join(SRC, "autofill_noplatform_success/onnx/cpu_instance/1")
os.makedirs(ci, exist_ok=True)
shutil.copy(os.path.join(QA, "data", "qa_identity_model_repository", "onnx_zero_1_float16", "1", "model.onnx"), ci)
for kind in ("common", "onnx", "python", "ensemble"):
    for t in sorted(os.listdir(os.path.join(SRC, "autofill_noplatform", kind))):
        failure_case(f"autofill_noplatform/{kind}/{t}")
for kind in ("onnx", "python", "ensemble"):
    for t in sorted(os.listdir(os.path.join(SRC, "autofill_noplatform_success", kind))):
        success_case(f"autofill_noplatform_success/{kind}/{t}")
for t in sorted(os.listdir(os.path.join(SRC, "noautofill_platform"))):
    failure_case(
        f"noautofill_platform/{t}",
        ("--strict-model-config=true",),
        "onnxruntime_onnx",
        f"noautofill_platform/onnxruntime_onnx/{t}",
    )
for t in sorted(os.listdir(os.path.join(SRC, "noautofill_platform"))):
    failure_case(
        f"noautofill_platform/{t}",
        ("--disable-auto-complete-config",),
        "onnxruntime_onnx",
        f"noautofill_platform/onnxruntime_onnx_disable_autocomplete/{t}",
    )
print("done")
