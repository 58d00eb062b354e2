"""Paths that a model config names relative to a folder of the model (a warmup sample's
``input_data_file`` inside ``warmup/``, ``default_model_filename`` inside a version folder):
they must stay inside that folder whatever the config says, since a config may come from a
client (Triton's load API takes one) and the server would otherwise read any file it can."""

from __future__ import annotations


def stays_inside(name: str) -> bool:
    """Whether ``name`` is a relative path that cannot leave the folder it is joined to:
    not empty, not absolute, no NUL, and no ``.``, ``..`` or empty part (``/`` and ``\\``
    both separate parts). Subfolders (``sub/net.onnx``) are fine. Purely textual: a symlink
    the repository itself holds is the repository owner's choice and is followed."""
    parts = name.replace("\\", "/").split("/")
    return bool(name) and "\0" not in name and not name.startswith("/") and not any(
        part in ("", ".", "..") for part in parts)


__all__ = ["stays_inside"]
