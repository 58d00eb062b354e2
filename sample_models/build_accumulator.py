"""``accumulator``: a stateful sample model for the sequence batcher.

A running sum per sequence: ``OUTPUT = (1 - START) * SUM_IN + INPUT``, where START is
the sequence batcher's CONTROL_SEQUENCE_START control and SUM_IN/SUM_OUT its implicit
state, so each sequence (correlation ID) accumulates its own inputs. The graph and config
are the ones the test suite serves (``workbench.testing.models``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

MODEL_NAME = "accumulator"
#: the graph and config live there; editing them makes the build stale (see build.recipe_digest)
RECIPE_MODULES = ("workbench.testing.models",)


def build(model_dir: Path) -> tuple[str, dict]:
    """Write config.pbtxt and 1/model.onnx into the empty ``model_dir``; verify the graph
    with onnxruntime on a 3-step sequence. Returns (summary line, build-info dict).

    Raises:
        RuntimeError: the exported graph does not compute running sums.
    """
    import onnx
    import onnxruntime as ort

    from workbench.testing.models import ACCUMULATOR_CONFIG, accumulator_graph

    model = onnx.helper.make_model(accumulator_graph(), opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    (model_dir / "1").mkdir()
    onnx.save(model, str(model_dir / "1" / "model.onnx"))
    (model_dir / "config.pbtxt").write_text(ACCUMULATOR_CONFIG.lstrip())
    session = ort.InferenceSession(str(model_dir / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    total, sums = np.zeros((1, 1), np.float32), []
    for i, value in enumerate((3.0, 4.0, 5.0)):
        feed = {"INPUT": np.full((1, 1), value, np.float32), "START": np.full((1, 1), float(i == 0), np.float32),
                "SUM_IN": total}
        out, total = session.run(["OUTPUT", "SUM_OUT"], feed)
        sums.append(float(out[0, 0]))
    if sums != [3.0, 7.0, 12.0]:
        raise RuntimeError(f"accumulator computed {sums}, expected [3.0, 7.0, 12.0]")
    return "onnxruntime running sums of (3, 4, 5): 3, 7, 12", {"running_sums": sums}
