"""tfdist.runtime.sync.config: update modes resolved against the job (no TensorFlow)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfdist.runtime.sync import config as sync


def cfg(mode: str, n: int = 4, **kw) -> sync.UpdateConfig:
    return sync.resolve({"mode": mode, **kw}, n)


def test_import_does_not_import_tensorflow():
    code = "import sys, tfdist.runtime.sync.config; print('tensorflow' in sys.modules)"
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


def test_only_stale_mode_accepts_old_parameters():
    assert cfg("backup", max_staleness=5).staleness == 0
    assert cfg("stale", max_staleness=2).staleness == 2


def test_from_env_reads_tfdist_options():
    env = {"TFDIST_OPTIONS": '{"update": {"mode": "backup", "replicas_to_aggregate": 2}}'}
    c = sync.from_env(3, env)
    assert (c.mode, c.replicas_to_aggregate, c.tokens) == ("backup", 2, 3)
    assert sync.from_env(3, {}).mode == "async"


def test_resolve_accepts_update_spec():
    from tfdist.jobspec.model import UpdateSpec

    c = sync.resolve(UpdateSpec(mode="stale", max_staleness=4), 2)
    assert (c.mode, c.staleness, c.replicas_to_aggregate) == ("stale", 4, 1)


def test_an_update_mode_that_model_fit_would_ignore_is_named():
    assert sync.ignored_update_warning({}, "model.fit") is None
    assert sync.ignored_update_warning({"update": {"mode": "async"}}, "model.fit") is None
    warning = sync.ignored_update_warning({"update": {"mode": "backup"}}, "runtime.Loop")
    assert warning is not None and "'backup'" in warning and "runtime.Loop" in warning
    assert "tfdist.runtime.sync.keras.fit" in warning
