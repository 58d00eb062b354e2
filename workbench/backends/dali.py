"""DALI backend (``backend: "dali"``): serialized NVIDIA DALI pipelines, on CPU or a GPU.

Follows Triton's dali_backend: ``model.dali`` (``Pipeline.serialize``; or Python to
autoserialize, in Triton's file order, in a child process: :mod:`.dali_autoserialize`).
Inputs are the pipeline's ``fn.external_source(name=...)`` operators by name, outputs match
the config's by position (a mismatch fails the load with Triton's texts). ``max_batch_size >
0``: one pipeline per instance built with that batch size; every row of a request is a
sample, a batch of requests is one pipeline run, each request gets its own samples' outputs
(stacked on the batch dim); variable-length inputs need ``allow_ragged_batch``.
``max_batch_size: 0``: each request alone, its rows the samples, run in chunks of the
serialized batch size. Auto-complete: :mod:`workbench.config.dali_autocomplete`. Parameter
``num_threads``; ``split_along_outer_axis`` is a load error. KIND_CPU runs with
``device_id=None`` (CPU-only DALI), KIND_GPU on the group's GPU.

Beyond Triton: when DALI raises on a batch (a corrupt JPEG) the pipeline is rebuilt and each
request reruns alone, so only the refused requests fail (InvalidArgument, HTTP 400).
``nvidia.dali`` is imported on the first load. Docs: docs/backends.md, the **DALI** item."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from workbench.backends.base import (
    Backend,
    BackendRequest,
    BackendResponse,
    ExecutionTimes,
    InstanceSpec,
    ModelInstance,
)
from workbench.backends.batching import requested_union
from workbench.backends.dali_autoserialize import autoserialize
from workbench.common.datatypes import config_to_wire, numpy_dtype
from workbench.common.errors import (
    InternalError,
    InvalidArgument,
    ModelLoadError,
    WorkbenchError,
    request_prefix,
)
from workbench.common.frameworks import import_framework
from workbench.config.dali_pipeline import PipelineDef, read_pipeline_def
from workbench.files.model_files import read_model_bytes

INSTALL_HINT = ("install it with `pip install 'workbench[dali]'` (the nvidia-dali-cuda120 wheel; "
                "nvidia-dali-cuda130 for CUDA 13)")
#: longest DALI error text passed on to a client (DALI's texts carry the pipeline's traceback)
MAX_ERROR_CHARS = 600


class DaliBackend(Backend):
    """Creates :class:`DaliInstance` objects."""

    framework_modules = ("nvidia.dali",)

    def load_instance(
        self, config: ModelConfig, version_dir: Path, spec: InstanceSpec
    ) -> ModelInstance:
        return DaliInstance(config, version_dir, spec)


class DaliInstance(ModelInstance):
    """One deserialized DALI pipeline (CPU with ``device_id=None``, or the instance's GPU).

    Raises (at construction):
        ModelLoadError: ``nvidia.dali`` not installed, a missing model file, a file that is not
            a serialized DALI pipeline, config inputs/outputs that disagree with the pipeline,
            an unsupported parameter, or a pipeline DALI cannot build on the device.
    """

    def __init__(self, config: ModelConfig, version_dir: Path, spec: InstanceSpec) -> None:
        super().__init__(spec)
        name = self._model_name = config.name
        try:
            Pipeline = import_framework("nvidia.dali.pipeline").Pipeline
        except ImportError:
            raise ModelLoadError(
                f"unable to load model '{name}': the dali backend needs NVIDIA DALI; "
                + INSTALL_HINT
            ) from None
        self._pipeline_class = Pipeline
        params = {k: v.string_value for k, v in config.parameters.items()}
        if params.get("split_along_outer_axis"):
            raise ModelLoadError(
                f"unable to load model '{name}': the dali backend parameter "
                "'split_along_outer_axis' is not supported by this server"
            )
        self._serialized, definition = _load_pipeline(
            name, version_dir, config.default_model_filename or "model.dali")
        _check_io(config, definition)
        self._batched = config.max_batch_size > 0
        self._batch_size = config.max_batch_size if self._batched else max(definition.batch_size, 1)
        try:
            threads = int(params.get("num_threads") or definition.num_threads or 1)
        except ValueError:
            raise ModelLoadError(
                f"unable to load model '{name}': parameter 'num_threads' must be an integer, "
                f"got '{params['num_threads']}'"
            ) from None
        self._threads = max(threads, 1)
        self._device_id = spec.device_id if spec.kind == "KIND_GPU" else None
        self._inputs = [(i.name, numpy_dtype(config_to_wire(i.data_type))) for i in config.input]
        self._outputs = [(o.name, numpy_dtype(config_to_wire(o.data_type)))
                         for o in config.output]
        self._config_types = {o.name: DataType.Name(o.data_type) for o in config.output}
        try:
            self._pipe = self._build()
        except RuntimeError as exc:
            raise ModelLoadError(
                f"unable to load model '{name}': DALI error: {_short(exc)}"
            ) from None

    def _build(self) -> Any:
        """Deserialize and build a fresh pipeline (synchronous: one run per ``feed_input``)."""
        pipe = self._pipeline_class.deserialize(
            serialized_pipeline=self._serialized, batch_size=self._batch_size,
            num_threads=self._threads, device_id=self._device_id,
            exec_async=False, exec_pipelined=False, prefetch_queue_depth=1)
        pipe.build()
        return pipe

    def execute(
        self, requests: Sequence[BackendRequest], times: ExecutionTimes
    ) -> list[BackendResponse]:
        responses: list[BackendResponse | None] = [None] * len(requests)
        samples: list[dict[str, list[np.ndarray]] | None] = []
        for i, request in enumerate(requests):
            try:
                samples.append(self._samples(request))
            except InvalidArgument as exc:
                samples.append(None)
                responses[i] = BackendResponse(error=exc)
        times.mark_input_done()
        ready = [i for i, s in enumerate(samples) if s is not None]
        groups = [ready] if self._batched and ready else [[i] for i in ready]
        for group in groups:
            self._run_group(requests, samples, group, responses)
        times.mark_infer_done()
        return [r if r is not None else BackendResponse(error=InternalError("no response"))
                for r in responses]

    def _run_group(self, requests: Sequence[BackendRequest],
                   samples: list[dict[str, list[np.ndarray]] | None], group: list[int],
                   responses: list[BackendResponse | None]) -> None:
        """Run ``group``'s requests as one pipeline run; when DALI refuses it, rebuild the
        pipeline and run each request alone, so only the refused ones fail."""
        try:
            outputs = self._run([samples[i] for i in group])  # type: ignore[misc]
        except _DaliRunError as exc:
            if len(group) == 1:
                responses[group[0]] = BackendResponse(error=InvalidArgument(
                    request_prefix(requests[group[0]].request_id) + "DALI "
                    f"failed to process the request's data for model '{self._model_name}': {exc}"))
                return
            for i in group:
                self._run_group(requests, samples, [i], responses)
            return
        for i, per_output in zip(group, outputs, strict=True):
            responses[i] = self._response(requests[i], per_output)

    def _samples(self, request: BackendRequest) -> dict[str, list[np.ndarray]]:
        """Input name -> the request's samples (rows of its first dimension).

        Raises:
            InvalidArgument: an input missing (one the config marks optional), or inputs
                holding different numbers of samples, or none.
        """
        out: dict[str, list[np.ndarray]] = {}
        counts = set()
        for name, dtype in self._inputs:
            if name not in request.inputs:  # an input the config marks optional
                raise InvalidArgument(
                    request_prefix(request.request_id) + "DALI model "
                    f"'{self._model_name}' needs input '{name}' in every request (every external "
                    "source is fed each run)")
            array = np.asarray(request.inputs[name])
            if array.dtype != dtype:
                array = array.astype(dtype)
            rows = [np.ascontiguousarray(array)] if array.ndim == 0 else list(array)
            out[name] = [np.ascontiguousarray(r) for r in rows]
            counts.add(len(rows))
        if len(counts) > 1 or 0 in counts:
            raise InvalidArgument(
                request_prefix(request.request_id) + "each input of a request to "
                f"DALI model '{self._model_name}' must hold the same number (>= 1) of samples "
                f"(first dimension), got {sorted(counts)}")
        return out

    def _run(self, groups: list[dict[str, list[np.ndarray]]]) -> list[list[_Samples]]:
        """Run the pipeline over every sample of ``groups`` (in chunks of its batch size).

        Returns, per group, per output, its samples (host copies): one array with the samples
        stacked when the output's samples share a shape, else a list of arrays.

        Raises:
            _DaliRunError: DALI raised (the pipeline is rebuilt before this returns).
        """
        names = [n for n, _ in self._inputs]
        flat = {n: [s for g in groups for s in g[n]] for n in names}
        total = len(flat[names[0]]) if names else 0
        chunks: list[list[_Samples]] = [[] for _ in self._outputs]
        try:
            for start in range(0, total, self._batch_size):
                for n in names:
                    self._pipe.feed_input(n, flat[n][start : start + self._batch_size])
                for k, tensor_list in enumerate(self._pipe.run()):
                    chunks[k].append(_host_samples(tensor_list))
        except (RuntimeError, ValueError, TypeError, IndexError) as exc:
            text = _short(exc)
            try:
                self._pipe = self._build()
            except RuntimeError as rebuild:
                raise InternalError(
                    f"DALI failed to rebuild the pipeline of model '{self._model_name}' after "
                    f"an error ({text}): {_short(rebuild)}") from None
            raise _DaliRunError(text) from None
        produced = [_joined(parts) for parts in chunks]
        result, start = [], 0
        for g in groups:
            size = len(g[names[0]]) if names else 0
            result.append([samples[start : start + size] for samples in produced])
            start += size
        return result

    def _response(self, request: BackendRequest, per_output: list[_Samples]) -> BackendResponse:
        """The request's outputs: its samples stacked on the batch dimension.

        A request whose samples of one output differ in shape cannot be stacked: it fails with
        InvalidArgument (Triton's tensors are rectangular).
        """
        wanted = set(requested_union([request], [n for n, _ in self._outputs]))
        outputs: dict[str, np.ndarray] = {}
        for (name, dtype), samples in zip(self._outputs, per_output, strict=True):
            if name not in wanted:
                continue
            if samples[0].dtype != dtype:
                return BackendResponse(error=InternalError(
                    f"DALI model '{self._model_name}' output '{name}' is "
                    f"{samples[0].dtype}, the model configuration says {self._config_types[name]}"))
            if isinstance(samples, np.ndarray):
                outputs[name] = samples
                continue
            if len({s.shape for s in samples}) > 1:
                return BackendResponse(error=InvalidArgument(
                    request_prefix(request.request_id) + "DALI model "
                    f"'{self._model_name}' output '{name}' has samples of different shapes "
                    f"{sorted({s.shape for s in samples})} in one request; send them in separate "
                    "requests"))
            outputs[name] = np.stack(samples)
        return BackendResponse(outputs)

    def unload(self) -> None:
        self.__dict__.pop("_pipe", None)


class _DaliRunError(WorkbenchError):
    """DALI raised while running a batch (the data of some request, e.g. a corrupt JPEG)."""


#: one output's samples: stacked in one array (all of one shape), or one array each
_Samples = np.ndarray | list[np.ndarray]


def _host_samples(tensor_list: Any) -> _Samples:
    """A DALI TensorList's samples on the host (GPU ones copied): one array ``[n, ...]`` when
    they share a shape (``as_array`` copies out of DALI's buffers, which the next run reuses),
    else a copy of each."""
    if hasattr(tensor_list, "as_cpu"):
        tensor_list = tensor_list.as_cpu()
    if tensor_list.is_dense_tensor():
        return np.asarray(tensor_list.as_array())
    return [np.array(tensor_list[i], copy=True) for i in range(len(tensor_list))]


def _joined(parts: list[_Samples]) -> _Samples:
    """One output's samples of all chunks of a run: one array when every chunk is one array of
    the same sample shape, else a list of the samples."""
    if len(parts) == 1:
        return parts[0]
    arrays = [part for part in parts if isinstance(part, np.ndarray)]
    if len(arrays) == len(parts) and len({a.shape[1:] for a in arrays}) == 1:
        return np.concatenate(arrays)
    return [sample for part in parts for sample in part]


def _load_pipeline(model: str, version_dir: Path, filename: str) -> tuple[bytes, PipelineDef]:
    """The serialized pipeline of a version, in Triton's dali_backend order: the model file
    (``default_model_filename``) as a serialized pipeline; else, when its name ends in ``.py``,
    autoserialized from it; else autoserialized from ``dali.py``.

    Raises:
        ModelLoadError: none of them gives a pipeline (the reason of the first that exists).
    """
    path, fallback = version_dir / filename, version_dir / "dali.py"
    if path.is_file() and path.suffix != ".py":
        data = read_model_bytes(path)
        try:
            return data, read_pipeline_def(data)
        except ValueError as exc:
            if not fallback.is_file():
                raise ModelLoadError(
                    f"unable to load model '{model}': '{path.name}' is not a serialized DALI "
                    f"pipeline ({exc})") from None
    source = path if path.is_file() and path.suffix == ".py" else fallback
    if not source.is_file():
        raise ModelLoadError(
            f"unable to load model '{model}', model file not found: '{path}' (nor a Python "
            f"pipeline to autoserialize, '{fallback.name}')")
    data = autoserialize(model, source)
    try:
        return data, read_pipeline_def(data)
    except ValueError as exc:  # DALI wrote it: not expected
        raise ModelLoadError(
            f"unable to load model '{model}': the autoserialized '{source.name}' is not a "
            f"DALI pipeline ({exc})") from None


def _short(exc: BaseException) -> str:
    """DALI's error text on one line, its pipeline-definition traceback left out."""
    text = str(exc)
    if "encountered:" in text:
        text = text.split("encountered:", 1)[1]
    text = " ".join(text.replace("Current pipeline object is no longer valid.", "").split())
    return text[:MAX_ERROR_CHARS]


def _check_io(config: ModelConfig, definition: PipelineDef) -> None:
    """The config's inputs are the pipeline's external sources (by name, both ways) and it
    has as many outputs as the pipeline (Triton's dali_backend checks and texts).

    Raises:
        ModelLoadError: a config input that is no external source, an external source
            without a config input, another output count, a data type other than the one the
            pipeline declares (external source ``dtype``, ``pipeline_def(output_dtype=...)``),
            or a BYTES input (DALI takes numeric tensors: send encoded images as TYPE_UINT8).
    """
    prefix = f"unable to load model '{config.name}': "
    sources = {source.name: source for source in definition.inputs}
    for entry in config.input:
        if entry.name not in sources:
            raise ModelLoadError(
                prefix + f"Configuration file contains config for {entry.name} but such input "
                f"is not present in the pipeline (its external sources: {definition.input_names})")
        if entry.data_type == DataType.TYPE_STRING:
            raise ModelLoadError(
                prefix + f"input '{entry.name}' is TYPE_STRING; DALI takes numeric tensors "
                "(encoded images as TYPE_UINT8 [ -1 ])")
    names = {entry.name for entry in config.input}
    for source in definition.inputs:
        if source.name not in names:
            raise ModelLoadError(prefix + f'Missing config for "{source.name}" input.')
    if len(config.output) != len(definition.outputs):
        raise ModelLoadError(
            prefix + "The number of outputs specified in the DALI pipeline and the "
            f"configuration file do not match. Model config outputs: {len(config.output)}, "
            f"Pipeline outputs: {len(definition.outputs)}")
    declared = [(e, sources[e.name]) for e in config.input]
    declared += list(zip(config.output, definition.outputs, strict=True))
    for entry, io in declared:
        if io.data_type is not None and io.data_type != entry.data_type:
            raise ModelLoadError(
                prefix + f'Mismatch of data_type config for "{entry.name}". Data type defined in '
                f"config: {DataType.Name(entry.data_type)}, data type defined in pipeline: "
                f"{DataType.Name(io.data_type)}")
