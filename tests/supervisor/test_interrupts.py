"""Signals held back while the supervisor does what must not be cut in half."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tfdist.supervisor import interrupts


@pytest.fixture
def installed():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    interrupts.install()
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    interrupts._STATE.update(depth=0, pending=False, stopping=False)  # nothing carried into the next test


def test_signal_outside_a_held_section_interrupts_at_once(installed):
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0)  # the handler runs before the next bytecode


def test_signal_inside_is_raised_when_the_section_ends(installed):
    steps = []
    with pytest.raises(KeyboardInterrupt), interrupts.held():
        os.kill(os.getpid(), signal.SIGHUP)
        steps.append("after the signal")
        with interrupts.held():  # nested: only the outermost section raises
            os.kill(os.getpid(), signal.SIGINT)
        steps.append("after the inner section")
    assert steps == ["after the signal", "after the inner section"]
    with interrupts.held():  # nothing left pending
        pass


def test_signal_in_the_final_section_is_dropped(installed):
    with interrupts.held(then_raise=False):
        os.kill(os.getpid(), signal.SIGTERM)
        done = True
    assert done
    with interrupts.held():
        pass


def test_a_repeated_sigterm_while_stopping_is_ignored_but_a_second_ctrl_c_is_not(installed):
    """Two `tfdist stop` at once: the second SIGTERM must not cut the first stop's grace."""
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0)
    # stopping now (the supervisor's graceful stop runs): more SIGTERM / SIGHUP change nothing
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGHUP)
    time.sleep(0)
    with interrupts.held():  # nor are they raised later
        os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):  # an impatient second Ctrl-C still is
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0)
