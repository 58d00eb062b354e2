"""The optimization profile a plan is built with: every input's min/opt/max shape, from the ONNX
model's input shapes plus what the operator says about its dynamic dimensions. Pure (``onnx``
reads the graph; no TensorRT), so mistakes are reported before any GPU work.

Three ways to give ranges, as with trtexec:

- the batch: ``min_batch``/``opt_batch``/``max_batch`` size every input's dynamic first dim;
- a named dimension: ``dims={"sequence": (1, 128, 512)}`` sizes every dynamic dim the ONNX
  graph calls ``sequence`` (its ``dim_param``), the first dim included;
- a whole input: ``shapes={"input_ids": ((1, 1), (8, 128), (64, 512))}`` (trtexec's
  ``--minShapes/--optShapes/--maxShapes input_ids:1x1``) wins over both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from workbench.config.tensorrt_io import ProfileRange, Shape, format_shape

#: an ONNX dimension: a fixed size, or the symbolic name of a dynamic one ("" if unnamed)
Dim = int | str
Triple = tuple[int, int, int]


class PlanBuildError(Exception):
    """A plan cannot be built; ``exit_code`` 2 for a mistake in the request, 1 otherwise."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def usage_error(message: str) -> PlanBuildError:
    return PlanBuildError(message, exit_code=2)


@dataclass(frozen=True, slots=True)
class OnnxInput:
    """One graph input (initializers excluded): name and dims (int or symbolic name)."""

    name: str
    dims: tuple[Dim, ...]


def read_onnx_inputs(path: Path) -> list[OnnxInput]:
    """The ONNX model's real inputs, without loading external weight files.

    Raises:
        PlanBuildError: the file is missing or not an ONNX model (exit code 2).
    """
    import onnx
    import onnx.parser
    from google.protobuf import json_format, message, text_format

    if not Path(path).is_file():
        raise usage_error(f"ONNX model '{path}' not found")
    try:
        model = onnx.load(str(path), load_external_data=False)
    # what onnx.load raises for a file it cannot read (its reader goes by the file's extension)
    except (OSError, message.DecodeError, json_format.ParseError, text_format.ParseError,
            onnx.parser.ParseError) as exc:
        raise usage_error(f"'{path}' is not an ONNX model: {type(exc).__name__}: {exc}") from None
    weights = {init.name for init in model.graph.initializer}
    inputs = []
    for value in model.graph.input:
        if value.name in weights:
            continue
        dims: list[Dim] = []
        for dim in value.type.tensor_type.shape.dim:
            dims.append(int(dim.dim_value) if dim.HasField("dim_value") else str(dim.dim_param))
        inputs.append(OnnxInput(value.name, tuple(dims)))
    return inputs


def parse_shapes(items: Sequence[str], flag: str) -> dict[str, Shape]:
    """trtexec's shape lists: ``["input_ids:1x128,mask:1x128", "x:4"]`` -> ``{name: shape}``
    (the name is everything before the last ``:``, so names may hold colons).

    Raises:
        PlanBuildError: a malformed item (exit code 2).
    """
    shapes: dict[str, Shape] = {}
    for item in (part.strip() for text in items for part in text.split(",")):
        if not item:
            continue
        name, sep, spec = item.rpartition(":")
        try:
            shape = tuple(int(d) for d in spec.split("x"))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(d < 0 for d in shape):
            raise usage_error(f"{flag}: expected NAME:DxDxD (e.g. input_ids:1x128), got '{item}'")
        shapes[name] = shape
    return shapes


def parse_dims(items: Sequence[str]) -> dict[str, Triple]:
    """``["sequence=1,128,512"]`` -> ``{"sequence": (1, 128, 512)}``.

    Raises:
        PlanBuildError: a malformed item or min <= opt <= max broken (exit code 2).
    """
    dims: dict[str, Triple] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        try:
            values = tuple(int(v) for v in spec.split(","))
        except ValueError:
            values = ()
        if not sep or not name.strip() or len(values) != 3:
            raise usage_error(f"--dim: expected NAME=MIN,OPT,MAX (e.g. sequence=1,128,512), got '{item}'")
        low, opt, high = values
        if not 0 <= low <= opt <= high:
            raise usage_error(f"--dim {item}: need 0 <= MIN <= OPT <= MAX")
        dims[name.strip()] = (low, opt, high)
    return dims


def plan_profile(
    inputs: Sequence[OnnxInput],
    *,
    min_batch: int = 1,
    opt_batch: int | None = None,
    max_batch: int = 8,
    dims: Mapping[str, Triple] | None = None,
    shapes: Mapping[str, tuple[Shape, Shape, Shape]] | None = None,
) -> dict[str, ProfileRange]:
    """Every input's range in the plan's one optimization profile.

    Args:
        inputs: from :func:`read_onnx_inputs`.
        min_batch / opt_batch / max_batch: the dynamic first dimension (opt defaults to max).
        dims: ranges of named dynamic dimensions (see the module docstring).
        shapes: whole-input ranges (min, opt, max), overriding the rest for that input.

    Raises:
        PlanBuildError: (exit code 2) a dynamic dim nothing sizes, an unknown input in
            ``shapes``, a shape of the wrong rank or contradicting a fixed dim, or ranges
            that break min <= opt <= max.
    """
    opt_batch = max_batch if opt_batch is None else opt_batch
    if not 1 <= min_batch <= opt_batch <= max_batch:
        raise usage_error(f"batch sizes need 1 <= min ({min_batch}) <= opt ({opt_batch}) <= max "
                          f"({max_batch})")
    dims, shapes = dict(dims or {}), dict(shapes or {})
    unknown = sorted(set(shapes) - {i.name for i in inputs})
    if unknown:
        raise usage_error(f"shapes given for {', '.join(repr(n) for n in unknown)}, which the ONNX "
                          f"model does not take; its inputs are {', '.join(i.name for i in inputs)}")
    batch = (min_batch, opt_batch, max_batch)
    profile = {}
    for item in inputs:
        if item.name in shapes:
            profile[item.name] = _given(item, *shapes[item.name])
        else:
            triples = [_dim_range(item, i, dim, batch, dims) for i, dim in enumerate(item.dims)]
            profile[item.name] = ProfileRange(*(tuple(t[k] for t in triples) for k in range(3)))
    return profile


def _dim_range(item: OnnxInput, index: int, dim: Dim, batch: Triple,
               dims: Mapping[str, Triple]) -> Triple:
    if isinstance(dim, int) and dim > 0:
        return (dim, dim, dim)
    if dim in dims:
        return dims[str(dim)]
    if index == 0:
        return batch
    named = f" ('{dim}')" if dim else ""
    hint = f"--dim {dim}=MIN,OPT,MAX or " if dim else ""
    raise usage_error(
        f"input '{item.name}' has dynamic dimension {index}{named} (shape "
        f"{_onnx_shape(item.dims)}); give its range with {hint}--min-shapes/--opt-shapes/"
        f"--max-shapes {item.name}:..."
    )


def _given(item: OnnxInput, low: Shape, opt: Shape, high: Shape) -> ProfileRange:
    for shape in (low, opt, high):
        if len(shape) != len(item.dims):
            raise usage_error(f"input '{item.name}' has {len(item.dims)} dimensions (shape "
                              f"{_onnx_shape(item.dims)}), but a shape of {len(shape)} was given: "
                              f"{format_shape(shape)}")
    for i, dim in enumerate(item.dims):
        if isinstance(dim, int) and dim > 0 and not low[i] == opt[i] == high[i] == dim:
            raise usage_error(f"input '{item.name}': dimension {i} is fixed at {dim} in the ONNX "
                              f"model; the given shapes say {low[i]}, {opt[i]}, {high[i]}")
        if not low[i] <= opt[i] <= high[i]:
            raise usage_error(f"input '{item.name}': dimension {i} needs min <= opt <= max, got "
                              f"{low[i]}, {opt[i]}, {high[i]}")
    return ProfileRange(tuple(low), tuple(opt), tuple(high))


def _onnx_shape(dims: Sequence[Dim]) -> str:
    return "[" + ",".join(str(d) if isinstance(d, int) and d > 0 else (str(d) or "?")
                          for d in dims) + "]"


def split_shapes(
    minimum: Mapping[str, Shape], optimum: Mapping[str, Shape], maximum: Mapping[str, Shape]
) -> dict[str, tuple[Shape, Shape, Shape]]:
    """Join trtexec's three shape lists per input; opt defaults to max, as in trtexec.

    Raises:
        PlanBuildError: an input named in --min-shapes but not --max-shapes (or the reverse).
    """
    joined = {}
    for name in sorted(set(minimum) | set(optimum) | set(maximum)):
        if name not in minimum or name not in maximum:
            raise usage_error(f"input '{name}': give its shape in both --min-shapes and "
                              "--max-shapes (and optionally --opt-shapes)")
        joined[name] = (minimum[name], optimum.get(name, maximum[name]), maximum[name])
    return joined


__all__ = [
    "OnnxInput",
    "PlanBuildError",
    "parse_dims",
    "parse_shapes",
    "plan_profile",
    "read_onnx_inputs",
    "split_shapes",
]
