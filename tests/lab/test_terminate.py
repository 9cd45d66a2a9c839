"""SIGTERM and SIGHUP unwind a lab's runner as Ctrl-C does, so its teardown runs; the handlers
before come back afterwards, and outside the main thread nothing changes."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from quell.lab.process import Terminated, terminate_on_signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_raises_terminated_and_the_old_handler_returns(sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    torn_down = []
    with pytest.raises(Terminated) as info, terminate_on_signals():
        try:
            os.kill(os.getpid(), sig)
        finally:
            torn_down.append(sig)
    assert info.value.code == 128 + sig
    assert isinstance(info.value, SystemExit)
    assert torn_down == [sig]
    assert signal.getsignal(sig) is before


def test_outside_the_main_thread_it_changes_nothing() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def body() -> None:
        with terminate_on_signals():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]
