"""The sidecar evaluator's stopping rule (pure: no TensorFlow)."""

from __future__ import annotations

import pytest

from tfdist.runtime.evaluator import checkpoint_number, next_action


@pytest.mark.parametrize(
    ("latest", "evaluated", "done", "idle", "timeout", "action"),
    [
        (None, None, False, 0, 60, "wait"),
        ("ckpt-001", None, False, 0, 60, "evaluate"),
        ("ckpt-001", "ckpt-001", False, 5, 60, "wait"),
        # training done but a newer checkpoint appeared: evaluate it first
        ("ckpt-003", "ckpt-002", True, 0, 60, "evaluate"),
        ("ckpt-003", "ckpt-003", True, 0, 60, "finish"),
        (None, None, True, 0, 60, "finish"),  # done without checkpoints: nothing to do
        ("ckpt-001", "ckpt-001", False, 61, 60, "give-up"),  # the chief went away
        ("ckpt-001", "ckpt-001", False, 1e9, None, "wait"),  # no timeout: launcher stops it
    ],
)
def test_next_action(latest, evaluated, done, idle, timeout, action):
    assert next_action(latest, evaluated, done, idle, timeout) == action


def test_checkpoint_number():
    assert checkpoint_number("/x/ckpt-003") == 3
    assert checkpoint_number("/x/ckpt") is None
    assert checkpoint_number(None) is None
