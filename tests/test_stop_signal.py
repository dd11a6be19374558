"""The stop request that SIGINT/SIGTERM set: a waiter wakes at once, and the handler takes
no lock (threading.Event.set in a handler can deadlock against the main thread's wait)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from codity.stop_signal import StopSignal


@pytest.fixture
def usr1() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_signal_wakes_a_long_wait_at_once(usr1: None) -> None:
    stop = StopSignal().install(signal.SIGUSR1)
    threading.Timer(0.2, os.kill, [os.getpid(), signal.SIGUSR1]).start()
    started = time.monotonic()
    assert stop.wait(30) is True
    assert time.monotonic() - started < 5
    assert stop.is_set()


def test_unset_wait_times_out_and_many_signals_during_short_waits_never_hang(usr1: None) -> None:
    stop = StopSignal()
    assert stop.wait(0.01) is False
    stop.install(signal.SIGUSR1)
    hits = 0

    def pester() -> None:
        nonlocal hits
        for _ in range(500):
            os.kill(os.getpid(), signal.SIGUSR1)
            hits += 1

    thread = threading.Thread(target=pester)
    thread.start()
    deadline = time.monotonic() + 20
    while thread.is_alive():
        stop.wait(0.0001)
        assert time.monotonic() < deadline, "the waiter hung"
    thread.join()
    assert hits == 500 and stop.is_set()
