"""workbench.messages.types.CancelSignal: a request's cancellation, set once from any thread, running what a backend
registered exactly once (made per request, so it allocates nothing until a backend registers)."""

from __future__ import annotations

import threading

from workbench.messages.types import CancelSignal


def test_callbacks_run_once_on_the_cancelling_call_in_registration_order() -> None:
    signal, ran = CancelSignal(), []
    signal.on_cancel(lambda: ran.append("a"))
    signal.on_cancel(lambda: ran.append("b"))
    assert not signal.cancelled and ran == []
    signal.cancel()
    signal.cancel()  # idempotent
    assert signal.cancelled and ran == ["a", "b"]


def test_a_callback_registered_after_the_cancel_runs_at_once() -> None:
    signal, ran = CancelSignal(), []
    signal.cancel()
    signal.on_cancel(lambda: ran.append("late"))
    assert ran == ["late"]


def test_cancel_without_callbacks_and_signals_independent_of_each_other() -> None:
    first, second, ran = CancelSignal(), CancelSignal(), []
    second.on_cancel(lambda: ran.append("second"))
    first.cancel()
    assert first.cancelled and not second.cancelled and ran == []


def test_a_callback_may_use_another_signal_without_deadlock() -> None:
    # the lock is shared by every signal and never held while callbacks run
    outer, inner, ran = CancelSignal(), CancelSignal(), []
    inner.on_cancel(lambda: ran.append("inner"))
    outer.on_cancel(inner.cancel)
    outer.on_cancel(lambda: inner.on_cancel(lambda: ran.append("after")))
    outer.cancel()
    assert ran == ["inner", "after"]


def test_racing_cancels_and_registrations_run_every_callback_exactly_once() -> None:
    for _ in range(50):
        signal, lock = CancelSignal(), threading.Lock()
        ran: list[tuple[int, int]] = []
        start = threading.Barrier(5)

        def register(i: int, signal: CancelSignal = signal, ran: list = ran, lock: threading.Lock = lock,
                     start: threading.Barrier = start) -> None:
            start.wait()
            for j in range(20):
                def callback(tag: tuple[int, int] = (i, j)) -> None:
                    with lock:
                        ran.append(tag)
                signal.on_cancel(callback)

        def cancel(signal: CancelSignal = signal, start: threading.Barrier = start) -> None:
            start.wait()
            signal.cancel()

        threads = [threading.Thread(target=register, args=(i,)) for i in range(4)]
        threads.append(threading.Thread(target=cancel))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(ran) == [(i, j) for i in range(4) for j in range(20)]
