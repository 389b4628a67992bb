"""The dashboard's pure parts: task output made safe to show, the timeline's geometry, the
curves' series and stragglers."""

from __future__ import annotations

from tfdist.jobs.records import AttemptRecord
from tfdist.states import TaskState
from tfdist.supervisor.status import TaskStatus
from tfdist.ui import text, views


def test_output_is_cleaned_of_escapes_controls_and_length() -> None:
    assert text.clean("\x1b[31mred\x1b[0m \x1b]0;title\x07ok\x1b[2J") == "red ok"
    assert text.clean("a\x00b\x7fc\td") == "a\\x00b\\x7fc\td"
    assert text.clean("10%\r50%\r100%") == "100%"
    long = text.clean("x" * 10_000)
    assert long.startswith("x" * text.MAX_LINE) and long.endswith("[6,000 more characters]")
    assert text.decode_lines(b"ok\n\xff\xfe bad") == ["ok", "\ufffd\ufffd bad"]
    assert text.clean("<script>") == "<script>"  # escaping is the template's job, not this


def test_timeline_places_each_attempt_and_keeps_the_troubled_tasks_of_a_big_job() -> None:
    tasks = [TaskStatus("worker-0", "worker", 0, TaskState.SUCCEEDED, attempt=1, restarts=1),
             TaskStatus("worker-1", "worker", 1, TaskState.SUCCEEDED)]
    attempts = [AttemptRecord("j", "worker-0", 0, TaskState.FAILED, started_at=100, ended_at=150,
                              exit_code=3, reason="exit code 3"),
                AttemptRecord("j", "worker-0", 1, TaskState.SUCCEEDED, started_at=160, ended_at=200, exit_code=0),
                AttemptRecord("j", "worker-1", 0, TaskState.SUCCEEDED, started_at=100, ended_at=200, exit_code=0)]
    line = views.timeline(tasks, attempts, 100, 200)
    first, second = line.rows[0].bars
    assert (first.x, first.w, first.state) == (0.0, 500.0, "failed")
    assert (second.x, second.w) == (600.0, 400.0) and "exit code 3" in first.title
    many = [TaskStatus(f"worker-{i}", "worker", i, TaskState.SUCCEEDED) for i in range(500)]
    many[7] = TaskStatus("worker-7", "worker", 7, TaskState.FAILED)
    big = views.timeline(many, [], 0, 10)
    assert [r.task for r in big.rows] == ["worker-7"] and big.hidden == 499


def test_curves_follow_each_task_and_mark_the_straggler() -> None:
    rows = [{"time": 10.0 + i, "task": t, "step": i * 10, "loss": 1.0 / (i + 1), "metrics": {"accuracy": 0.5},
             "steps_per_sec": 3.0 if t == "worker-2" else 10.0} for i in range(4)
            for t in ("worker-0", "worker-1", "worker-2")]
    rows.append({"time": 20.0, "task": "worker-0", "final": True})
    data = views.curves(rows, 10.0)
    assert data["stragglers"] == ["worker-2"]
    w0 = data["tasks"]["worker-0"]
    assert w0["step"] == [0, 10, 20, 30] and w0["elapsed"] == [0.0, 1.0, 2.0, 3.0]
    assert w0["series"]["accuracy"]["y"] == [0.5] * 4 and "examples_per_sec" not in w0["series"]
    assert views.stragglers({"a": 10.0}) == set()  # nothing to compare with


def test_root_cause_is_one_clean_line() -> None:
    cause = {"task": "worker-1", "description": "exit code 3", "message": "Value\nError:\x1b[1m bad",
             "tail": ["\x1b[31mTraceback\x1b[0m"]}
    assert views.cause_line(cause) == "worker-1: exit code 3: Value Error: bad"
    assert views.cause_tail(cause) == ["Traceback"]


def test_the_root_cause_box_leads_with_the_exception_not_tensorflows_start() -> None:
    """A record as the store keeps it (and one from before ``error`` was kept): the line
    leads with the task's exception, the policy's words come under it, and the tail shown
    does not open with TensorFlow's start-up messages."""
    from tests.supervisor.test_output import FAILED, TF_START

    old = {"task": "worker-1", "attempt": 0, "description": "exit code 1",
           "message": "worker-1 failed (exit code 1); restart policy 'never' does not retry it", "tail": FAILED}
    for cause in (old, {**old, "error": "ValueError: bad label 11 (labels are 0..9)"}):
        assert views.cause_line(cause) == "worker-1: ValueError: bad label 11 (labels are 0..9) (exit code 1)"
        assert views.cause_detail(cause) == "exit code 1, attempt 0: restart policy 'never' does not retry it"
        assert views.cause_tail(cause)[0] == "epoch 1 of 3" and not set(TF_START) & set(views.cause_tail(cause))


def test_curves_have_no_gaps_plot_validation_and_mark_restarts() -> None:
    """A Keras job's reports alternate step reports (loss only), epoch reports (loss, metrics
    with val_*) and goodput marks (no value at all): each series holds only the reports that
    carry it, so the lines are unbroken; val_* metrics are series of their own; a task's
    first report of a new attempt marks a restart."""
    rows: list[dict[str, object]] = []
    t = 100.0
    for attempt, epochs in ((0, (1, 2)), (1, (2, 3))):
        rows.append({"time": t, "task": "worker-0", "attempt": attempt, "mark": "begin", "step": (epochs[0] - 1) * 10})
        for epoch in epochs:
            for step in (epoch * 10 - 5, epoch * 10):
                t += 1
                rows.append({"time": t, "task": "worker-0", "attempt": attempt, "step": step, "loss": 1 / step,
                             "steps_per_sec": 5.0})
            rows.append({"time": t, "task": "worker-0", "attempt": attempt, "epoch": epoch, "step": epoch * 10,
                         "loss": 1 / epoch, "metrics": {"accuracy": 0.5, "val_loss": 2.0, "val_accuracy": 0.4}})
            rows.append({"time": t, "task": "worker-0", "attempt": attempt, "mark": "checkpoint",
                         "step": epoch * 10, "seconds": 0.1})
    data = views.curves(rows, 100.0)
    series = data["tasks"]["worker-0"]["series"]
    for name, s in series.items():
        assert None not in s["y"] and len(s["y"]) == len(s["step"]) == len(s["elapsed"]), name
    assert len(series["loss"]["y"]) == 12 and series["val_loss"]["y"] == [2.0] * 4
    assert series["val_accuracy"]["step"] == [10, 20, 20, 30] and len(series["accuracy"]["y"]) == 4
    assert data["tasks"]["worker-0"]["step"][0] == 5  # marks are not reports
    assert data["restarts"] == [{"attempt": 1, "tasks": ["worker-0"], "step": 10, "elapsed": 4.0, "more": 0}]
    hostile = views.curves([{"time": 1.0, "task": "worker-0", "step": 1,
                             "metrics": {"<img src=x onerror=alert(1)>": 1.0, "nan": float("nan"), "ok": 2.0,
                                         **{f"m{i}": 1.0 for i in range(100)}}}], 0.0)
    names = hostile["tasks"]["worker-0"]["series"]
    assert "ok" in names and len(names) == views.MAX_SERIES and not any("<" in n or n == "nan" for n in names)
