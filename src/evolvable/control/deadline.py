"""Run one slow step (an evolver, a gate) in a worker thread that the caller stops waiting for at a deadline.

Python cannot kill a thread, so a step past its deadline is *abandoned*: the caller gets `StepTimedOut`
at once and records it, the step's `cancel` event is set (evolvers and runners that loop may check it
and stop early), and whatever the step returns later is thrown away. Steps only compute: nothing they
return is applied unless the caller receives it in time, so a timed-out decision leaves nothing half-applied.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from evolvable.errors import ControlError

T = TypeVar("T")


class StepTimedOut(ControlError):
    """A step was still running at its deadline; it was abandoned (its result, if any, is discarded)."""


class Step(Generic[T]):
    """`fn` running in a daemon thread (a hung step must never keep the process alive at exit)."""

    def __init__(self, fn: Callable[[], T], name: str, cancel: threading.Event | None = None) -> None:
        self.cancel = cancel or threading.Event()
        self._fn = fn
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)

    def _work(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as err:  # handed to the waiting caller, re-raised there
            self._error = err
        finally:
            self._done.set()

    @property
    def name(self) -> str:
        return self._thread.name

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def result(self, timeout_s: float | None) -> T:
        """The step's value (or its exception) if it ends within `timeout_s`; else `StepTimedOut`,
        with `cancel` set. `None` waits as long as it takes (in the caller's thread, no worker)."""
        if timeout_s is None:
            return self._fn()
        self._thread.start()
        if not self._done.wait(max(0.0, timeout_s)):
            self.cancel.set()
            raise StepTimedOut(f"{self.name} still running after {timeout_s:.1f} s")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set by _work before _done
