"""Classification of a huge output is refused, as Triton's ``classification.cc``: more than
1,000,000 entries per batch item is INVALID_ARG "classification output tensor too large"
(bounds the CPU and memory one request can cost)."""

from __future__ import annotations

import numpy as np
import pytest

from workbench import InvalidArgument
from workbench.engine.inference.classification import MAX_CLASSIFICATION_ELEMENTS, classify


def test_more_than_a_million_entries_per_item_is_refused() -> None:
    assert MAX_CLASSIFICATION_ELEMENTS == 1_000_000
    with pytest.raises(InvalidArgument, match=r"^classification output tensor too large$"):
        classify(np.ones((1, 1_000_001), np.float32), "FP32", 5, batched=True)
    with pytest.raises(InvalidArgument, match="too large"):
        classify(np.ones(1_000_001, np.int8), "INT8", 1, batched=False)


def test_a_million_per_item_is_still_classified() -> None:
    scores = np.zeros((2, 1_000_000), np.float32)  # 2 items of exactly the limit
    scores[1, 7] = 1.0
    result = classify(scores, "FP32", 1, batched=True)
    assert result.tolist() == [[b"0.000000:0"], [b"1.000000:7"]]
