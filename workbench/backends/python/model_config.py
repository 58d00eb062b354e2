"""``pb_utils.ModelConfig``: what ``TritonPythonModel.auto_complete_config`` receives and returns.

Follows Triton's python_backend ``ModelConfig`` helper: the model reads the config with
:meth:`ModelConfig.as_dict` and fills it with the setters. The server then merges back only
``max_batch_size``, ``input``, ``output``, the scheduler choice (``dynamic_batching``) and
``model_transaction_policy`` (``workbench.config.python_autocomplete``).

Runs inside the stub process: standard library only.
"""

from __future__ import annotations

import json

#: the properties Triton's ``add_input`` / ``add_output`` accept, in its message's order
_INPUT_KEYS = ("name", "data_type", "dims", "optional")
_OUTPUT_KEYS = ("name", "data_type", "dims")


class ModelConfig:
    """A model config being auto-completed.

    Args:
        model_config: the config as JSON text (Triton's ``/config`` form) or an already
            decoded dict; ``max_batch_size``, ``input`` and ``output`` are always present.
    """

    def __init__(self, model_config: str | dict) -> None:
        config = json.loads(model_config) if isinstance(model_config, str) else model_config
        config.setdefault("max_batch_size", 0)
        config.setdefault("input", [])
        config.setdefault("output", [])
        self._model_config = config

    def as_dict(self) -> dict:
        """The config as a dict (the object the server reads back)."""
        return self._model_config

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Set ``max_batch_size``.

        Raises:
            ValueError: the config already specifies a larger non-zero value.
        """
        current = int(self._model_config.get("max_batch_size", 0))
        if current > int(max_batch_size):
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._name}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self) -> None:
        """Use the dynamic batcher unless a scheduler is chosen (no-op when it already is).

        Raises:
            ValueError: the config chose ``sequence_batching`` or ``ensemble_scheduling``.
        """
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict) -> None:  # Triton's parameter name
        """Add an input ``{"name", "data_type", "dims"[, "optional"]}``, or complete the
        config's input of that name (its ``data_type``, ``dims`` and ``optional`` are set).

        Raises:
            ValueError: a property other than those four, a missing ``name`` /
                ``data_type`` / ``dims``, or a data type, dims or ``optional`` that
                contradicts the config's input of that name (Triton's texts and order).
        """
        self._add("input", input, _INPUT_KEYS)

    def add_output(self, output: dict) -> None:
        """Add an output ``{"name", "data_type", "dims"}`` (no ``optional``: Triton refuses
        it for outputs), or complete the config's output of that name.

        Raises:
            ValueError: as :meth:`add_input`.
        """
        self._add("output", output, _OUTPUT_KEYS)

    def set_model_transaction_policy(self, transaction_policy_dict: dict) -> None:
        """Set ``model_transaction_policy`` (``{"decoupled": bool}``; ``{}`` only makes sure
        the field exists and keeps the config's value).

        Raises:
            ValueError: an unknown key, or a ``decoupled`` value that contradicts the config.
        """
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    f"model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" not in transaction_policy_dict:
            return
        wanted = transaction_policy_dict["decoupled"]
        if "decoupled" in policy and policy["decoupled"] != wanted:
            raise ValueError(
                f"trying to change decoupled property in auto-complete-config for model "
                f"'{self._name}', which is already set to '{policy['decoupled']}'."
            )
        policy["decoupled"] = wanted

    def _add(self, kind: str, entry: dict, allowed: tuple[str, ...]) -> None:
        """Triton's ``add_input`` / ``add_output``: unknown properties first, then the
        required ones, then the conflicts with the config's entry of that name."""
        name = entry.get("name")
        if any(key not in allowed for key in entry):
            listed = ", ".join(f"'{key}'" for key in allowed[:-1]) + f" and '{allowed[-1]}'"
            raise ValueError(
                f"{kind} '{name}' in auto-complete-config function for model '{self._name}' "
                f"contains property other than {listed}."
            )
        if "name" not in entry:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{self._name}' is missing "
                "'name' property."
            )
        for needed in ("data_type", "dims"):
            if needed not in entry:
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function for model "
                    f"'{self._name}' is missing '{needed}' property."
                )
        for current in self._model_config[kind]:
            if current.get("name") == name:
                self._merge(kind, current, entry)
                return
        self._model_config[kind].append(entry)

    def _merge(self, kind: str, current: dict, entry: dict) -> None:
        name = entry["name"]
        existing_type = current.get("data_type", "TYPE_INVALID")
        if existing_type not in ("", "TYPE_INVALID") and existing_type != entry["data_type"]:
            raise ValueError(
                f"unable to load model '{self._name}', configuration expects datatype "
                f"{existing_type} for {kind} '{name}', model provides {entry['data_type']}"
            )
        existing_dims = current.get("dims") or []
        if existing_dims and list(existing_dims) != list(entry["dims"]):
            raise ValueError(
                f"model '{self._name}', tensor '{name}': the model expects dims "
                f"{list(entry['dims'])} but the model configuration specifies dims "
                f"{list(existing_dims)}"
            )
        if "optional" in current and "optional" in entry and current["optional"] != entry["optional"]:
            raise ValueError(
                f"model '{self._name}', tensor '{name}': the model expects optional "
                f"{entry['optional']} but the model configuration specifies optional "
                f"{current['optional']}"
            )
        current["data_type"] = entry["data_type"]
        current["dims"] = entry["dims"]
        if "optional" in entry:
            current["optional"] = entry["optional"]


__all__ = ["ModelConfig"]
