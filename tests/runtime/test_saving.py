"""save_model's chief/non-chief paths and the end-of-training marker, with fake models."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tfdist.contract import DONE_MARKER
from tfdist.runtime import keras_callbacks as callbacks
from tfdist.runtime import saving


def fake_strategy(multi_worker: bool, chief: bool):
    extended = SimpleNamespace(_in_multi_worker_mode=lambda: multi_worker, should_checkpoint=chief)
    return SimpleNamespace(extended=extended)


class FakeModel:
    """Records where it was saved and writes a file there, like model.save would."""

    def __init__(self, strategy):
        self.distribute_strategy = strategy
        self.saved_to: list[str] = []

    def save(self, path, **kwargs):
        self.saved_to.append(path)
        Path(path).mkdir(parents=True)
        (Path(path) / "saved_model.pb").write_text("model")


@pytest.fixture
def task_env(monkeypatch, tmp_path):
    """Make this process look like a task of a 2-worker job with its own TMPDIR."""

    def set_task(role: str, index: int):
        cluster = {"worker": ["h:1", "h:2"]}
        monkeypatch.setenv(
            "TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": role, "index": index}})
        )
        monkeypatch.setenv("TFDIST_RUN_DIR", str(tmp_path / "run"))
        monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
        (tmp_path / "tmp").mkdir(exist_ok=True)
        import tempfile

        monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR

    return set_task


@pytest.mark.parametrize(
    ("multi", "chief", "writer"), [(False, False, True), (True, True, True), (True, False, False)]
)
def test_is_writer(multi, chief, writer):
    assert saving.is_writer(fake_strategy(multi, chief)) is writer


def test_chief_writes_the_real_path(task_env, tmp_path):
    task_env("worker", 0)
    model = FakeModel(fake_strategy(True, True))
    assert saving.save_model(model) == tmp_path / "run" / "model"
    assert (tmp_path / "run" / "model" / "saved_model.pb").exists()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_other_worker_saves_to_a_temp_dir_that_is_removed(task_env, tmp_path):
    task_env("worker", 1)
    model = FakeModel(fake_strategy(True, False))
    assert saving.save_model(model, tmp_path / "run" / "model") is None
    (written,) = model.saved_to
    assert Path(written).parent.name.startswith("tfdist-save-worker-1-")
    assert Path(written).is_relative_to(tmp_path / "tmp")
    assert not Path(written).exists()  # removed
    assert list((tmp_path / "tmp").iterdir()) == []
    assert not (tmp_path / "run" / "model").exists()


def test_temp_dir_is_removed_even_if_saving_fails(task_env, tmp_path):
    task_env("worker", 1)
    model = FakeModel(fake_strategy(True, False))

    def broken(path, **kwargs):
        Path(path).mkdir(parents=True)
        raise OSError("disk full")

    model.save = broken
    with pytest.raises(OSError, match="disk full"):
        saving.save_model(model)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_evaluator_never_saves(task_env, tmp_path):
    task_env("evaluator", 0)
    model = FakeModel(fake_strategy(False, True))
    assert saving.save_model(model) is None
    assert model.saved_to == []


def test_save_checkpoint_numbers_and_state_file(task_env, tmp_path):
    task_env("worker", 0)
    written = []

    class Ckpt:
        def write(self, prefix):
            Path(prefix + ".index").write_text("i")
            written.append(prefix)
            return prefix

    directory = tmp_path / "ckpts"
    first = saving.save_checkpoint(Ckpt(), directory, fake_strategy(True, True))
    second = saving.save_checkpoint(Ckpt(), directory, fake_strategy(True, True))
    assert Path(first).name == "ckpt-001" and Path(second).name == "ckpt-002"
    state = (directory / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-002"' in state


def test_done_marker_is_written_by_the_chief_only(task_env, tmp_path):
    task_env("worker", 1)
    assert callbacks.mark_done(tmp_path / "c", "ckpt-003") is None
    assert not (tmp_path / "c" / DONE_MARKER).exists()
    task_env("worker", 0)
    marker = callbacks.mark_done(tmp_path / "c", "ckpt-003")
    assert marker == tmp_path / "c" / DONE_MARKER
    assert marker.read_text().strip() == "ckpt-003"
    task_env("worker", 1)
    callbacks.clear_done(tmp_path / "c")  # not the chief's to clear
    assert marker.exists()
    task_env("worker", 0)
    callbacks.clear_done(tmp_path / "c")
    assert not marker.exists()


def test_split_logs():
    assert callbacks.split_logs({"loss": 0.5, "accuracy": 0.9}) == (0.5, {"accuracy": 0.9})
    assert callbacks.split_logs(None) == (None, {})


def test_parameter_server_without_chief_is_refused_before_tensorflow(monkeypatch):
    import sys

    from tfdist.runtime import strategies

    cluster = {"worker": ["h:1"], "ps": ["h:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    monkeypatch.setenv("TFDIST_STRATEGY", "parameter_server")
    monkeypatch.setattr(strategies, "_STATE", {})  # as in a fresh task
    had_tf = "tensorflow" in sys.modules
    with pytest.raises(ValueError, match="add `chief: 1`"):
        strategies.strategy()
    assert ("tensorflow" in sys.modules) == had_tf
