"""What a task's output lines mean to a reader, decided line by line (pure functions, no I/O):
TensorFlow's start-up noise and Keras's progress bars, which the terminal folds away (the
task's log keeps them), and the line that says why a task failed (a Python exception, else
its last error line), which the root cause leads with.

A newcomer reads ``E0000 ... failed call to cuInit`` as the failure; the real one is the
``ValueError`` at the end of the traceback.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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


#: An info line of absl's C++ logging (``I0000 ...`` or ``... I tensorflow/...cc:1]``): never the
#: news, whenever it comes ("Coordination agent has successfully connected").
_CPP_INFO = re.compile(
    r"^\s*I\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w./-]+:\d+\]"
    r"|^\s*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: I [\w./-]+:\d+\]"
)


def is_notice(line: str) -> bool:
    """One of TensorFlow's start-up notices (oneDNN, no CUDA driver, cuInit, ...)."""
    return bool(_NOTICES.search(line))


def is_cpp_log(line: str) -> bool:
    """A line of TensorFlow's (absl's) C++ logging, recognised by its prefix."""
    return bool(_CPP_LOG.match(line))


class StartupFold:
    """Says which lines of one task's output stream are start-up noise: the known notices and
    C++ info lines always, and other C++ log lines until the task's own first line (after
    that, a warning or an error may be the news). Feed it every line in order; a new attempt
    needs a new fold."""

    def __init__(self) -> None:
        self.started = False
        self.folded = 0

    def noise(self, line: str) -> bool:
        if (is_notice(line) or _CPP_INFO.match(line)
                or (not self.started and (is_cpp_log(line) or not line.strip()))):
            self.folded += 1
            return True
        self.started = True
        return False


def without_startup(lines: Iterable[str]) -> list[str]:
    """``lines`` less the start-up noise :class:`StartupFold` finds."""
    fold = StartupFold()
    return [line for line in lines if not fold.noise(line)]


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUMBER = r"(?:-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|-?nan|-?inf)"
#: One field after the count of a Keras bar: ``- ETA: 1s``, ``- 3s`` or ``1s`` (elapsed),
#: ``1:05`` (an ETA), ``121ms/step``, ``3s/epoch``, ``- loss: 0.3056``, ``- acc: 1.0000e-04``.
#: A rate comes before the elapsed ``\d+s``, which would otherwise take the ``10s`` of ``10s/epoch``.
_BAR_FIELD = (rf"(?: -)? (?:ETA: [\d:]+s?|\d+(?::\d\d)+|\d+(?:ms|us|s)/(?:step|epoch|sample)|\d+s"
              rf"|[\w.]+: {_NUMBER})")
#: What ``keras.utils.Progbar`` (tf_keras and Keras 3) draws, colours removed: the count
#: (``3/20`` or ``7/Unknown``), the bar (``[==>...]`` or ``━━━``, none under verbose=2), fields.
_BAR = re.compile(rf"\s*\d+/(?:\d+|Unknown)(?: \[[=>.]*\]| ━+)?(?:{_BAR_FIELD})*\s*")
_EPOCH = re.compile(r"\s*Epoch \d+/\d+\s*$")


@dataclass(frozen=True)
class KerasProgress:
    """A line of output that carries Keras's progress (``fit``'s bar, ``Epoch 2/3``)."""

    #: The last state drawn, as a terminal would leave it: ``20/20 [====] - 3s 121ms/step - loss: 0.86``.
    last: str
    #: The task's own text that came on the same line (a line printed while the bar was
    #: drawn without a newline is glued to it): never folded away.
    rest: tuple[str, ...]
    #: Whether ``last`` is an epoch's end (``20/20``): drawn once an epoch, after the epoch's
    #: progress report of tfdist's when the script sends them.
    done: bool = False


def keras_progress(line: str) -> KerasProgress | None:
    """The Keras progress in ``line``, or None when it has none. Keras redraws its bar with
    backspaces and a carriage return and writes a newline only at the epoch's end, so one
    line may hold every redraw of an epoch, and what the script printed meanwhile."""
    last = ""
    rest: list[str] = []
    for piece in re.split(r"[\r\x08]+", _ANSI.sub("", line)):
        if _EPOCH.match(piece):
            last = piece.strip()
            continue
        bar = _BAR.match(piece)
        if bar is not None and _drew(bar.group()):
            last, piece = bar.group().strip(), piece[bar.end():]
        if piece.strip():
            rest.append(piece.rstrip())
    count = re.match(r"(\d+)/(\d+)\b", last)
    return KerasProgress(last, tuple(rest), bool(count and count[1] == count[2])) if last else None


def _drew(text: str) -> bool:
    """A count with a bar or at least one field: ``3/10`` alone is no Keras bar."""
    return bool(re.search(r"\[|━| - |/(?:step|epoch|sample)|\d+s\b", text.split("/", 1)[1]))


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
