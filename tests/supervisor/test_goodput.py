"""Goodput on the FakeBackend's controlled clock: every cause, on the supervisor's real paths
(group restart, a parameter-server worker alone, a ps, a hang, a failed job, a gang), and
the pure breakdown on hand-made timelines. Each test knows to the millisecond what the
answer must be, because the fake clock says when everything happened."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import exit, progress, run_fake
from tfdist.jobspec import load, model
from tfdist.states import JobState, PhaseState, TaskState
from tfdist.supervisor import checkpoint_advice, goodput
from tfdist.supervisor.goodput import PhaseChange, Report, Transition

EPOCH = 1_700_000_000.0  # FakeClock.EPOCH: wall time 0 of a fake run


def job(**changes: Any) -> model.JobSpec:
    data: dict[str, Any] = {"name": "fake", "command": ["train"], "roles": {"chief": 1, "worker": 2},
                            "restart": {"policy": "on-failure", "max_restarts": 3,
                                        "backoff_seconds": 1, "backoff_max_seconds": 30},
                            "stop_grace_seconds": 5, "drain_seconds": 10}
    data.update(changes)
    return load.from_dict(data, "test")


def begin(step: int) -> Any:
    return progress(mark="begin", step=step)


def ckpt(step: int, seconds: float) -> Any:
    return progress(mark="checkpoint", step=step, seconds=seconds)


def step(n: int, **more: Any) -> Any:
    return progress(step=n, **more)


def sums_to_wall(g: dict[str, Any]) -> None:
    assert sum(g["seconds"].values()) == pytest.approx(g["wall_seconds"], abs=1e-6)
    for a in g["attempts"]:
        assert sum(a["seconds"].values()) == pytest.approx(a["end"] - a["start"], abs=1e-6)
    assert g["attempts"][0]["start"] == pytest.approx(EPOCH)


def test_a_clean_run_is_startup_productive_checkpoint_and_shutdown(tmp_path: Path) -> None:
    # begin at 4 s, 10 steps/s, a 0.5 s save ending at 9.5 s (step 50), training ends at 15 s
    chief = [(4, begin(0)), (6, step(20)), (9.5, ckpt(50, 0.5)), (14, step(95)),
             (15, step(100, final=True)), (16, exit(0))]
    result, _, _ = run_fake(job(roles={"chief": 1}), tmp_path, {"chief-0": chief})
    g = result.goodput
    assert g is not None and result.state is JobState.SUCCEEDED
    sums_to_wall(g)
    sec = g["seconds"]
    assert sec["startup"] == pytest.approx(4)
    assert sec["checkpoint"] == pytest.approx(0.5)
    assert sec["productive"] == pytest.approx(15 - 4 - 0.5)
    assert sec["shutdown"] == pytest.approx(1)
    assert sec["lost"] == sec["restart"] == sec["evaluation"] == 0
    assert g["steps_kept"] == 100 and g["steps_lost"] == 0 and g["checkpoint_saves"] == 1
    assert g["goodput"] == pytest.approx(10.5 / 16, abs=1e-4)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["goodput"] == g


def test_an_all_reduce_restart_counts_restart_and_the_steps_redone(tmp_path: Path) -> None:
    # attempt 0: begins 3 s, saves step 40 ending at 7 s, reaches step 70 at 10 s; worker-1
    # dies at 11 s. Backoff 1 s; attempt 1 begins at 15 s from step 40 and ends at 20 s.
    first = [(3, begin(0)), (7, ckpt(40, 0.25)), (10, step(70))]
    plan = {("chief-0", 0): first, ("worker-1", 0): [(11, exit(1))],
            ("chief-0", 1): [(3, begin(40)), (8, step(100, final=True)), (9, exit(0))]}
    result, backend, _ = run_fake(job(), tmp_path, plan)
    g = result.goodput
    assert g is not None and result.restarts_used == 1
    sums_to_wall(g)
    a0, a1 = g["attempts"]
    assert a0["end"] == pytest.approx(EPOCH + 11)  # at the failure, not when the chief was stopped
    assert a0["seconds"]["startup"] == pytest.approx(3)
    assert a0["seconds"]["productive"] == pytest.approx(7 - 3 - 0.25)
    assert a0["seconds"]["checkpoint"] == pytest.approx(0.25)
    assert a0["seconds"]["lost"] == pytest.approx(11 - 7)  # step 40 -> the failure, redone
    assert (a0["restored_step"], a0["last_step"], a0["kept_step"]) == (0, 70, 40)
    restart_at = backend.start_times("chief-0")[1]
    assert restart_at == pytest.approx(12)
    assert a1["restored_step"] == 40
    assert a1["seconds"]["restart"] == pytest.approx(restart_at + 3 - 11)
    assert a1["seconds"]["productive"] == pytest.approx(8 - 3)
    assert g["steps_kept"] == 40 + 60 and g["steps_lost"] == 30
    assert g["seconds"]["lost"] == pytest.approx(4)


def test_a_restore_older_than_an_earlier_attempt_undoes_it_too(tmp_path: Path) -> None:
    # attempt 0 saves 50; attempt 1 starts from 50, saves nothing, dies; attempt 2 restores 20
    # (say the checkpoint at 50 was damaged): attempts 0 and 1 both lose everything past 20.
    events = [Transition(0, "w", 0, TaskState.PENDING), Report(2, "w", 0, {"mark": "begin", "step": 0}),
              Report(4, "w", 0, {"mark": "checkpoint", "step": 20, "seconds": 0.0}),
              Report(7, "w", 0, {"mark": "checkpoint", "step": 50, "seconds": 0.0}),
              Transition(8, "w", 0, TaskState.FAILED),
              Transition(9, "w", 1, TaskState.PENDING), Report(10, "w", 1, {"mark": "begin", "step": 50}),
              Report(12, "w", 1, {"step": 70}), Transition(13, "w", 1, TaskState.FAILED),
              Transition(14, "w", 2, TaskState.PENDING), Report(15, "w", 2, {"mark": "begin", "step": 20}),
              Report(20, "w", 2, {"step": 100, "final": True})]
    g = goodput.breakdown(events, reference="w", start=0, end=20)
    assert g is not None
    a0, a1, a2 = g.attempts
    assert a0.kept_step == 20 and a0.seconds["productive"] == pytest.approx(2)
    assert a0.seconds["lost"] == pytest.approx(4)
    assert a1.kept_step == 20 and a1.seconds["productive"] == 0
    assert a1.seconds["lost"] == pytest.approx(3) and a1.seconds["restart"] == pytest.approx(2)
    assert a2.seconds["productive"] == pytest.approx(5)
    assert g.steps_kept == 20 + 80 and g.steps_lost == 30 + 20
    assert sum(g.seconds.values()) == pytest.approx(20)


def test_a_parameter_server_worker_restarting_alone_costs_training_nothing(tmp_path: Path) -> None:
    pss = job(strategy="parameter_server", roles={"chief": 1, "worker": 2, "ps": 1})
    chief = [(2, begin(0)), (5, step(30)), (10, step(80)), (12, step(100, final=True)), (12.5, exit(0))]
    plan = {"chief-0": chief, ("worker-1", 0): [(4, exit(1))]}
    result, backend, _ = run_fake(pss, tmp_path, plan)
    g = result.goodput
    assert g is not None and backend.attempts("worker-1") == [0, 1] and backend.attempts("chief-0") == [0]
    sums_to_wall(g)
    assert len(g["attempts"]) == 1
    assert g["seconds"]["restart"] == 0 and g["seconds"]["lost"] == 0
    assert g["seconds"]["productive"] == pytest.approx(10)


def test_a_ps_failure_restarts_the_chief_and_its_lost_work_is_counted(tmp_path: Path) -> None:
    pss = job(strategy="parameter_server", roles={"chief": 1, "worker": 1, "ps": 1})
    plan = {("chief-0", 0): [(2, begin(0)), (4, ckpt(20, 0.5)), (6, step(40))],
            ("ps-0", 0): [(7, exit(1))],
            ("chief-0", 1): [(2, begin(20)), (6, step(100, final=True)), (7, exit(0))]}
    result, backend, _ = run_fake(pss, tmp_path, plan)
    g = result.goodput
    assert g is not None and backend.attempts("chief-0") == [0, 1]
    sums_to_wall(g)
    a0, a1 = g["attempts"]
    assert a0["end"] == pytest.approx(EPOCH + 7)
    assert a0["seconds"]["lost"] == pytest.approx(3)
    assert a1["seconds"]["restart"] == pytest.approx(backend.start_times("chief-0")[1] + 2 - 7)


def test_a_hang_is_lost_work_up_to_the_moment_it_is_noticed(tmp_path: Path) -> None:
    hang = job(roles={"worker": 1}, hang_timeout_seconds=5, restart={"policy": "on-failure",
                                                                   "max_restarts": 1, "backoff_seconds": 0})
    plan = {("worker-0", 0): [(1, begin(0)), (2, ckpt(10, 0.0)), (3, step(20))],
            ("worker-0", 1): [(1, begin(10)), (3, step(30, final=True)), (3.5, exit(0))]}
    result, _, _ = run_fake(hang, tmp_path, plan)
    g = result.goodput
    assert g is not None and result.state is JobState.SUCCEEDED
    sums_to_wall(g)
    a0 = g["attempts"][0]
    assert a0["end"] == pytest.approx(EPOCH + 8, abs=1)  # noticed ~5 s after the last report
    assert a0["seconds"]["lost"] == pytest.approx(a0["end"] - EPOCH - 2)


def test_a_failed_job_keeps_only_its_last_checkpoint(tmp_path: Path) -> None:
    plan = {"worker-0": [(1, begin(0)), (3, ckpt(20, 0.5)), (5, step(40)), (6, exit(1))]}
    result, _, _ = run_fake(job(roles={"worker": 1}, restart={"policy": "never"}), tmp_path, plan)
    g = result.goodput
    assert g is not None and result.state is JobState.FAILED
    sums_to_wall(g)
    assert g["seconds"]["productive"] == pytest.approx(1.5)
    assert g["seconds"]["lost"] == pytest.approx(g["wall_seconds"] - 1 - 2)
    assert g["steps_kept"] == 20 and g["steps_lost"] == 20


def test_evaluation_and_waits_reported_by_the_runtime_are_their_own_causes() -> None:
    events = [Transition(0, "c", 0, TaskState.PENDING), Transition(0.5, "c", 0, TaskState.RUNNING),
              Report(2, "c", 0, {"mark": "begin", "step": 0}),
              Report(5, "c", 0, {"mark": "eval", "seconds": 1.0}),
              Report(7, "c", 0, {"mark": "wait", "seconds": 0.5}),
              Report(9, "c", 0, {"step": 90, "final": True})]
    g = goodput.breakdown(events, reference="c", start=0, end=10)
    assert g is not None
    assert g.seconds["evaluation"] == pytest.approx(1)
    assert g.seconds["waiting"] == pytest.approx(0.5 + 0.5)  # the reported wait and the gang
    assert g.seconds["startup"] == pytest.approx(1.5)
    assert g.seconds["productive"] == pytest.approx(7 - 1.5)
    assert g.seconds["shutdown"] == pytest.approx(1)
    assert g.biggest_loss == ("startup", pytest.approx(1.5))


def test_a_gang_still_being_scheduled_is_waiting_not_startup() -> None:
    # three tasks asked for at 1 s; the last one is running only at 6 s (a pod scheduled late)
    events = [Transition(1, t, 0, TaskState.PENDING) for t in ("c", "w0", "w1")]
    events += [Transition(1.1, "c", 0, TaskState.RUNNING), Transition(1.2, "w0", 0, TaskState.RUNNING),
               Transition(6, "w1", 0, TaskState.RUNNING), Report(8, "c", 0, {"mark": "begin", "step": 0}),
               Report(10, "c", 0, {"step": 20, "final": True})]
    g = goodput.breakdown(events, reference="c", start=0, end=10)
    assert g is not None
    assert g.seconds["waiting"] == pytest.approx(5)
    assert g.seconds["startup"] == pytest.approx(3)
    assert g.seconds["productive"] == pytest.approx(2)


def test_without_marks_the_step_reports_still_give_an_answer_with_a_note() -> None:
    events = [Transition(0, "c", 0, TaskState.PENDING), Report(3, "c", 0, {"step": 10}),
              Report(6, "c", 0, {"step": 40, "final": True})]
    g = goodput.breakdown(events, reference="c", start=0, end=7)
    assert g is not None
    assert g.seconds["startup"] == pytest.approx(3) and g.seconds["productive"] == pytest.approx(3)
    assert any("no 'begin' marks" in n for n in g.notes)


def test_no_step_reports_no_goodput(tmp_path: Path) -> None:
    result, _, _ = run_fake(job(roles={"chief": 1}), tmp_path, {"chief-0": [(2, exit(0))]})
    assert result.goodput is None
    assert goodput.breakdown([], reference="c", start=0, end=1) is None


def test_hostile_report_values_are_ignored() -> None:
    events = [Report(1, "c", 0, {"mark": "begin", "step": 0}),
              Report(2, "c", 0, {"mark": "checkpoint", "step": -5, "seconds": float("nan")}),
              Report(3, "c", 0, {"mark": "checkpoint", "step": True, "seconds": 1e300}),
              Report(4, "c", 0, {"step": "many"}), Report(5, "c", 0, {"step": 2**70}),
              Report(6, "c", 0, {"step": 10, "final": True})]
    g = goodput.breakdown(events, reference="c", start=0, end=6)
    assert g is not None
    assert sum(g.seconds.values()) == pytest.approx(6)
    assert g.seconds["checkpoint"] <= 6


def test_a_running_job_keeps_its_current_attempt() -> None:
    events = [Report(1, "c", 0, {"mark": "begin", "step": 0}), Report(4, "c", 0, {"step": 30})]
    g = goodput.breakdown(events, reference="c", start=0, end=5, ended=False)
    assert g is not None
    assert g.seconds["productive"] == pytest.approx(4) and g.seconds["lost"] == 0


def timeline(failures: int, interval: float, cost: float, run: float = 100.0) -> list[Any]:
    """One attempt per failure: saves every ``interval`` s costing ``cost`` s; each attempt
    dies ``0.9 * interval`` after its last save and restarts from it."""
    events: list[Any] = []
    t, s, done = 0.0, 0, 0.0
    for a in range(failures + 1):
        events.append(Transition(t, "c", a, TaskState.PENDING))
        t += 1
        events.append(Report(t, "c", a, {"mark": "begin", "step": s}))
        length = run / (failures + 1)
        end = t + length
        while t + interval <= end:
            t += interval
            done += interval - cost
            s = int(done * 10)
            events.append(Report(t, "c", a, {"mark": "checkpoint", "step": s, "seconds": cost}))
        if a < failures:
            t += 0.9 * interval
            events.append(Report(t - 0.01, "c", a, {"step": s + 5}))
            events.append(Transition(t, "c", a, TaskState.FAILED))
        else:
            t += 1
            events.append(Report(t, "c", a, {"step": s + 10, "final": True}))
    return events


def test_advice_says_save_more_often_when_recomputation_cost_more() -> None:
    events = timeline(failures=4, interval=20, cost=0.1, run=400)
    end = max(e.time for e in events) + 1
    g = goodput.breakdown(events, reference="c", start=0, end=end)
    assert g is not None and g.seconds["lost"] > g.seconds["checkpoint"]
    assert g.advice is not None and "Young/Daly" in g.advice and "instead of every 20.0s" in g.advice


def test_advice_says_save_less_often_when_saves_cost_more_than_failures() -> None:
    events = timeline(failures=0, interval=2, cost=0.5, run=100)
    end = max(e.time for e in events) + 1
    g = goodput.breakdown(events, reference="c", start=0, end=end)
    assert g is not None and g.advice is not None and "nothing failed" in g.advice
    assert "every 10.0s" in g.advice  # 0.5 s a save is 5% of a 10 s interval


def test_no_advice_when_the_interval_is_about_right() -> None:
    # Young/Daly for 0.1 s saves and ~50 s between failures is ~3.2 s
    events = timeline(failures=2, interval=3, cost=0.1, run=150)
    end = max(e.time for e in events) + 1
    g = goodput.breakdown(events, reference="c", start=0, end=end)
    assert g is not None and g.advice is None


def test_no_advice_when_every_attempt_failed_before_training() -> None:
    """Failures and saves but no training time: no interval to judge (this raised
    ZeroDivisionError before)."""
    assert checkpoint_advice.advise({"restart": 3.0}, failures=2, wall=3.0, steps_kept=0,
                                    saves=[0.5], intervals=[10.0]) is None


def test_summary_line_names_the_biggest_loss() -> None:
    g = {"goodput": 0.8, "wall_seconds": 10.0,
         "seconds": dict.fromkeys(goodput.CAUSES, 0.0) | {"productive": 8.0, "startup": 1.5, "lost": 0.5}}
    assert goodput.summary_line(g) == ("goodput 80.0% (8.0s of 10.0s in steps kept); "
                                       "biggest loss: startup 1.5s (15%)")


def test_from_rows_reads_the_run_files_and_skips_damaged_rows(tmp_path: Path) -> None:
    plan = {"chief-0": [(2, begin(0)), (5, step(30, final=True)), (6, exit(0))]}
    result, _, _ = run_fake(job(roles={"chief": 1}), tmp_path, plan)
    run = tmp_path / "run"
    transitions = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    reports = [json.loads(x) for x in (run / "progress.jsonl").read_text().splitlines()]
    transitions.append({"time": "x", "task": "chief-0", "state": "running"})
    transitions.append({"task": "chief-0", "state": "bogus"})
    g = goodput.breakdown(goodput.from_rows(transitions, reports), reference="chief-0",
                          start=result.started_at, end=result.ended_at)
    assert g is not None and g.to_dict() == result.goodput


def test_a_damaged_record_reads_as_zeros_in_the_summary_line() -> None:
    assert goodput.summary_line({"goodput": "x", "seconds": [1], "wall_seconds": -3}) == \
        "goodput 0.0% (0.0s of 0.0s in steps kept)"


def test_advice_never_suggests_an_interval_longer_than_the_job() -> None:
    """A 30 s job whose saves cost 1.5 s each, one every 3 s: CheckFreq's 5% means one save
    every 30 s, as long as the whole job; that is no interval for it (nor one that does not
    fit twice in it)."""
    events = timeline(failures=0, interval=3, cost=1.5, run=30)
    end = max(e.time for e in events) + 1
    g = goodput.breakdown(events, reference="c", start=0, end=end)
    assert g is not None and g.advice is not None
    training = sum(g.seconds[c] for c in ("productive", "lost", "checkpoint", "evaluation"))
    advised = [float(x) for x in re.findall(r"every (\d+(?:\.\d+)?)s", g.advice)]
    assert all(2 * x <= training for x in advised if x != 3.0), g.advice
    assert "at most once before the end" in g.advice
    direct = checkpoint_advice.advise({"productive": 20.0, "checkpoint": 10.0, "lost": 0.0}, failures=0,
                                      wall=31.0, steps_kept=200, saves=[2.0], intervals=[4.0])
    assert direct is not None and "every 40.0s" not in direct and "133% of the 30.0s this job trained" in direct


def test_evaluation_in_fit_is_named_as_asked_for_not_as_the_biggest_loss() -> None:
    g = {"goodput": 0.5, "wall_seconds": 10.0,
         "seconds": dict.fromkeys(goodput.CAUSES, 0.0) | {"productive": 5.0, "evaluation": 4.0, "startup": 1.0}}
    assert goodput.summary_line(g) == ("goodput 50.0% (5.0s of 10.0s in steps kept); biggest loss: startup "
                                       "1.0s (10%); evaluation in fit 4.0s (40%) (asked for, not lost)")

def test_the_supervisors_starting_phase_is_the_gangs_wait_when_it_was_recorded() -> None:
    """The supervisor says when a round was starting (PhaseChange): that is the wait, not the
    one read from the tasks' transitions (which stays for records without phases)."""
    gang = [Transition(1, t, 0, TaskState.PENDING) for t in ("c", "w0", "w1")]
    gang += [Transition(1.1, "c", 0, TaskState.RUNNING), Transition(1.2, "w0", 0, TaskState.RUNNING),
             Transition(6, "w1", 0, TaskState.RUNNING), Report(8, "c", 0, {"mark": "begin", "step": 0}),
             Report(10, "c", 0, {"step": 20, "final": True})]
    said = [PhaseChange(1, PhaseState.STARTING), PhaseChange(4, PhaseState.RUNNING),
            PhaseChange(10, PhaseState.DRAINING)]
    g = goodput.breakdown([*gang, *said], reference="c", start=0, end=10)
    assert g is not None
    assert g.seconds["waiting"] == pytest.approx(3)  # 1 s to 4 s, as the supervisor said
    assert g.seconds["startup"] == pytest.approx(5)
    # a starting phase still open when training began is cut there
    open_ended = goodput.breakdown([*gang, PhaseChange(1, PhaseState.STARTING)], reference="c", start=0, end=10)
    assert open_ended is not None and open_ended.seconds["waiting"] == pytest.approx(7)
    # phases recorded, none starting in this attempt: no wait, whatever the transitions say
    none = goodput.breakdown([*gang, PhaseChange(0.5, PhaseState.RUNNING)], reference="c", start=0, end=10)
    assert none is not None and none.seconds["waiting"] == 0


def test_a_supervised_run_records_its_phases_in_the_goodput_timeline(tmp_path: Path) -> None:
    job = load.from_dict({"name": "g", "command": ["t"], "roles": {"worker": 1}}, "test")
    _, _, sup = run_fake(job, tmp_path, {"worker-0": [(1, progress(mark="begin", step=0)),
                                                      (2, progress(step=5, final=True)), (3, exit(0))]})
    changes = [e.phase for e in sup._timeline if isinstance(e, PhaseChange)]
    assert changes == [PhaseState.STARTING, PhaseState.RUNNING, PhaseState.DRAINING, PhaseState.ENDED]


def test_staging_is_its_own_cause_before_training(tmp_path: Path) -> None:
    # the node side staged for 1.5 s before the script started (the mark comes at 2 s), training
    # begins at 4 s; a restart stages again from the cache for 0.2 s
    chief = [(2, progress(mark="stage", seconds=1.5, files=3, copied=3, bytes=10)), (4, begin(0)),
             (6, step(20)), (7, exit(1))]
    again = [(2.2, progress(mark="stage", seconds=0.2, files=3, copied=0, bytes=0)), (3, begin(0)),
             (5, step(20, final=True)), (6, exit(0))]
    result, _, _ = run_fake(job(roles={"chief": 1}), tmp_path, {("chief-0", 0): chief, ("chief-0", 1): again})
    g = result.goodput
    assert g is not None
    sums_to_wall(g)
    first, second = g["attempts"]
    assert first["seconds"]["staging"] == pytest.approx(1.5)
    assert first["seconds"]["startup"] == pytest.approx(4 - 1.5)
    assert second["seconds"]["staging"] == pytest.approx(0.2)
    assert g["seconds"]["staging"] == pytest.approx(1.7)
