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
