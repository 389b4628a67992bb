"""Pure decisions of tfdist.runtime.sync (no TensorFlow)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfdist.runtime import sync


def cfg(mode: str, n: int = 4, **kw) -> sync.UpdateConfig:
    return sync.resolve({"mode": mode, **kw}, n)


def test_import_does_not_import_tensorflow():
    code = "import sys, tfdist.runtime.sync; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("mode", "k"), [("sync", 4), ("backup", 3), ("timeout", 4), ("stale", 1), ("async", 1)]
)
def test_default_replicas_to_aggregate(mode, k):
    assert cfg(mode, timeout_seconds=1.0).replicas_to_aggregate == k


def test_backup_of_one_worker_still_takes_one():
    assert cfg("backup", n=1).replicas_to_aggregate == 1


def test_sync_rejects_k_other_than_n():
    with pytest.raises(ValueError, match="use mode backup"):
        cfg("sync", replicas_to_aggregate=3)


def test_timeout_needs_seconds_and_min_not_above_k():
    with pytest.raises(ValueError, match="timeout_seconds"):
        cfg("timeout")
    with pytest.raises(ValueError, match="min_replicas"):
        cfg("backup", replicas_to_aggregate=2, min_replicas=3)


def test_unknown_mode():
    with pytest.raises(ValueError, match="update mode"):
        sync.UpdateConfig(mode="fast", num_workers=2, replicas_to_aggregate=1)


def test_tokens_k_greater_than_n_schedules_k():
    assert cfg("backup", replicas_to_aggregate=6).tokens == 6
    assert cfg("backup").tokens == 4
    assert cfg("stale").tokens == 4


def test_closures_to_schedule_tops_up_to_tokens():
    c = cfg("sync")
    assert sync.closures_to_schedule(c, 0) == 4
    assert sync.closures_to_schedule(c, 3) == 1
    assert sync.closures_to_schedule(c, 9) == 0
    assert sync.closures_to_schedule(c, -2) == 4  # a re-run closure counted twice


def test_staleness_and_threshold():
    assert cfg("backup", max_staleness=5).staleness == 0  # only stale mode uses it
    stale = cfg("stale", max_staleness=2)
    assert stale.staleness == 2
    assert sync.accumulator_threshold(stale, 10) == 8
    assert sync.accumulator_threshold(stale, 1) == 0
    assert sync.accumulator_threshold(cfg("sync"), 10) == 10


def test_take_now_timeout_mode():
    c = cfg("timeout", timeout_seconds=0.5, min_replicas=2, replicas_to_aggregate=3)
    assert sync.take_now(c, 3, 0.0) == 3  # K arrived: take at once
    assert sync.take_now(c, 4, 0.0) == 4  # more than K: take them all
    assert sync.take_now(c, 2, 0.1) == 0  # before the timeout: wait
    assert sync.take_now(c, 2, 0.6) == 2  # after the timeout, at least min
    assert sync.take_now(c, 1, 0.6) == 0  # after the timeout but under min: wait


def test_take_now_backup_never_times_out():
    c = cfg("backup")
    assert sync.take_now(c, 2, 1e9) == 0
    assert sync.take_now(c, 3, 0.0) == 3


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1000])
def test_decode_count_from_marker_mean(n):
    import numpy as np

    mean = float(np.float32(n) / np.float32(n + 1))  # float32, as the accumulator does
    assert sync.decode_count(mean) == n
    assert sync.rescale(n) * (n / (n + 1)) == pytest.approx(1.0)


def test_decode_count_rejects_nonsense():
    with pytest.raises(ValueError):
        sync.decode_count(1.0)
    with pytest.raises(ValueError):
        sync.rescale(0)


def test_dropped_is_conservation():
    assert sync.dropped(attempted=10, accepted=7, pending=1) == 2
    assert sync.dropped(attempted=5, accepted=5, pending=1) == 0


def test_from_env_reads_tfdist_options():
    env = {"TFDIST_OPTIONS": '{"update": {"mode": "backup", "replicas_to_aggregate": 2}}'}
    c = sync.from_env(3, env)
    assert (c.mode, c.replicas_to_aggregate, c.tokens) == ("backup", 2, 3)
    assert sync.from_env(3, {}).mode == "async"


def test_resolve_accepts_update_spec():
    from tfdist.spec.model import UpdateSpec

    c = sync.resolve(UpdateSpec(mode="stale", max_staleness=4), 2)
    assert (c.mode, c.staleness, c.replicas_to_aggregate) == ("stale", 4, 1)


def test_poll_interval_backs_off_within_bounds():
    assert sync.poll_interval(0.0) == 0.0005
    assert sync.poll_interval(0.1) == 0.005
    assert sync.poll_interval(100.0) == 0.01


def test_an_update_mode_that_model_fit_would_ignore_is_named():
    assert sync.ignored_update_warning({}, "model.fit") is None
    assert sync.ignored_update_warning({"update": {"mode": "async"}}, "model.fit") is None
    warning = sync.ignored_update_warning({"update": {"mode": "backup"}}, "runtime.Loop")
    assert warning is not None and "'backup'" in warning and "runtime.Loop" in warning
    assert "sync.fit" in warning
