"""Ensemble validation, in Triton's two stages and with Triton's messages.

1. :func:`check_ensemble` (part of :func:`workbench.config.validate.validate_model_config`):
   what one config shows. Follows core ``model_config_utils.cc``
   (``ValidateEnsembleSchedulingConfig``, ``BuildEnsembleGraph``,
   ``ValidateEnsembleSchedulingConfig``'s data-flow walk): platform/scheduling pairing, no
   instance groups, every step names a model and maps inputs and outputs, an ensemble
   tensor is written by one step only, every ensemble input is used, every ensemble output
   is written, no produced tensor is left unused.
2. :func:`check_ensemble_steps`: with the composing models' normalized configs, once those
   models are loaded (the engine calls it at load). Follows core
   ``ensemble_scheduler/ensemble_utils.cc`` (``ValidateEnsembleConfig``,
   ``ValidateTensorMapping``, ``ValidateTensorConsistency``): ``max_batch_size``, step map
   names against the composing model's inputs/outputs, data type and shape agreement of
   every ensemble tensor between the ensemble I/O and the steps.

:func:`circular_dependency` is Triton's ``CircularDependencyCheck`` between ensembles
(``model_repository_manager.cc``); :func:`composing_models` lists an ensemble's models.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NoReturn

from tritonclient.grpc import model_config_pb2 as mc

from workbench.common.errors import InvalidModelConfig

ENSEMBLE_PLATFORM = "ensemble"
WILDCARD_DIM = -1


def composing_models(config: mc.ModelConfig) -> list[str]:
    """The model names an ensemble's steps call, each once, in step order ([] otherwise)."""
    names: list[str] = []
    for step in config.ensemble_scheduling.step:
        if step.model_name and step.model_name not in names:
            names.append(step.model_name)
    return names


# --------------------------------------------------------------------- stage 1: one config
def check_ensemble(config: mc.ModelConfig) -> None:
    """Ensemble platform/scheduling pairing and the step graph of one ensemble.

    Follows Triton's ``ValidateEnsembleSchedulingConfig``; its texts, e.g. "ensemble
    tensor 'T' can appear in an output map only once for ensemble 'm' step 1", "ensemble
    input 'IN' for ensemble m' is not used" (one quote missing, as in Triton's text),
    "output 'OUT' for ensemble 'm' is not written", "ensemble tensor 'T' is unused in
    ensemble 'm'" (a tensor mapped from a step output that no step consumes and that is
    no ensemble output; unmapped step outputs are fine). Beyond Triton: a step writing an
    ensemble input is rejected, and when the steps form a cycle (which Triton reports only
    as "not written" / "unused") the message says so. Composing models' inputs, data
    types and batch sizes are checked by :func:`check_ensemble_steps` once those models
    are known.

    Args:
        config: the model config (any model; non-ensembles pass unless they set
            ``ensemble_scheduling``).

    Raises:
        InvalidModelConfig: with Triton's text for the first rule broken.
    """
    m = config.name
    if not config.HasField("ensemble_scheduling"):
        if config.platform == ENSEMBLE_PLATFORM:
            _fail(f"ensemble scheduling must be set for ensemble {m} whose platform is ensemble")
        return
    if config.platform != ENSEMBLE_PLATFORM:
        _fail(f"ensemble scheduling cannot be set for model '{m}' whose platform is not ensemble")
    if config.instance_group:
        _fail(f"instance group should not be specified for ensemble '{m}'")
    if config.HasField("optimization"):
        _fail(f"optimization should not be specified for ensemble '{m}'")
    if config.model_warmup:
        _fail(f"model_warmup can not be specified for ensemble '{m}'")
    if not config.ensemble_scheduling.step:
        _fail(f"must specify 'step' for ensemble '{m}'")
    tensors = _build_ensemble_graph(config)
    try:
        _check_ensemble_flow(config, tensors)
    except InvalidModelConfig as exc:
        cycle = _step_cycle(config)
        if cycle is None:
            raise
        raise InvalidModelConfig(f"{exc.message}; its steps form a cycle: {cycle}") from None


@dataclass(eq=False)
class _Tensor:
    """A node of the ensemble data-flow graph (one ensemble tensor)."""

    name: str
    is_output: bool = False
    ready: bool = False
    prev: list[_Tensor] = field(default_factory=list)
    next: list[_Tensor] = field(default_factory=list)


def _build_ensemble_graph(config: mc.ModelConfig) -> dict[str, _Tensor]:
    """Link ensemble tensors through the steps (Triton's ``BuildEnsembleGraph``)."""
    m, tensors = config.name, dict[str, _Tensor]()
    inputs = {io.name for io in config.input}
    for index, step in enumerate(config.ensemble_scheduling.step):
        for key in ("model_name", "input_map", "output_map"):
            if not getattr(step, key):
                _fail(f"must specify '{key}' in step {index} of ensemble '{m}'")
        produced = []
        for tensor_name in _sorted_values(step.output_map):
            if tensor_name in inputs:
                _fail(
                    f"in ensemble {m}, ensemble input '{tensor_name}' is written by step "
                    f"{index} (model '{step.model_name}'); an ensemble input cannot be a "
                    "step output"
                )
            node = tensors.setdefault(tensor_name, _Tensor(tensor_name))
            if node.is_output:
                _fail(
                    f"ensemble tensor '{tensor_name}' can appear in an output map only "
                    f"once for ensemble '{m}' step {index}"
                )
            node.is_output = True
            produced.append(node)
        for tensor_name in _sorted_values(step.input_map):
            node = tensors.setdefault(tensor_name, _Tensor(tensor_name))
            for out in produced:
                out.prev.append(node)
                node.next.append(out)
    return tensors


def _check_ensemble_flow(config: mc.ModelConfig, tensors: dict[str, _Tensor]) -> None:
    """Every input used, every output written, no dangling tensor."""
    m, queue = config.name, deque[_Tensor]()
    for io in config.input:
        if io.name not in tensors:
            _fail(f"ensemble input '{io.name}' for ensemble {m}' is not used")  # sic, Triton's
        tensors[io.name].ready = True
        queue.append(tensors[io.name])
    while queue:
        for nxt in queue.popleft().next:
            if not nxt.ready and all(p.ready for p in nxt.prev):
                nxt.ready = True
                queue.append(nxt)
    outputs = set()
    for io in config.output:
        node = tensors.get(io.name)
        if node is None:
            _fail(f"ensemble output '{io.name}' for ensemble {m}' is not used")  # sic, Triton's
        if not node.ready:
            _fail(_not_written_message(node, m))
        outputs.add(io.name)
    for name, node in tensors.items():
        if name not in outputs and (not node.ready or not node.next):
            _fail(f"ensemble tensor '{name}' is unused in ensemble '{m}'")


def _not_written_message(node: _Tensor, m: str) -> str:
    """Triton's "output is not written" text, naming the unconnected source tensor."""
    message = f"output '{node.name}' for ensemble '{m}' is not written"
    source, seen, prev = node, set(), node.prev
    while prev:
        candidates = [p for p in prev if not p.ready and p.name not in seen]
        if not candidates:
            break
        source = candidates[0]
        seen.add(source.name)
        prev = source.prev
    if source is not node:
        message += f": at least one of its depending tensors, '{source.name}', is not connected"
    return message


def _step_cycle(config: mc.ModelConfig) -> str | None:
    """``"step 0 'a' -> step 1 'b' -> step 0 'a'"`` when steps feed each other in a
    cycle (step i -> step j: j consumes a tensor i produces), else None."""
    steps = list(config.ensemble_scheduling.step)
    producer = {t: i for i, s in enumerate(steps) for t in s.output_map.values()}
    edges = [
        sorted({producer[t] for t in s.input_map.values() if t in producer}) for s in steps
    ]
    # edges[j] = the steps j consumes from; a cycle there is a cycle of the data flow
    state: dict[int, int] = {}  # 1 = on the DFS path, 2 = done
    path: list[int] = []

    def visit(j: int) -> list[int] | None:
        state[j] = 1
        path.append(j)
        for i in edges[j]:
            if state.get(i) == 1:
                return [*path[path.index(i):], i]
            if i not in state and (found := visit(i)):
                return found
        path.pop()
        state[j] = 2
        return None

    for start in range(len(steps)):
        if start not in state and (cycle := visit(start)):
            flow = list(reversed(cycle))  # producer first
            return " -> ".join(f"step {i} '{steps[i].model_name}'" for i in flow)
    return None


# --------------------------------------------------------------------- stage 2: composing configs
@dataclass(slots=True)
class _Node:
    """What an ensemble tensor is inferred to be, and from which model."""

    model: str
    data_type: int
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]


def _node(model: str, batching: bool, data_type: int, dims: Iterable[int]) -> _Node:
    shape = tuple(int(d) for d in dims)
    return _Node(model, data_type, shape, (WILDCARD_DIM, *shape) if batching else shape)


def check_ensemble_steps(config: mc.ModelConfig, composing: Mapping[str, mc.ModelConfig]) -> bool:
    """Check an ensemble against its composing models' configs (Triton's
    ``ValidateEnsembleConfig``), in Triton's order and with its texts:

    - "ensemble E allows maximum batch size N, but it contains model M which only allows maximum
      batch size to be K" (K = 0, a non-batching model, is allowed);
    - "in ensemble E, ensemble tensor T is mapping to non-existing input I in model M";
    - "in ensemble E, input I in model M is not mapped to any ensemble tensors" (required inputs);
    - "in ensemble E, ensemble tensor T is mapped from non-existing output O in model M";
    - "in ensemble E, ensemble tensor T: inconsistent data type: ..." / "...: inconsistent shape:
      ..." (``-1`` matches any size; shapes also match once a batching model's batch dim counts);
    - "in ensemble E, step of model 'M' receives inputs originated from different decoupled
      models" ('M': the model the step's first output tensor was inferred from, as in Triton).

    Ensemble inputs and outputs take part as tensors "inferred from" the ensemble (their
    ``reshape`` when they have one); unmapped composing-model outputs are fine. Docs:
    docs/ensembles.md.

    Args:
        config: a normalized ensemble config that passed :func:`check_ensemble`.
        composing: the normalized config of every model :func:`composing_models` names.

    Returns:
        Whether the ensemble is decoupled (some decoupled composing model feeds it).

    Raises:
        InvalidModelConfig: the first rule broken.
        KeyError: ``composing`` lacks a composing model (the caller checks presence first)."""
    m = config.name
    batching = config.max_batch_size > 0
    tensors: dict[str, _Node] = {}
    for io in config.input:
        dims = io.reshape.shape if io.HasField("reshape") else io.dims
        tensors.setdefault(io.name, _node(m, batching, io.data_type, dims))
    for io in config.output:
        dims = io.reshape.shape if io.HasField("reshape") else io.dims
        tensors.setdefault(io.name, _node(m, batching, io.data_type, dims))
    for step in config.ensemble_scheduling.step:
        model = composing[step.model_name]
        if model.max_batch_size != 0 and model.max_batch_size < config.max_batch_size:
            _fail(
                f"ensemble {m} allows maximum batch size {config.max_batch_size}, but it "
                f"contains model {step.model_name} which only allows maximum batch size to "
                f"be {model.max_batch_size}"
            )
        _check_mapping(m, step, model, tensors)
    return _decoupled_flow(config, composing, tensors)


def _decoupled_flow(
    config: mc.ModelConfig, composing: Mapping[str, mc.ModelConfig], tensors: dict[str, _Node]
) -> bool:
    """Label every ensemble tensor with the decoupled model its values come from (0: the
    ensemble inputs), walking the data flow from the inputs; a step's inputs, and the
    ensemble's outputs, must share one label (Triton's decoupled walk at the end of
    ``ValidateEnsembleConfig``). True when some tensor has a decoupled label."""
    m = config.name
    sink = "\0sink"  # the ensemble's outputs meet here (Triton's sink node)
    prev: dict[str, list[str]] = {sink: [io.name for io in config.output]}
    nxt: dict[str, list[str]] = {}
    siblings: dict[str, int] = {}  # step output tensor -> its step
    decoupled: dict[str, bool] = {}
    for io in config.output:
        nxt.setdefault(io.name, []).append(sink)
    for index, step in enumerate(config.ensemble_scheduling.step):
        outputs, inputs = _sorted_values(step.output_map), _sorted_values(step.input_map)
        for tensor in outputs:
            siblings[tensor] = index
            decoupled[tensor] = composing[step.model_name].model_transaction_policy.decoupled
            for source in inputs:
                prev.setdefault(tensor, []).append(source)
                nxt.setdefault(source, []).append(tensor)
    label: dict[str, int] = {io.name: 0 for io in config.input}
    step_label: dict[int, int] = {}
    count = 0
    queue = deque(io.name for io in config.input)
    while queue:
        for node in nxt.get(queue.popleft(), []):
            sources = prev.get(node, [])
            if node in label or not all(p in label for p in sources):
                continue
            first = label[sources[0]] if sources else 0
            if any(label[p] != first for p in sources):
                model = tensors[node].model if node in tensors else m
                _fail(
                    f"in ensemble {m}, step of model '{model}' receives inputs originated "
                    "from different decoupled models"
                )
            producer = siblings.get(node)
            if producer is not None and producer in step_label:
                label[node] = step_label[producer]
            else:
                if decoupled.get(node):
                    count += 1
                label[node] = count if decoupled.get(node) else first
                if producer is not None:
                    step_label[producer] = label[node]
            queue.append(node)
    return count != 0


def _check_mapping(
    m: str, step: mc.ModelEnsembling.Step, model: mc.ModelConfig, tensors: dict[str, _Node]
) -> None:
    """One step's maps against its model (Triton's ``ValidateTensorMapping``)."""
    name, batching = step.model_name, model.max_batch_size > 0
    inputs = {io.name for io in model.input}
    for model_input, tensor in sorted(step.input_map.items()):
        if model_input not in inputs:
            _fail(
                f"in ensemble {m}, ensemble tensor {tensor} is mapping to non-existing input "
                f"{model_input} in model {name}"
            )
    for io in model.input:
        tensor = step.input_map.get(io.name)
        if tensor is None:
            if not io.optional:
                _fail(
                    f"in ensemble {m}, input {io.name} in model {name} is not mapped to any "
                    "ensemble tensors"
                )
            continue
        _consistent(m, tensor, tensors, _node(name, batching, io.data_type, io.dims))
    outputs = {io.name: io for io in model.output}
    for model_output, tensor in sorted(step.output_map.items()):
        if model_output not in outputs:
            _fail(
                f"in ensemble {m}, ensemble tensor {tensor} is mapped from non-existing output "
                f"{model_output} in model {name}"
            )
    for model_output, tensor in sorted(step.output_map.items()):
        io = outputs[model_output]
        _consistent(m, tensor, tensors, _node(name, batching, io.data_type, io.dims))


def _consistent(m: str, tensor: str, tensors: dict[str, _Node], node: _Node) -> None:
    """Record ``node`` for ``tensor``, or check it against what was inferred before
    (Triton's ``ValidateTensorConsistency``)."""
    known = tensors.setdefault(tensor, node)
    if known is node:
        return
    prefix = f"in ensemble {m}, ensemble tensor {tensor}: "
    if known.data_type != node.data_type:
        _fail(
            prefix + f"inconsistent data type: {_type_name(known.data_type)} is inferred from "
            f"model {known.model} while {_type_name(node.data_type)} is inferred from model "
            f"{node.model}"
        )
    if not _dims_match(known.dims, node.dims) and not _dims_match(known.full_dims, node.full_dims):
        _fail(
            prefix + f"inconsistent shape: {_dims(known.full_dims)} is inferred from model "
            f"{known.model} while {_dims(node.full_dims)} is inferred from model {node.model}"
        )


def _dims_match(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Triton's ``CompareDimsWithWildcard``: same rank, each pair equal or one is -1."""
    return len(a) == len(b) and all(
        x == y or WILDCARD_DIM in (x, y) for x, y in zip(a, b, strict=True)
    )


def _dims(dims: tuple[int, ...]) -> str:
    """Triton's ``DimsListToString``: ``[-1,16]``."""
    return "[" + ",".join(str(d) for d in dims) + "]"


def _type_name(data_type: int) -> str:
    try:
        return str(mc.DataType.Name(data_type))
    except ValueError:
        return str(data_type)


# --------------------------------------------------------------------- between ensembles
def circular_dependency(name: str, dependencies: Mapping[str, Collection[str]]) -> str | None:
    """Triton's ``CircularDependencyCheck``: the error when ``name`` reaches itself through
    the models its steps call (``dependencies``: model -> the models it calls; non-ensembles
    map to nothing), e.g. "circular dependency between ensembles: a -> ... -> b -> a";
    None when there is no such cycle."""
    seen: set[str] = set()

    def visit(current: str) -> str | None:
        for upstream in dependencies.get(current, ()):
            if upstream == name:
                chain = f"{name} -> ... -> {current} -> {name}"
                return f"circular dependency between ensembles: {chain}"
            if upstream not in seen:
                seen.add(upstream)
                if found := visit(upstream):
                    return found
        return None

    return visit(name)


def _sorted_values(mapping: Mapping[str, str]) -> list[str]:
    """A protobuf map's values in key order (map iteration order is unspecified)."""
    return [mapping[key] for key in sorted(mapping)]


def _fail(message: str) -> NoReturn:
    raise InvalidModelConfig(message)


__all__ = [
    "ENSEMBLE_PLATFORM",
    "check_ensemble",
    "check_ensemble_steps",
    "circular_dependency",
    "composing_models",
]
