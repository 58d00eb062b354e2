"""Which served models the ``/v1`` routes can use, and how, read from the model's config.

* An **embedding model** (``POST /v1/embeddings``): not decoupled, exactly one BYTES
  (``TYPE_STRING``) input whose dims are ``[1]`` (or ``[-1]``), and one floating-point output
  (FP16 / FP32 / FP64 / BF16) of one vector per text (a fixed last dim, any other dims 1:
  ``[384]``, ``[1, 384]``): the embedding. With several such
  outputs, or to name it, the model-config parameter ``openai_embedding_output`` names it. An
  ensemble qualifies by its own inputs and outputs (the sample ``text_embedder``).
* A **text-generation model** (``POST /v1/completions``, ``/v1/chat/completions``): decoupled,
  one BYTES input (the prompt; or the one named by the parameter ``openai_prompt_input``) and
  one BYTES output (the text; or ``openai_text_output``). Each response's text is a piece of
  the completion (the sample ``token_streamer``).

Triton's OpenAI frontend instead requires a vLLM or TensorRT-LLM model (its backend's inputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench import Server, WorkbenchError, model_config_to_json
from workbench.frontends.openai.errors import OpenAIError, unknown_model

#: floating-point config types an embedding output may have
FLOAT_TYPES = {"TYPE_FP16": "FP16", "TYPE_FP32": "FP32", "TYPE_FP64": "FP64", "TYPE_BF16": "BF16"}


@dataclass(frozen=True)
class EmbeddingModel:
    """How to ask ``name`` for embeddings: ``text_input`` (BYTES), ``output`` (its fixed last
    dim ``size``), ``max_batch_size`` (0: one text per request)."""

    name: str
    text_input: str
    output: str
    size: int
    max_batch_size: int


@dataclass(frozen=True)
class TextModel:
    """How to ask the decoupled ``name`` for a completion: the prompt goes to
    ``prompt_input`` (BYTES), each response's ``text_output`` (BYTES) is a piece of the text;
    ``batched``: the model has a batch dimension (``max_batch_size`` > 0)."""

    name: str
    prompt_input: str
    text_output: str
    batched: bool


async def model_config(server: Server, name: str) -> dict[str, Any]:
    """The served (READY) model's config as JSON.

    Raises:
        OpenAIError: 400 "Unknown model: <name>" when no version of it is ready.
    """
    try:
        if not await server.model_ready(name):
            raise unknown_model(name)
        return model_config_to_json(await server.model_config(name))
    except WorkbenchError:
        raise unknown_model(name) from None


def _parameter(config: dict[str, Any], key: str) -> str | None:
    value = config.get("parameters", {}).get(key)
    return value.get("string_value") if isinstance(value, dict) else None


def _bytes_tensors(tensors: list[dict[str, Any]]) -> list[str]:
    return [t["name"] for t in tensors if t.get("data_type") == "TYPE_STRING"]


def _decoupled(config: dict[str, Any]) -> bool:
    return bool(config.get("model_transaction_policy", {}).get("decoupled", False))


def _one_vector(dims: list[Any]) -> bool:
    """Dims of one vector per text: a fixed last dim, every other dim 1 (``[384]``, ``[1, 384]``)."""
    sizes = [int(d) for d in dims]
    return bool(sizes) and sizes[-1] > 0 and all(d == 1 for d in sizes[:-1])


def embedding_model(name: str, config: dict[str, Any]) -> EmbeddingModel:
    """``name``'s embedding recipe (the module docstring).

    Raises:
        OpenAIError: 400 "Model '<name>' is not an embedding model: <why>".
    """
    def refuse(why: str) -> OpenAIError:
        return OpenAIError(f"Model '{name}' is not an embedding model: {why}", param="model")

    if _decoupled(config):
        raise refuse("it is decoupled")
    inputs = config.get("input", [])
    texts = _bytes_tensors(inputs)
    if len(inputs) != 1 or len(texts) != 1:
        raise refuse("it must have exactly one input, of type BYTES (TYPE_STRING)")
    dims = [int(d) for d in inputs[0].get("dims", [])]
    if dims not in ([1], [-1]):
        raise refuse(f"its BYTES input must have dims [1], not {dims}")
    wanted = _parameter(config, "openai_embedding_output")
    outputs = [o for o in config.get("output", []) if o.get("data_type") in FLOAT_TYPES
               and _one_vector(o.get("dims", []))]
    if wanted is not None:
        outputs = [o for o in outputs if o["name"] == wanted]
        if not outputs:
            raise refuse(f"its parameter openai_embedding_output names '{wanted}', not a "
                         "floating-point output of one vector per text (dims [n] or [1, n])")
    if len(outputs) != 1:
        raise refuse("it must have one floating-point output of one vector per text (dims [n] "
                     "or [1, n]; or name it with the model-config parameter "
                     "openai_embedding_output)")
    output = outputs[0]
    return EmbeddingModel(name, texts[0], output["name"], int(output["dims"][-1]),
                          int(config.get("max_batch_size", 0)))


def text_model(name: str, config: dict[str, Any]) -> TextModel:
    """``name``'s completion recipe (the module docstring).

    Raises:
        OpenAIError: 400 "Model '<name>' is not a text-generation model: <why>".
    """
    def refuse(why: str) -> OpenAIError:
        return OpenAIError(f"Model '{name}' is not a text-generation model: {why}", param="model")

    if not _decoupled(config):
        raise refuse("it is not decoupled (model_transaction_policy { decoupled: true })")
    prompt = _parameter(config, "openai_prompt_input")
    inputs = _bytes_tensors(config.get("input", []))
    if prompt is None and len(inputs) != 1:
        raise refuse("it must have one BYTES input (or name it with the model-config parameter "
                     "openai_prompt_input)")
    text = _parameter(config, "openai_text_output")
    outputs = _bytes_tensors(config.get("output", []))
    if text is None and len(outputs) != 1:
        raise refuse("it must have one BYTES output (or name it with the model-config parameter "
                     "openai_text_output)")
    prompt = prompt if prompt is not None else inputs[0]
    text = text if text is not None else outputs[0]
    if prompt not in inputs or text not in outputs:
        raise refuse(f"'{prompt}' must be a BYTES input and '{text}' a BYTES output")
    return TextModel(name, prompt, text, int(config.get("max_batch_size", 0)) > 0)


__all__ = ["EmbeddingModel", "TextModel", "embedding_model", "model_config", "text_model"]
