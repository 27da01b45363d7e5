"""Waiting in a test for something another thread or process does: with a deadline, so that a test whose
condition never comes true fails with a message instead of hanging the suite."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(pred: Callable[[], object], *, timeout: float, what: str, step: float = 0.02) -> object:
    """Poll `pred` every `step` seconds until it returns something true (returned); AssertionError naming
    `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(step)
