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
