"""What a task's output lines mean to a reader, decided line by line (pure functions, no I/O):
TensorFlow's start-up noise, which the terminal folds away (the task's log keeps it), and
the line that says why a task failed (a Python exception, else its last error line), which
the root cause leads with.

A newcomer reads ``E0000 ... failed call to cuInit`` as the failure; the real one is the
``ValueError`` at the end of the traceback.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

#: TensorFlow's and XLA's start-up notices, whenever they come (they say nothing of the job).
_NOTICES = re.compile(
    r"oneDNN custom operations are on"
    r"|Could not find cuda drivers on your machine"
    r"|failed call to cuInit"
    r"|Unable to register cu(DNN|FFT|BLAS) factory"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
    r"|rebuild TensorFlow with the appropriate compiler flags"
    r"|TF-TRT Warning: Could not find TensorRT"
    r"|All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|computation placer already registered"
    r"|cuda_diagnostics"
    r"|kernel driver does not appear to be running on this host"
    r"|no NVIDIA GPU device is present"
    r"|retrieving CUDA diagnostic information for host"
    r"|hostname: \S+$"
)
#: A line with absl's or TensorFlow's C++ log prefix: ``E0000 00:00:1733.. 123 file.cc:1] ...``
#: or ``2024-12-04 17:13:21.123456: I tensorflow/core/...cc:153] ...``.
_CPP_LOG = re.compile(
    r"^\s*[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w./-]+:\d+\]"
    r"|^\s*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] [\w./-]+:\d+\]"
)


def is_notice(line: str) -> bool:
    """One of TensorFlow's start-up notices (oneDNN, no CUDA driver, cuInit, ...)."""
    return bool(_NOTICES.search(line))


def is_cpp_log(line: str) -> bool:
    """A line of TensorFlow's (absl's) C++ logging, recognised by its prefix."""
    return bool(_CPP_LOG.match(line))


class StartupFold:
    """Says which lines of one task's output stream are start-up noise: the known notices
    always, and C++ log lines until the task's own first line (after that, such a line may
    be the news). Feed it every line in order; a new attempt needs a new fold."""

    def __init__(self) -> None:
        self.started = False
        self.folded = 0

    def noise(self, line: str) -> bool:
        if is_notice(line) or (not self.started and (is_cpp_log(line) or not line.strip())):
            self.folded += 1
            return True
        self.started = True
        return False


def without_startup(lines: Iterable[str]) -> list[str]:
    """``lines`` less the start-up noise :class:`StartupFold` finds."""
    fold = StartupFold()
    return [line for line in lines if not fold.noise(line)]


_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning|Fault)"
                        r"|[a-z_][\w.]*\.[A-Z]\w*)(: .*)?$")
_ERRORISH = re.compile(r"\b(error|exception|fatal|failed|failure|abort(ed)?|killed|panic)\b",
                       re.IGNORECASE)


def error_line(tail: Sequence[str]) -> str:
    """Why a task failed, in its own words: the exception line of its last Python traceback,
    else its last line that reads like an error (TensorFlow's start-up noise aside); "" when
    there is none."""
    lines = [line.rstrip() for line in tail]
    last_tb = max((i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")),
                  default=None)
    if last_tb is not None:
        for line in reversed(lines[last_tb + 1:]):
            if line and not line[0].isspace() and _EXCEPTION.match(line):
                return line.strip()
    for line in reversed(lines):
        if line.strip() and not is_notice(line) and _ERRORISH.search(line):
            return line.strip()
    return ""
