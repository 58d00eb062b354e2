"""``workbench build-plan``: the command-line face of :func:`workbench.tools.build_plan.build_plan`.

    workbench build-plan model.onnx -o repo/bert/1/model.plan --max-batch 32 \\
        --dim sequence=1,128,512 --config repo/bert/config.pbtxt

Flags mirror trtexec's where it has one (``--min-shapes`` = ``--minShapes``, ``--fp16``,
``--no-tf32`` = ``--noTF32``, ``--workspace`` in MiB, ``--hardware-compatibility``). Exit
status: 0 when the plan is written; 2 for a mistake in the flags or shapes; 1 when the plan
cannot be built here (no tensorrt package, no GPU, TensorRT's own parse or build errors),
always with a one-line reason on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_build_plan_command(commands) -> None:
    """Add the ``build-plan`` sub-command to the ``workbench`` parser's sub-parsers."""
    plan = commands.add_parser(
        "build-plan", help="build a TensorRT plan (model.plan) from an ONNX model",
        description="Build a TensorRT plan from an ONNX model with an optimization profile for "
                    "its dynamic dimensions (like trtexec --saveEngine). Needs the tensorrt "
                    "package and the NVIDIA GPU the plan will run on.")
    plan.add_argument("onnx", metavar="MODEL.onnx", help="the ONNX model")
    plan.add_argument("-o", "--output", required=True, metavar="PLAN",
                      help="where to write the plan (e.g. repo/model/1/model.plan)")
    plan.add_argument("--min-batch", type=int, default=1, help="smallest batch (default 1)")
    plan.add_argument("--opt-batch", type=int, default=None,
                      help="batch TensorRT tunes for (default: --max-batch)")
    plan.add_argument("--max-batch", type=int, default=8, help="largest batch (default 8)")
    plan.add_argument("--dim", action="append", default=[], metavar="NAME=MIN,OPT,MAX",
                      help="range of the dynamic dimension the ONNX model calls NAME, in every "
                           "input (e.g. sequence=1,128,512; repeatable)")
    for flag, which in (("--min-shapes", "smallest"), ("--opt-shapes", "tuned-for"),
                        ("--max-shapes", "largest")):
        plan.add_argument(flag, action="append", default=[], metavar="NAME:DxD,...",
                          help=f"{which} whole input shapes, trtexec style (e.g. input_ids:1x128)")
    plan.add_argument("--fp16", action="store_true", help="allow FP16 kernels")
    plan.add_argument("--no-tf32", action="store_true",
                      help="no TF32 for FP32 math (closer to FP32 references; slower)")
    plan.add_argument("--workspace", type=int, default=1024, metavar="MiB",
                      help="builder workspace limit in MiB (default 1024)")
    plan.add_argument("--hardware-compatibility", default="none",
                      choices=["none", "ampere+", "same-compute-capability"],
                      help="build one plan for every Ampere-or-newer GPU (ampere+) instead of "
                           "only this GPU's architecture (default none)")
    plan.add_argument("--config", default=None, metavar="PATH",
                      help="also write a matching config.pbtxt (a file, or a model folder)")
    plan.add_argument("--name", default=None,
                      help="model name in --config (default: the model folder holding the plan's "
                           "version folder, else the ONNX file's stem)")


def run_build_plan(args: argparse.Namespace) -> int:
    """Run ``build-plan`` with parsed ``args``; returns the exit status."""
    from workbench.tools.build_plan import build_plan, write_model_config
    from workbench.tools.plan_shapes import PlanBuildError, parse_dims, parse_shapes, split_shapes

    plan_path = Path(args.output)
    try:
        shapes = split_shapes(parse_shapes(args.min_shapes, "--min-shapes"),
                              parse_shapes(args.opt_shapes, "--opt-shapes"),
                              parse_shapes(args.max_shapes, "--max-shapes"))
        tensors = build_plan(
            args.onnx, plan_path, min_batch=args.min_batch, opt_batch=args.opt_batch,
            max_batch=args.max_batch, dims=parse_dims(args.dim), shapes=shapes, fp16=args.fp16,
            tf32=not args.no_tf32, workspace_bytes=args.workspace << 20,
            hardware_compatibility=args.hardware_compatibility)
    except PlanBuildError as exc:
        print(f"workbench build-plan: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    print(f"wrote {plan_path} ({plan_path.stat().st_size / 2**20:.1f} MiB)")
    if args.config:
        name = args.name or _model_name(plan_path, Path(args.onnx))
        print(f"wrote {write_model_config(args.config, name, tensors)}")
    return 0


def _model_name(plan_path: Path, onnx_path: Path) -> str:
    """``repo/<name>/<version>/model.plan`` -> ``<name>``; else the ONNX file's stem."""
    version = plan_path.resolve().parent
    return version.parent.name if version.name.isdigit() else onnx_path.stem
