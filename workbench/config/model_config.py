"""``config.pbtxt`` and its JSON form <-> ``inference.ModelConfig``.

The one schema is the ``ModelConfig`` message generated from Triton's
``model_config.proto`` that ships in ``tritonclient.grpc.model_config_pb2``.
Text files are read with ``google.protobuf.text_format`` (as Triton's
``ReadTextProto``); the JSON form is what ``GET /v2/models/<m>/config`` returns
and what the load API's ``config`` parameter sends (Triton's
``ModelConfigToJson`` / ``JsonToModelConfig``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.common.errors import InvalidModelConfig
from workbench.files.model_files import MAX_CONFIG_BYTES, read_file

#: file name of a model's configuration inside its directory.
CONFIG_FILENAME = "config.pbtxt"
#: folder holding alternative configurations (``--model-config-name``).
CONFIGS_FOLDER = "configs"

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)
_LOCATION_PREFIX = re.compile(r"^\d+:\d+ : ")


def parse_model_config(text: str, source: str = "<string>") -> ModelConfig:
    """Parse ``config.pbtxt`` text into a fresh ``ModelConfig``.

    Follows Triton's ``ReadTextProto`` (``google.protobuf.text_format``), so any
    file tritonserver reads parses here unchanged.

    Args:
        text: the protobuf text format content.
        source: where the text came from; named in error messages.

    Returns:
        The parsed message, exactly as written (no defaults filled).

    Raises:
        InvalidModelConfig: on a syntax error, unknown field or bad value; the
            message names ``source``, the line and the column, e.g.
            ``failed to parse model config 'm/config.pbtxt' at line 3, column 12: ...``.
    """
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        detail = _LOCATION_PREFIX.sub("", str(exc))
        line, column = exc.GetLine(), exc.GetColumn()
        where = f" at line {line}, column {column}" if line is not None else ""
        raise InvalidModelConfig(
            f"failed to parse model config '{source}'{where}: {detail}"
        ) from None
    return config


def model_config_path(model_dir: Path, config_name: str | None = None) -> Path:
    """Return the config file Triton would read for ``model_dir``.

    ``<model_dir>/configs/<config_name>.pbtxt`` when ``config_name`` is given and
    that file exists (tritonserver ``--model-config-name``), else
    ``<model_dir>/config.pbtxt`` (which may not exist).

    Args:
        model_dir: the model's directory in the repository.
        config_name: the ``--model-config-name`` value, or None.

    Returns:
        The path of the file to read.
    """
    if config_name:
        custom = Path(model_dir) / CONFIGS_FOLDER / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return Path(model_dir) / CONFIG_FILENAME


def read_model_config(model_dir: Path, config_name: str | None = None,
                      max_bytes: int = MAX_CONFIG_BYTES) -> ModelConfig | None:
    """Read and parse a model's configuration file.

    Follows Triton: ``configs/<config_name>.pbtxt`` wins when it exists, else
    ``config.pbtxt``; a missing file is not an error here (auto-complete may
    build the config from the model files). The file is read as the poll's scan reads it
    (:func:`workbench.files.model_files.read_file`: a regular file only, opened non-blocking,
    bounded in time) and refused beyond ``max_bytes`` before it is read (beyond Triton,
    which reads any size: a huge config costs minutes of parsing).

    Args:
        model_dir: the model's directory in the repository.
        config_name: the ``--model-config-name`` value, or None.
        max_bytes: the largest file read (``--model-config-max-size``).

    Returns:
        The parsed config, or None when no config file exists.

    Raises:
        InvalidModelConfig: when the file cannot be read ("failed to read text proto from
            <path>: <why>": a FIFO, too large, no answer in time, not UTF-8) or parsed.
    """
    path = model_config_path(model_dir, config_name)
    try:
        data = read_file(path, max_bytes, "--model-config-max-size")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidModelConfig(f"failed to read text proto from {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidModelConfig(f"failed to read text proto from {path}: {exc}") from None
    return parse_model_config(text, source=str(path))


def model_config_from_json(text: str | dict[str, Any]) -> ModelConfig:
    """Parse the JSON form of a model config (Triton's ``JsonToModelConfig``).

    Accepts what ``/v2/models/<m>/config`` returns and what the load API's
    ``config`` parameter carries: original or camelCase field names, enums by
    name, 64-bit integers as numbers or strings. Unknown fields are errors. A single value
    where the field is repeated (``"instance_group": {"count": 2}``) is a list of that one
    element, as protobuf's C++ JSON reader (Triton's) takes it.

    Args:
        text: a JSON string, or the already-decoded JSON object.

    Returns:
        The parsed message.

    Raises:
        InvalidModelConfig: for invalid or too deeply nested JSON, a non-object, an
            unknown field or a value of the wrong type.
    """
    config = ModelConfig()
    try:
        data = json.loads(text) if isinstance(text, (str, bytes)) else text
        if not isinstance(data, dict):
            raise InvalidModelConfig(
                f"model config JSON must be an object, got {type(data).__name__}"
            )
        json_format.ParseDict(_single_values_listed(data, ModelConfig.DESCRIPTOR), config,
                              ignore_unknown_fields=False)
    except json.JSONDecodeError as exc:
        raise InvalidModelConfig(f"failed to parse model config JSON: {exc}") from None
    except RecursionError:  # a client's deeply nested config (load API) must not crash
        raise InvalidModelConfig("failed to parse model config JSON: nested too deeply") from None
    except json_format.ParseError as exc:
        raise InvalidModelConfig(f"failed to parse model config JSON: {exc}") from None
    return config


def _single_values_listed(data: dict[str, Any], descriptor: Descriptor) -> dict[str, Any]:
    """``data`` (the JSON object of a ``descriptor`` message) with each single value given
    for a repeated field wrapped in a list, in nested messages too (map values included);
    what ``json_format`` then parses or refuses is unchanged otherwise."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        field = descriptor.fields_by_name.get(key) or descriptor.fields_by_camelcase_name.get(key)
        if field is None or value is None:
            out[key] = value
            continue
        message = field.message_type
        if message is not None and message.GetOptions().map_entry:
            entry = message.fields_by_name["value"].message_type
            if entry is not None and isinstance(value, dict):
                value = {k: _single_values_listed(v, entry) if isinstance(v, dict) else v
                         for k, v in value.items()}
        elif field.label == FieldDescriptor.LABEL_REPEATED:
            items = value if isinstance(value, list) else [value]
            value = [_single_values_listed(v, message) if message is not None and isinstance(v, dict) else v
                     for v in items]
        elif message is not None and isinstance(value, dict):
            value = _single_values_listed(value, message)
        out[key] = value
    return out


def model_config_to_json(config: ModelConfig) -> dict[str, Any]:
    """Render a config as Triton's ``/v2/models/<m>/config`` JSON object.

    Follows Triton's ``ModelConfigToJson``: original proto field names, enums as
    names, every scalar/repeated/map field printed even when default, unset
    sub-messages omitted, and 64-bit integers as JSON numbers (protobuf's JSON
    mapping prints them as strings; they are converted back by walking the
    message descriptors). Keys follow the proto's field order.

    Args:
        config: the (normally auto-completed and normalized) config.

    Returns:
        A JSON-serializable dict.
    """
    raw = json_format.MessageToDict(
        config,
        always_print_fields_with_no_presence=True,
        preserving_proto_field_name=True,
    )
    return _fix_message(raw, ModelConfig.DESCRIPTOR)


def model_config_to_text(config: ModelConfig) -> str:
    """Render a config as ``config.pbtxt`` text (``text_format.MessageToString``).

    Args:
        config: the config to write.

    Returns:
        Protobuf text format, UTF-8 kept as is; parses back to an equal message.
    """
    return str(text_format.MessageToString(config, as_utf8=True))


def _fix_message(data: dict[str, Any], descriptor: Descriptor) -> dict[str, Any]:
    """Reorder ``data`` by field number and turn 64-bit integer strings into ints."""
    fixed: dict[str, Any] = {}
    for field in descriptor.fields:
        if field.name in data:
            fixed[field.name] = _fix_field(data[field.name], field)
    return fixed


def _fix_field(value: Any, field: FieldDescriptor) -> Any:
    """Fix one field's JSON value (scalar, list or map) per its descriptor."""
    message_type = field.message_type
    if message_type is not None and message_type.GetOptions().map_entry:
        value_field = message_type.fields_by_name["value"]
        return {key: _fix_single(item, value_field) for key, item in value.items()}
    if field.is_repeated:
        return [_fix_single(item, field) for item in value]
    return _fix_single(value, field)


def _fix_single(value: Any, field: FieldDescriptor) -> Any:
    """Fix one non-repeated value."""
    if field.type in _INT64_TYPES and isinstance(value, str):
        return int(value)
    if field.type == FieldDescriptor.TYPE_MESSAGE and isinstance(value, dict):
        return _fix_message(value, field.message_type)
    return value


__all__ = [
    "CONFIGS_FOLDER",
    "CONFIG_FILENAME",
    "model_config_from_json",
    "model_config_path",
    "model_config_to_json",
    "model_config_to_text",
    "parse_model_config",
    "read_model_config",
]
