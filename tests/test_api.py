"""tfdist.api.run: what it does with the observer it is given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tfdist import api
from tfdist.errors import SpecError
from tfdist.jobspec import load
from tfdist.supervisor.observer import Observer


class _Entered(Observer):
    """An observer that is a context manager (as the live view and TensorBoard are)."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __enter__(self) -> _Entered:
        self.events.append("enter")
        return self

    def __exit__(self, *exc: object) -> None:
        self.events.append("exit")

    def on_start(self, job: Any, tasks: Any) -> None:
        self.events.append("start")

    def on_finish(self, job: Any, result: Any) -> None:
        self.events.append("finish")


def test_run_enters_an_observer_that_is_a_context_manager_around_the_job(tmp_path: Path) -> None:
    observer = _Entered()
    job = load.quick(["true"], workers=1, workdir=str(tmp_path))
    result = api.run(job, run_dir=tmp_path / "run", quiet=True, observer=observer, record=False)
    assert result.exit_code == 0
    assert observer.events == ["enter", "start", "finish", "exit"]


def test_bad_input_enters_no_observer(tmp_path: Path) -> None:
    observer = _Entered()
    job = load.quick(["no-such-program-tfdist"], workers=1, workdir=str(tmp_path))
    with pytest.raises(SpecError, match="was not found"):
        api.run(job, run_dir=tmp_path / "run", quiet=True, observer=observer, record=False)
    assert observer.events == []
    assert not (tmp_path / "run").exists()


# -- one preflight for run and submit ---------------------------------------------------------

BIG = 140_000  # over MAX_ARG_STRLEN (131,072 bytes with 4 KiB pages)


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[Any, dict[str, str], Path, str]]:
    """Jobs with several things wrong at once: (job, environment, runs root, the message the
    first check in preflight's order gives). Run and submit once checked in different orders,
    so the same input was refused for different reasons."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    runs = tmp_path / "runs"
    bad_timeout = {"TFDIST_STORE_TIMEOUT": "soon"}
    quick = load.quick
    # a TFJob's container without a command (it would run its image's)
    no_command = load.from_dict({"name": "a", "workdir": str(tmp_path),
                                 "roles": {"worker": {"replicas": 1, "kubernetes": {"args": ["x"]}}}}, "job")
    huge = quick(["python", "a" * BIG], workers=1, workdir=str(tmp_path))
    missing = quick(["no-such-program-tfdist"], workers=1, workdir=str(tmp_path))
    return {
        "commands before everything": (no_command, bad_timeout, a_file, "roles.worker: its container has no command"),
        "the job before settings": (huge, bad_timeout, a_file, "command[1]: 140,001 bytes"),
        "settings before the runs root": (missing, bad_timeout, a_file, "TFDIST_STORE_TIMEOUT: 'soon'"),
        "the runs root before the backend": (missing, {}, a_file, "--runs-dir: "),
        "the backend last": (missing, {}, runs, "'no-such-program-tfdist' was not found"),
    }


@pytest.mark.parametrize("case", ["commands before everything", "the job before settings",
                                  "settings before the runs root", "the runs root before the backend",
                                  "the backend last"])
def test_run_and_submit_refuse_the_same_bad_input_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    from tfdist.jobs.submit import submit

    job, env, root, expected = _bad_inputs(tmp_path)[case]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    before = sorted(tmp_path.iterdir())
    options = api.BackendOptions(runs_root=root)
    with pytest.raises(SpecError) as by_run:
        api.run(job, options=options, quiet=True)
    with pytest.raises(SpecError) as by_submit:
        submit(job, options=options)
    assert expected in str(by_run.value)
    assert str(by_submit.value) == str(by_run.value)
    assert sorted(tmp_path.iterdir()) == before  # nothing made: no runs root, no run directory
