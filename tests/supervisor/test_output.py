"""TensorFlow's start-up noise and the line that says why a task failed, found in its output."""

from __future__ import annotations

from tfdist.supervisor.output import StartupFold, error_line, without_startup
from tfdist.supervisor.result import RootCause

#: What a CPU-only TensorFlow 2.17 task prints before its own first line, then a failure.
TF_START = [
    "2026-12-04 17:13:21.123456: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on. "
    "You may see slightly different numerical results due to floating-point round-off errors.",
    "2026-12-04 17:13:21.2: I external/local_xla/xla/tsl/cuda/cudart_stub.cc:32] Could not find cuda "
    "drivers on your machine, GPU will not be used.",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "E0000 00:00:1733332401.123456   12345 cuda_executor.cc:1015] failed call to cuInit: INTERNAL: "
    "CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    "I0000 00:00:1733332401.2   12345 devices.cc:67] Number of eligible GPUs (core count >= 8): 0",
    "",
]
FAILED = [*TF_START, "epoch 1 of 3", "Traceback (most recent call last):",
          '  File "train.py", line 9, in <module>', "    check(labels)",
          "ValueError: bad label 11 (labels are 0..9)",
          "E0000 00:00:1733332402.1   12345 coordination_service_agent.cc:1] shutting down"]


def test_the_error_line_is_the_exception_not_tensorflows_noise() -> None:
    assert error_line(FAILED) == "ValueError: bad label 11 (labels are 0..9)"
    chained = ["Traceback (most recent call last):", "KeyError: 'x'", "", "During handling of the above "
               "exception, another exception occurred:", "", "Traceback (most recent call last):",
               '  File "t.py", line 3', "tensorflow.python.framework.errors_impl.InternalError: boom"]
    assert error_line(chained) == "tensorflow.python.framework.errors_impl.InternalError: boom"
    assert error_line([*TF_START, "step 3", "fatal: out of data"]) == "fatal: out of data"
    assert error_line([*TF_START, "step 3"]) == ""  # the cuInit error is no failure of the job


def test_startup_noise_is_folded_until_the_tasks_own_first_line() -> None:
    fold = StartupFold()
    kept = [line for line in FAILED if not fold.noise(line)]
    assert kept[0] == "epoch 1 of 3" and fold.folded == len(TF_START)
    assert kept[-1].startswith("E0000")  # after the task's own output, a C++ log line may be the news
    assert without_startup(["step 1", "", "step 2"]) == ["step 1", "", "step 2"]


def test_the_root_cause_leads_with_the_tasks_exception() -> None:
    cause = RootCause("worker-1", 0, 1, "exit code 1", 0.0,
                      "worker-1 failed (exit code 1); restart policy 'never' does not retry it", FAILED[-20:])
    assert cause.error == "ValueError: bad label 11 (labels are 0..9)"
    assert cause.headline() == "worker-1: ValueError: bad label 11 (labels are 0..9) (exit code 1)"
    bare = RootCause("worker-1", 0, None, "hung: no output for 10s", 0.0, "gave up", ["step 3"])
    assert bare.headline() == "worker-1: hung: no output for 10s: gave up"
    why = "killed for memory: over its 512 MiB limit (resources.memory)"
    lost = RootCause("worker-0", 0, -9, why, 0.0, "gave up", [f"tfdist: worker-0 lost: {why}"])
    assert lost.headline() == f"worker-0: tfdist: worker-0 lost: {why}"  # the reason once, not twice
    said = RootCause("worker-1", 0, 1, "exit code 1", 0.0,
                     "worker-1 failed (exit code 1); restart policy 'never' does not retry it", ["step 3"])
    assert said.headline() == "worker-1: exit code 1: restart policy 'never' does not retry it"
    spent = RootCause("ps-0", 2, 1, "exit code 1", 0.0,
                      "ps-0 failed (exit code 1) and the restart budget is used up (2 of 2)", [])
    assert spent.headline() == "ps-0: exit code 1: the restart budget is used up (2 of 2)"


def test_the_terminal_folds_tensorflows_start_and_the_log_keeps_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import io

    from tfdist.supervisor.logs import TaskLogs

    for verbose in (False, True):
        out = io.StringIO()
        logs = TaskLogs(tmp_path / str(verbose), stream=out, fold=not verbose)
        logs.register(["worker-0"])
        for attempt in (0, 1):
            logs.attempt("worker-0", attempt)
            for text in FAILED:
                logs.line("worker-0", text)
        shown = out.getvalue()
        kept = (tmp_path / str(verbose) / "logs" / "worker-0.log").read_text()
        assert all(kept.count(text) == 2 for text in TF_START if text)  # the log keeps every line
        if verbose:
            assert all(shown.count(text) == 2 for text in TF_START if text)
        else:
            assert "oneDNN" not in shown and "cuInit" not in shown and "I0000" not in shown
            assert shown.count("[worker-0] epoch 1 of 3") == 2 and shown.count("ValueError: bad label") == 2
            assert shown.count("folded away") == 1 and "--verbose shows them" in shown


BS = "\x08" * 79
#: What tf_keras's fit(verbose=1) writes into a pipe for one epoch (it redraws even there),
#: with a step report of tfdist's and the script's own print() landing on the bar's line.
TF_KERAS_EPOCH = ("\r1/3 [=========>....................] - ETA: 0s - loss: 0.5000 - acc: 1.0000e-04" + BS
                  + "\r2/3 [===================>..........] - ETA: 0s - loss: 0.3750 - acc: 1.0000e-04"
                  + 'TFDIST_PROGRESS {"step": 2, "loss": 0.375}\n' + BS
                  + "\r3/3 [==============================] - 0s 796us/step - loss: 0.3056 - acc: 1.0000e-04"
                  + "saving 3 files\n")
#: The same from Keras 3 (colours, a bar of ━) and the verbose=2 lines of both.
KERAS3_LINE = ("\r\x1b[1m1/3\x1b[0m \x1b[32m━━━━━━\x1b[0m\x1b[37m━━━━━━━━━━━━━━\x1b[0m \x1b[1m0s\x1b[0m 9us/step"
               " - loss: 0.5000" + BS + "\r\x1b[1m3/3\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m\x1b[37m\x1b[0m "
               "\x1b[1m0s\x1b[0m 76us/step - loss: 0.1667 - val_loss: nan")
VERBOSE_2 = ["3/3 - 0s - loss: 0.3056 - acc: 1.0000e-04 - 12us/epoch - 4us/step",
             # whole seconds: "10s/epoch" is one field, not "10s" and a stray "/epoch - 1s/step"
             "7/7 - 10s - loss: 1.9524 - val_accuracy: 0.8357 - 10s/epoch - 1s/step",
             "3/3 - 0s - 2us/step - loss: 0.1667 - acc: 1.0000e-04", "      7/Unknown 1s 3ms/step - loss: 0.2"]


def test_keras_progress_is_found_and_the_scripts_own_text_kept() -> None:
    from tfdist.backends.base import Output, Progress, line_events
    from tfdist.supervisor.output import keras_progress

    first, second = TF_KERAS_EPOCH.split("\n")[:2]
    events = line_events("worker-0", 0, 1.0, first)  # the step report is split off the bar
    assert [type(e) for e in events] == [Output, Progress] and events[1].data == {"step": 2, "loss": 0.375}
    assert isinstance(events[0], Output) and events[0].line.endswith("acc: 1.0000e-04")
    found = keras_progress(events[0].line)
    assert found is not None and found.rest == ()
    assert found.last == "2/3 [===================>..........] - ETA: 0s - loss: 0.3750 - acc: 1.0000e-04"
    found = keras_progress(second)
    assert found is not None and found.rest == ("saving 3 files",)
    assert found.last == "3/3 [==============================] - 0s 796us/step - loss: 0.3056 - acc: 1.0000e-04"
    found = keras_progress(KERAS3_LINE)
    assert found is not None and found.last == "3/3 ━━━━━━━━━━━━━━━━━━━━ 0s 76us/step - loss: 0.1667 - val_loss: nan"
    assert found.done and not keras_progress(first.split(BS)[0]).done  # type: ignore[union-attr]
    assert [keras_progress(line) for line in VERBOSE_2] == [type(found)(line.strip(), (), "Unknown" not in line)
                                                             for line in VERBOSE_2]
    assert keras_progress("Epoch 2/3") == type(found)("Epoch 2/3", (), False)
    # a line cut for its length (a bar without a report for 64 KiB) is cut before a redraw
    from tfdist.node.procs import redraw_cut

    long = TF_KERAS_EPOCH.split("TFDIST")[0].encode()
    assert long[:redraw_cut(long)].endswith(b"acc: 1.0000e-04") and long[redraw_cut(long):].lstrip(b"\x08").startswith(b"\r2/3")
    assert redraw_cut(b"x" * 10) == 10 and redraw_cut(b"\rx" * 5) == 8 and redraw_cut(b"\x08\rx") == 3
    # the task's own words, a report's prefix inside them and a count alone are not Keras's
    for line in ["epoch 1 of 3", "3/10 files staged", "Traceback (most recent call last):", "\rloading 3/10",
                 "ValueError: bad label 11 (labels are 0..9)", 'saw TFDIST_PROGRESS {"step": 1}']:
        assert keras_progress(line) is None
        assert [type(e) for e in line_events("worker-0", 0, 1.0, line)] == [Output]


def test_the_terminal_folds_keras_bars_and_shows_the_scripts_lines(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import io

    from tfdist.backends.base import Output, line_events
    from tfdist.supervisor.logs import TaskLogs

    lines = ["script: start", "Epoch 1/3", *TF_KERAS_EPOCH.split("\n")[:2], KERAS3_LINE, *VERBOSE_2,
             "Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
             "ValueError: bad label 11 (labels are 0..9)"]
    for verbose in (False, True):
        out = io.StringIO()
        logs = TaskLogs(tmp_path / str(verbose), stream=out, fold=not verbose)
        logs.register(["worker-0", "worker-1"], "worker-0")
        for name in ("worker-0", "worker-1"):
            logs.attempt(name, 0)
            for line in lines:
                for event in line_events(name, 0, 1.0, line):
                    if isinstance(event, Output):
                        logs.line(name, event.line)
                    else:
                        logs.reported(name)
        shown = out.getvalue()
        for name in ("worker-0", "worker-1"):
            kept = (tmp_path / str(verbose) / "logs" / f"{name}.log").read_text()
            assert kept.count("[=====") == 3 and "━" in kept and all(line in kept for line in VERBOSE_2)
            for line in ("script: start", "Traceback (most recent call last):",
                         '  File "train.py", line 9, in <module>', "ValueError: bad label 11 (labels are 0..9)"):
                assert f"[{name}] {line}\n" in shown
            assert ("saving 3 files\n" if verbose else f"[{name}] saving 3 files\n") in shown  # glued: as written
        if verbose:
            assert shown.count("[=====") == 6 and "\x08" in shown and "Epoch 1/3" in shown
            continue
        assert "\r" not in shown and "\x08" not in shown and "━" not in shown and "[=====" not in shown
        assert "Epoch 1/3" not in shown and "7/Unknown" not in shown and "TFDIST_PROGRESS" not in shown
        assert shown.count("Keras progress bars are folded away") == 1 and "--verbose shows them" in shown

    # a script without tfdist.runtime sends no reports: the reference task's bar is the job's
    # progress, shown as its state at each epoch's end; the other tasks' are folded
    out = io.StringIO()
    logs = TaskLogs(tmp_path / "plain", stream=out)
    logs.register(["worker-0", "worker-1"], "worker-0")
    for name in ("worker-0", "worker-1"):
        for line in ("Epoch 1/3", TF_KERAS_EPOCH.split("\n")[1]):
            logs.line(name, line)
    assert out.getvalue().splitlines() == [
        "tfdist: Keras progress bars are folded away: tfdist shows the job's progress as "
        "one line (each task's log keeps the bars; --verbose shows them)",
        "[worker-0] 3/3 [==============================] - 0s 796us/step - loss: 0.3056 - acc: 1.0000e-04",
        "[worker-0] saving 3 files", "[worker-1] saving 3 files"]
