"""On/off words, one vocabulary for every place that reads a boolean from text: command-line
flags (``--strict-model-config=false``), model config ``parameters`` (ONNX Runtime's
``enable_mem_arena``, PyTorch's ``INFERENCE_MODE``; Triton's backends accept the same
words), query flags of the Jupyter API (``?unload_dependents=true``) and the Tuning tab's
candidate settings."""

from __future__ import annotations

#: words read as true / false (compared lower-cased, surrounding blanks ignored)
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def parse_switch(text: str) -> bool | None:
    """``True`` or ``False`` for an on/off word (:data:`TRUE_WORDS`, :data:`FALSE_WORDS`,
    any case), ``None`` for any other text (the caller raises its own error)."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    return None


__all__ = ["FALSE_WORDS", "TRUE_WORDS", "parse_switch"]
