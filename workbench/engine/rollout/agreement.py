"""How far a candidate version's outputs agree with the primary's, per output, for the
mirror of a rollout (:mod:`workbench.engine.rollout.mirror`; a product extension).

One metric per output, picked from the primary's tensor (:func:`metric_for`):

- ``argmax``: a float output whose last dimension is > 1 and < :data:`EMBEDDING_DIM`
  (class scores, logits): the share of rows whose argmax over the last dimension is the same;
- ``cosine``: a float output whose last dimension is >= :data:`EMBEDDING_DIM` (embeddings):
  the share of rows with cosine similarity >= :data:`COSINE_AGREE`; the mean cosine is
  reported too;
- ``exact``: anything else (integers, strings, booleans, a float with last dimension 1): the
  share of rows exactly equal.

For every float output the maximum absolute difference is also reported. Rows are the
first dimension of a tensor of rank >= 2, else the whole tensor is one row. Outputs whose
shapes or datatypes differ between the versions count as disagreeing rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.messages.types import Tensor

#: a float output with at least this many values in its last dimension is an embedding
EMBEDDING_DIM = 64
#: cosine similarity at or above which two embedding rows agree
COSINE_AGREE = 0.99


def metric_for(tensor: Tensor) -> str:
    """``argmax``, ``cosine`` or ``exact`` for an output like ``tensor`` (module docstring)."""
    data = tensor.data
    if data.dtype.kind != "f" or data.ndim == 0:
        return "exact"
    last = data.shape[-1]
    if last <= 1:
        return "exact"
    return "cosine" if last >= EMBEDDING_DIM else "argmax"


@dataclass
class OutputAgreement:
    """The running agreement of one output: rows compared, rows agreeing, the cosine sum
    (``cosine`` outputs) and the largest absolute difference seen (float outputs)."""

    metric: str
    rows: int = 0
    agreed: int = 0
    cosine_sum: float = 0.0
    max_abs_diff: float = 0.0

    def add(self, primary: np.ndarray, candidate: np.ndarray) -> None:
        """Compare one response's tensors (same name) and add them to the counts."""
        rows = primary.shape[0] if primary.ndim >= 2 else 1
        self.rows += rows
        if primary.shape != candidate.shape or primary.dtype.kind != candidate.dtype.kind:
            return
        if primary.size == 0:
            self.agreed += rows
            return
        if primary.dtype.kind == "f":
            largest = float(np.abs(primary - candidate).max())
            if largest > self.max_abs_diff or largest != largest:  # NaN: shown as it is
                self.max_abs_diff = largest
        if self.metric == "argmax":
            same = primary.argmax(axis=-1) == candidate.argmax(axis=-1)
        elif self.metric == "cosine":
            a, b = primary.astype(np.float64), candidate.astype(np.float64)
            norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
            safe = np.where(norms > 0, norms, 1.0)
            cosine = np.where(norms > 0, np.sum(a * b, axis=-1) / safe, 1.0).reshape(rows, -1)
            self.cosine_sum += float(np.sum(cosine.mean(axis=1)))
            same = cosine >= COSINE_AGREE
        else:
            same = primary == candidate
        if same.size == rows:  # one value per row (the common case): no reshape
            self.agreed += int(np.count_nonzero(same))
        else:
            self.agreed += int(np.count_nonzero(np.reshape(same, (rows, -1)).all(axis=1)))

    def report(self) -> dict[str, object]:
        """``{"metric", "rows", "agreement" (0..1, None before any row), "cosine_mean"
        (cosine only), "max_abs_diff" (float outputs)}``."""
        out: dict[str, object] = {"metric": self.metric, "rows": self.rows,
                                  "agreement": self.agreed / self.rows if self.rows else None}
        if self.metric == "cosine":
            out["cosine_mean"] = self.cosine_sum / self.rows if self.rows else None
        out["max_abs_diff"] = self.max_abs_diff
        return out


__all__ = ["COSINE_AGREE", "EMBEDDING_DIM", "OutputAgreement", "metric_for"]
