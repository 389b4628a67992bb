"""tfdist.runtime.sync.policy: the decisions the trainer's coordinator loop acts on."""

from __future__ import annotations

from tfdist.runtime.sync import policy
from tfdist.runtime.sync.config import UpdateConfig, resolve


def cfg(mode: str, n: int = 4, **kw) -> UpdateConfig:
    return resolve({"mode": mode, **kw}, n)


def test_closures_to_schedule_tops_up_to_tokens():
    c = cfg("sync")
    assert policy.closures_to_schedule(c, 0) == 4
    assert policy.closures_to_schedule(c, 3) == 1
    assert policy.closures_to_schedule(c, 9) == 0
    assert policy.closures_to_schedule(c, -2) == 4  # a re-run closure counted twice


def test_take_now_timeout_mode():
    c = cfg("timeout", timeout_seconds=0.5, min_replicas=2, replicas_to_aggregate=3)
    assert policy.take_now(c, 3, 0.0) == 3  # K arrived: take at once
    assert policy.take_now(c, 4, 0.0) == 4  # more than K: take them all
    assert policy.take_now(c, 2, 0.1) == 0  # before the timeout: wait
    assert policy.take_now(c, 2, 0.6) == 2  # after the timeout, at least min
    assert policy.take_now(c, 1, 0.6) == 0  # after the timeout but under min: wait


def test_take_now_backup_never_times_out():
    c = cfg("backup")
    assert policy.take_now(c, 2, 1e9) == 0
    assert policy.take_now(c, 3, 0.0) == 3


def test_dropped_is_conservation():
    assert policy.dropped(attempted=10, accepted=7, pending=1) == 2
    assert policy.dropped(attempted=5, accepted=5, pending=1) == 0


def test_poll_interval_backs_off_within_bounds():
    assert policy.poll_interval(0.0) == 0.0005
    assert policy.poll_interval(0.1) == 0.005
    assert policy.poll_interval(100.0) == 0.01
