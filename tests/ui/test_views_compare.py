"""The pure functions behind the jobs list's new columns, the time left, the label filter
and the compared specs (no server, no browser)."""

from __future__ import annotations

import pytest

from tfdist.jobs.records import JobRecord
from tfdist.states import JobState
from tfdist.ui import views


def _job(**kw) -> JobRecord:  # type: ignore[no-untyped-def]
    return JobRecord(id="j", name="j", state=JobState.RUNNING, **kw)


def test_the_list_columns() -> None:
    assert views.restarts_cell(_job()) == "0/0" and views.restarts_cell(_job(restarts_used=1, max_restarts=3)) == "1/3"
    lead = {"epoch": 39, "epochs": 400, "step": 3900, "metrics": {"accuracy": 0.8123456, "val_accuracy": 0.1}}
    assert views.progress_cell(_job(lead_progress=lead)) == "epoch 39/400 step 3900"
    assert views.progress_cell(_job(lead_progress={"step": 5})) == "step 5"
    assert views.progress_cell(_job()) == "-"
    assert views.accuracy_cell(_job(lead_progress=lead)) == "0.8123"
    assert views.accuracy_cell(_job(lead_progress=lead, metrics={"accuracy": 0.9})) == "0.9000"  # final wins
    assert views.accuracy_cell(_job(lead_progress={"metrics": "damaged"})) == "-"
    assert views.goodput_cell(_job(goodput={"goodput": 0.875})) == "87.5%"
    assert views.goodput_cell(_job(goodput={"goodput": "x"})) == "-" and views.goodput_cell(_job()) == "-"


def test_epochs_and_the_time_left() -> None:
    reports = [{"epoch": 1, "epochs": 10, "time": 100.0}, {"epoch": 4, "epochs": 10, "time": 130.0}]
    assert views.epochs_left(reports, 90.0, 130.0, True) == ("4/10", 60.0)  # 10 s an epoch, 6 to go
    assert views.epochs_left(reports, 90.0, 140.0, True) == ("4/10", 50.0)  # 10 s since the last report
    assert views.epochs_left(reports, 90.0, 1000.0, True) == ("4/10", 0.0)  # never below zero
    assert views.epochs_left(reports, 90.0, 130.0, False) == ("4/10", None)  # ended: nothing left
    one = [{"epoch": 2, "epochs": 10, "time": 120.0}]
    assert views.epochs_left(one, 100.0, 120.0, True) == ("2/10", 80.0)  # from the start
    assert views.epochs_left([{"epoch": 2, "time": 120.0}], 100.0, 120.0, True) == ("2", None)
    assert views.epochs_left([], 100.0, 120.0, True) == ("-", None)
    assert views.epochs_left([{"epoch": float("nan"), "time": 1.0}], None, 2.0, True) == ("-", None)


def test_the_label_filter() -> None:
    assert views.parse_label_filter("team=vision, exp=a1  x.io/y=z") == (
        ("team", "vision"), ("exp", "a1"), ("x.io/y", "z"))
    assert views.parse_label_filter("  ") == ()
    for bad in ("team", "te%am=x", "team=a=b", "=x"):
        with pytest.raises(ValueError, match="label"):
            views.parse_label_filter(bad)


def test_spec_diffs() -> None:
    diffs = views.spec_diffs([("a", "name: a\nroles: 1\n"), ("b", "name: b\nroles: 1\n"), ("c", "name: a\nroles: 1\n")])
    assert [title for title, _ in diffs] == ["a → b", "a → c"]
    assert "-name: a" in diffs[0][1] and "+name: b" in diffs[0][1] and diffs[1][1] == []
    assert views.spec_diffs([]) == []
    hostile = views.spec_diffs([("a", "x\n"), ("b", "\x1b[31mred\n")])[0][1]
    assert not any("\x1b" in line for line in hostile)
