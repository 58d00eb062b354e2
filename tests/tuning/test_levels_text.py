"""A load level that is not a number is said in words (it was Python's "could not convert
string to float"), in the Tuning tab's form and ``workbench tune --levels`` alike."""

from __future__ import annotations

import pytest

from workbench.tuning.space import levels_from_text


@pytest.mark.parametrize("text", ["1, two", "x:16", "1:y"])
def test_a_level_that_is_not_a_number_is_said_in_words(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a number \(levels: 1,2,8 or start:end"):
        levels_from_text("concurrency", text)
