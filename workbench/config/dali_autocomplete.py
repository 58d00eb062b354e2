"""Auto-complete from a serialized DALI pipeline, as Triton's dali_backend does.

Follows dali_backend ``AutofillConfig`` (src/config_tools/config_tools.cc), from what the
pipeline declares (:mod:`.dali_pipeline`; DALI is not imported):

- inputs: one per external source, by name; a config input that is no external source is an
  error. Missing ``data_type`` / ``dims`` come from the source's ``dtype`` / ``ndim`` (dims
  ``[-1] * ndim``); given ones must agree with them. ``allow_ragged_batch: true`` is set (Triton
  sets it where the config does not say; a protobuf config cannot tell an explicit ``false``
  from none, so it is set on every input);
- dims of an unbatched model (``max_batch_size: 0``) get the samples' dimension first;
- outputs: by position; more config outputs than pipeline outputs is an error; missing fields
  of the first ones and the pipeline's further outputs (named as DALI names them) come from
  ``pipeline_def(output_dtype=..., output_ndim=...)``;
- ``max_batch_size``: the pipeline's batch size, unless the config text sets it (Triton reads
  ``max_batch_size`` from config.pbtxt's text: an explicit 0 makes the model unbatched);
- ``dynamic_batching { }`` for a batched model without a scheduler.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from workbench.common.errors import InvalidModelConfig
from workbench.config.dali_pipeline import PipelineIO, read_pipeline_def
from workbench.files.model_files import read_model_bytes

logger = logging.getLogger("workbench.config.autocomplete")

#: ``max_batch_size: <int>`` outside a comment (Triton's ``ReadMBSFromPBtxt`` reads the text)
_MAX_BATCH_SIZE = re.compile(r"^[^#\n]*?\bmax_batch_size\s*:\s*(-?\d+)", re.MULTILINE)


def explicit_max_batch_size(config_text: str | None) -> int | None:
    """The ``max_batch_size`` config.pbtxt's text sets, or None when it sets none."""
    found = _MAX_BATCH_SIZE.search(config_text or "")
    return int(found.group(1)) if found else None


def autocomplete_from_dali(config: mc.ModelConfig, model_file: Path, config_text: str | None) -> None:
    """Complete ``config`` (mutated) from the pipeline in ``model_file``.

    Args:
        config: the config so far (backend fields filled).
        model_file: the serialized pipeline (``model.dali``).
        config_text: config.pbtxt's text (None without one), for the explicit max_batch_size.

    A file that is not a serialized pipeline (a Python pipeline to autoserialize, say) is left
    to the backend's load, with a warning: pipelines defined in Python are not auto-completed
    here (Triton's backend completes from the autoserialized pipeline).

    Raises:
        InvalidModelConfig: the config contradicts the pipeline (an input the pipeline lacks,
            more outputs, another data type or rank); Triton's texts.
    """
    try:
        pipeline = read_pipeline_def(read_model_bytes(model_file))
    except (OSError, ValueError) as exc:  # the backend's load says why (or autoserializes)
        logger.warning("skipping model configuration auto-complete for '%s': '%s' is not a "
                       "serialized DALI pipeline (%s)", config.name, model_file.name, exc)
        return
    explicit = explicit_max_batch_size(config_text)
    batched = explicit != 0
    names = set(pipeline.input_names)
    for entry in config.input:
        if entry.name not in names:
            raise InvalidModelConfig(
                f"autofill failed for model '{config.name}': Configuration file contains config "
                f"for {entry.name} but such input is not present in the pipeline.")
    by_name = {entry.name: entry for entry in config.input}
    for source in pipeline.inputs:
        entry = by_name.get(source.name) or config.input.add(name=source.name)
        _fill(config.name, entry, source, batched)
        entry.allow_ragged_batch = True
    if len(config.output) > len(pipeline.outputs):
        raise InvalidModelConfig(
            f"autofill failed for model '{config.name}': The number of outputs specified in the "
            f"DALI pipeline and the configuration file do not match. Model config outputs: "
            f"{len(config.output)}, Pipeline outputs: {len(pipeline.outputs)}")
    for index, output in enumerate(pipeline.outputs):
        entry = config.output[index] if index < len(config.output) else config.output.add()
        if not entry.name:
            entry.name = output.name
        _fill(config.name, entry, output, batched)
    if batched and config.max_batch_size <= 0:
        config.max_batch_size = max(pipeline.batch_size, 0)
    if batched and config.max_batch_size > 0 and config.WhichOneof("scheduling_choice") is None:
        config.dynamic_batching.SetInParent()


def _fill(model: str, entry: mc.ModelInput | mc.ModelOutput, io: PipelineIO, batched: bool) -> None:
    """Fill ``entry``'s missing data_type / dims from ``io``, or check the given ones. An
    unbatched model's dims hold the samples' dimension first (Triton's ``add_batch_dim``).

    Raises:
        InvalidModelConfig: no data type on either side, or another data type or rank than
            the pipeline declares.
    """
    if io.data_type is None and entry.data_type == mc.TYPE_INVALID:
        raise InvalidModelConfig(
            f'autofill failed for model \'{model}\': Missing data_type config for "{entry.name}" '
            "(the pipeline declares none: give it in the config, or dtype= to the external source "
            "/ output_dtype= to pipeline_def)")
    if io.data_type is not None:
        if entry.data_type == mc.TYPE_INVALID:
            entry.data_type = io.data_type
        elif entry.data_type != io.data_type:
            raise InvalidModelConfig(
                f"autofill failed for model '{model}': Mismatch of data_type config for "
                f'"{entry.name}". Data type defined in config: {mc.DataType.Name(entry.data_type)}, '
                f"data type defined in pipeline: {mc.DataType.Name(io.data_type)}")
    dims = io.dims
    if dims is None:
        return
    if not batched:
        dims = [-1, *dims]
    given = list(entry.dims)
    if not given:
        entry.dims.extend(dims)
    elif len(given) != len(dims):
        raise InvalidModelConfig(
            f"autofill failed for model '{model}': Mismatch in number of dimensions for "
            f'"{entry.name}": dims defined in config: {given}, dims defined in pipeline: {dims}')


__all__ = ["autocomplete_from_dali", "explicit_max_batch_size"]
