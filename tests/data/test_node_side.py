"""The node side: staging with its cache and progress lines, outputs kept at their URI, and
what a script reads through tfdist.runtime."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tfdist import contract
from tfdist.node import outputs, staging
from tfdist.runtime import env as runtime_env
from tfdist.runtime import input_files, output_dir


def plan_env(files: list[Path], out: Path | None = None, writer: bool = True) -> dict[str, str]:
    plan = {"task": "worker-0",
            "inputs": [{"name": "train", "files": [{"uri": str(f), "size": f.stat().st_size, "rel": f.name}
                                                    for f in files]}],
            "outputs": [{"name": "model_dir", "uri": str(out), "writer": writer}] if out else []}
    return {contract.DATA_PLAN: json.dumps(plan)}


def source(tmp_path: Path, n: int = 3) -> list[Path]:
    d = tmp_path / "src"
    d.mkdir()
    for i in range(n):
        (d / f"part-{i}").write_bytes(bytes([i]) * (100 + i))
    return sorted(d.iterdir())


def test_staging_copies_once_then_uses_the_cache(tmp_path: Path) -> None:
    files = source(tmp_path)
    lines: list[str] = []
    first = staging.prepare(plan_env(files), str(tmp_path / "node"), lines.append)
    paths = json.loads(first.env["TFDIST_DATA_TRAIN"])
    assert [Path(p).read_bytes() for p in paths] == [f.read_bytes() for f in files]
    assert all(str(tmp_path / "node") in p for p in paths)
    assert first.copied == 3 and "copied 3, cached 0" in lines[0]
    mark = json.loads(lines[-1][len(contract.PROGRESS_PREFIX):])
    assert mark["mark"] == contract.MARK_STAGE and mark["copied"] == 3 and mark["bytes"] == 303
    lines.clear()
    again = staging.prepare(plan_env(files), str(tmp_path / "node"), lines.append)
    assert again.copied == 0 and "copied 0, cached 3" in lines[0]
    assert json.loads(again.env["TFDIST_DATA_TRAIN"]) == paths


def test_a_changed_source_is_copied_again(tmp_path: Path) -> None:
    files = source(tmp_path)
    staging.prepare(plan_env(files), str(tmp_path / "node"), lambda _: None)
    files[1].write_bytes(b"new content, another size")
    lines: list[str] = []
    again = staging.prepare(plan_env(files), str(tmp_path / "node"), lines.append)
    assert again.copied == 1
    assert Path(json.loads(again.env["TFDIST_DATA_TRAIN"])[1]).read_bytes() == b"new content, another size"


def test_a_missing_source_raises(tmp_path: Path) -> None:
    files = source(tmp_path)
    env = plan_env(files)
    files[0].unlink()
    with pytest.raises(OSError):
        staging.prepare(env, str(tmp_path / "node"), lambda _: None)


def test_a_plan_escaping_its_directory_is_refused(tmp_path: Path) -> None:
    files = source(tmp_path, 1)
    plan = json.loads(plan_env(files)[contract.DATA_PLAN])
    plan["inputs"][0]["files"][0]["rel"] = "../../etc/x"
    with pytest.raises(ValueError, match="no relative path"):
        staging.prepare({contract.DATA_PLAN: json.dumps(plan)}, str(tmp_path / "node"), lambda _: None)


def test_outputs_are_copied_when_stable_state_files_last(tmp_path: Path) -> None:
    target = tmp_path / "target"
    prepared = staging.prepare(plan_env([], target), str(tmp_path / "node"), lambda _: None)
    local = Path(prepared.env["TFDIST_OUTPUT_MODEL_DIR"])
    assert local.is_dir() and len(prepared.mirrors) == 1
    mirror = prepared.mirrors[0]
    (local / "ckpt-1.index").write_text("i")
    (local / "checkpoint").write_text("ckpt-1")
    assert mirror.sync(final=False) == 0  # seen once: not yet stable
    assert mirror.sync(final=False) == 2
    assert (target / "checkpoint").read_text() == "ckpt-1" and (target / "ckpt-1.index").exists()
    assert outputs.order(["checkpoint", "b", "a/saved_model.pb", "a/variables"]) == [
        "a/variables", "b", "a/saved_model.pb", "checkpoint"]
    (local / "ckpt-1.index").unlink()
    (local / "late.txt").write_text("written just before the end")
    assert mirror.close() == 1  # the last pass copies what is not stable yet
    assert (target / "late.txt").exists() and not (target / "ckpt-1.index").exists()


def test_saves_faster_than_the_passes_still_leave_a_checkpoint_to_resume_from(tmp_path: Path) -> None:
    """A script that saves at every pass rewrites ``checkpoint`` each time, so it is never
    stable: the URI gets a state file of the mirror's own naming the newest checkpoint whose
    files are all there, never one whose files are not."""
    target = tmp_path / "target"
    prepared = staging.prepare(plan_env([], target), str(tmp_path / "node"), lambda _: None)
    local = Path(prepared.env["TFDIST_OUTPUT_MODEL_DIR"]) / "checkpoints"
    local.mkdir()
    mirror = prepared.mirrors[0]

    def save(n: int) -> None:  # as tfdist.runtime.save_checkpoint writes it
        (local / f"ckpt-{n:03d}.index").write_text(f"i{n}")
        (local / f"ckpt-{n:03d}.data-00000-of-00001").write_text(f"d{n}")
        (local / "checkpoint.tmp").write_text(f'model_checkpoint_path: "ckpt-{n:03d}"\n'
                                              f'all_model_checkpoint_paths: "ckpt-{n:03d}"\n')
        (local / "checkpoint.tmp").replace(local / "checkpoint")

    state = target / "checkpoints" / "checkpoint"
    for n in range(1, 5):
        save(n)
        mirror.sync(final=False)
        if n == 1:
            assert not state.exists()  # nothing of ckpt-001 is at the URI yet
        else:  # ckpt-(n-1) was stable since the last pass: its files went first, then a state naming it
            assert outputs.parse_state(state.read_text())[-1] == f"ckpt-{n - 1:03d}"
            assert (target / "checkpoints" / f"ckpt-{n - 1:03d}.index").read_text() == f"i{n - 1}"
    assert outputs.parse_state('model_checkpoint_path: "b"\nall_model_checkpoint_paths: "a"\n'
                               'all_model_checkpoint_paths: "b"\n') == ["a", "b"]
    assert mirror.close() >= 3
    assert state.read_text() == (local / "checkpoint").read_text()  # the last pass: the task's own


def test_a_stable_state_file_waits_for_the_checkpoint_it_names(tmp_path: Path) -> None:
    """A pass that lists the directory just before a save's index lands and reads the state
    file's time just after sees the new state file but not the index: the next pass finds
    that state file stable while the index is new. The state file at the URI then still names
    the last checkpoint that is all there, never the one whose index is not."""
    target = tmp_path / "target"
    prepared = staging.prepare(plan_env([], target), str(tmp_path / "node"), lambda _: None)
    local = Path(prepared.env["TFDIST_OUTPUT_MODEL_DIR"])
    mirror = prepared.mirrors[0]

    def state(*names: str) -> str:
        return outputs.state_text(list(names))

    for f in ("ckpt-1.index", "ckpt-1.data-00000-of-00001"):
        (local / f).write_text(f)
    (local / "checkpoint").write_text(state("ckpt-1"))
    mirror.sync(final=False)
    mirror.sync(final=False)
    assert (target / "checkpoint").read_text() == state("ckpt-1")
    (local / "ckpt-2.data-00000-of-00001").write_text("d2")
    (local / "checkpoint").write_text(state("ckpt-1", "ckpt-2"))
    mirror.sync(final=False)  # the pass that saw the new state file but not the index
    (local / "ckpt-2.index").write_text("i2")
    mirror.sync(final=False)  # the state file is stable now, ckpt-2.index is not
    assert outputs.parse_state((target / "checkpoint").read_text()) == ["ckpt-1"]
    assert not (target / "ckpt-2.index").exists()
    mirror.sync(final=False)  # the index is stable: it goes, then the task's own state file
    assert (target / "ckpt-2.index").read_text() == "i2"
    assert (target / "checkpoint").read_text() == state("ckpt-1", "ckpt-2")


def test_a_restarted_task_starts_from_the_copy(tmp_path: Path) -> None:
    target = tmp_path / "target"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "ckpt").write_text("saved before")
    lines: list[str] = []
    prepared = staging.prepare(plan_env([], target), str(tmp_path / "other-node"), lines.append)
    local = Path(prepared.env["TFDIST_OUTPUT_MODEL_DIR"])
    assert (local / "sub" / "ckpt").read_text() == "saved before"
    assert any("1 files" in line and "restored" in line for line in lines)
    assert prepared.mirrors[0].close() == 0  # restored files are not sent back


def test_only_the_writer_keeps_its_output(tmp_path: Path) -> None:
    prepared = staging.prepare(plan_env([], tmp_path / "t", writer=False), str(tmp_path / "n"), lambda _: None)
    assert prepared.mirrors == [] and "TFDIST_OUTPUT_MODEL_DIR" in prepared.env


def test_a_store_that_fails_is_said_once_and_retried(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the target directory should be")
    lines: list[str] = []
    local = tmp_path / "local"
    local.mkdir()
    mirror = outputs.Mirror("model_dir", str(local), str(blocker / "out"), lines.append)
    (local / "a").write_text("x")
    mirror.sync(final=False)
    mirror.sync(final=False)
    mirror.sync(final=False)
    assert len([line for line in lines if "cannot copy" in line]) == 1


def test_runtime_reads_the_variables() -> None:
    env = {"TFDIST_DATA_TRAIN": json.dumps(["/a", "/b"]), "TFDIST_OUTPUT_MODEL_DIR": "/out",
           contract.RUN_DIR: "/run"}
    assert input_files("train", env) == ["/a", "/b"]
    assert output_dir("model_dir", env) == Path("/out")
    with pytest.raises(KeyError, match="no input 'eval'"):
        input_files("eval", env)
    with pytest.raises(ValueError, match="no input or output name"):
        input_files("../x", env)
    # the save helpers' directories live under the model_dir output when there is one
    assert runtime_env.job_dirs(env).checkpoints == Path("/out/checkpoints")
    assert runtime_env.job_dirs({contract.RUN_DIR: "/run"}).checkpoints == Path("/run/checkpoints")


def test_the_task_root_is_per_task(tmp_path: Path) -> None:
    assert staging.task_root(str(tmp_path), "worker-1") == os.path.join(tmp_path, "tfdist-data", "worker-1")


def test_the_evaluator_follows_the_uri(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    plan = {"task": "evaluator-0", "inputs": [],
            "outputs": [{"name": "model_dir", "uri": str(target), "writer": False, "follow": True}]}
    prepared = staging.prepare({contract.DATA_PLAN: json.dumps(plan)}, str(tmp_path / "n"), lambda _: None)
    local = Path(prepared.env["TFDIST_OUTPUT_MODEL_DIR"])
    mirror = prepared.mirrors[0]
    (target / "ckpt-2.index").write_text("data")
    (target / "checkpoint").write_text("ckpt-2")
    assert mirror.pull() == 2 and (local / "checkpoint").read_text() == "ckpt-2"
    assert mirror.pull() == 0  # nothing new
    (target / "ckpt-3.index").write_text("more")
    (target / "checkpoint").write_text("ckpt-3")  # the same size as before: read and compared
    assert mirror.pull() == 2 and (local / "checkpoint").read_text() == "ckpt-3"
    (local / "mine.txt").write_text("the evaluator's own file")
    assert mirror.close() == 0 and not (target / "mine.txt").exists()  # never written back
