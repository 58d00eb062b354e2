"""The once-a-second countdown the engine's, HTTP's and gRPC's stops share
(:func:`workbench.serving.countdown.count_down`): when it reports, with which second."""

from __future__ import annotations

from workbench.serving.countdown import count_down


async def test_nothing_pending_reports_nothing() -> None:
    seen: list[tuple[int, int]] = []
    await count_down(5, lambda: 0, lambda left, found: seen.append((left, found)), stop_at_zero=False)
    assert seen == []


async def test_a_bounded_countdown_ends_at_zero_seconds_even_with_work_left() -> None:
    seen: list[tuple[int, int]] = []
    await count_down(0, lambda: 3, lambda left, found: seen.append((left, found)), stop_at_zero=True)
    assert seen == []


async def test_an_unbounded_countdown_reports_at_zero_until_nothing_is_pending() -> None:
    pending = iter([2, 1, 0])
    seen: list[tuple[int, int]] = []
    await count_down(0, lambda: next(pending), lambda left, found: seen.append((left, found)), stop_at_zero=False)
    assert seen == [(0, 2), (0, 1)]  # never below 0; one report a second while work is pending
