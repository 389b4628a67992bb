"""The ``tfdist`` command: parse, call the library, print.

Expected errors (:class:`~tfdist.errors.TfdistError`) become one line on stderr
(:func:`~tfdist.safe_text.one_line`) and the error's exit code; ``run`` exits 0 (succeeded),
1 (failed), 2 (bad input), 130 (interrupted).
Only the parser is built up front (:mod:`tfdist.cli.parser`, argparse alone); the module of
the command given is imported when it runs, so ``--help`` and ``list`` never pay for what
``run`` needs, nor ``run`` for the job store's commands.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from typing import Any

from tfdist.cli.parser import build_parser
from tfdist.errors import TfdistError
from tfdist.safe_text import one_line

__all__ = ["entry", "main"]

#: Libraries whose own exit handlers must run: with one of them loaded, :func:`entry` exits
#: the normal way.
FOREIGN = ("ray", "pyspark", "py4j", "kubernetes", "tensorflow", "tensorboard", "matplotlib")


def main(argv: list[str] | None = None) -> int:
    out = sys.stdout
    sys.stdout = watched = WatchedOutput(out)  # type: ignore[assignment]
    try:
        return _main(argv, watched)
    finally:
        if sys.stdout is watched:
            sys.stdout = out


def _main(argv: list[str] | None, watched: WatchedOutput) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    try:
        args = build_parser().parse_args(argv)
        module = importlib.import_module(f"tfdist.cli.{args.module}")  # set by the parser
        return getattr(module, f"cmd_{args.cmd}")(args, command)
    except TfdistError as err:
        print(f"tfdist: error: {one_line(str(err))}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:  # `tfdist list | head`: the reader has what it wanted
        return closed_pipe()
    except OSError as err:
        if watched.failed is not err:
            raise
        # `tfdist list > /dev/full`, or a file on a full disk: said once, not a traceback
        closed_pipe()
        print(f"tfdist: error: cannot write the output ({err.strerror or err}); free space or "
              "send it elsewhere", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tfdist: interrupted", file=sys.stderr)
        return 130


#: The exit code of a command whose output pipe was closed by its reader, as a program
#: ended by SIGPIPE reports it to the shell (128 + 13); nothing is printed.
CLOSED_PIPE = 141


class WatchedOutput:
    """Standard output as it was, remembering an OSError of its own writes: an OSError that
    reaches :func:`main` is said in one line only when it is the output's (any other is a
    bug to show whole)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return int(self.stream.write(text))
        except OSError as err:
            self.failed = err
            raise

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as err:
            self.failed = err
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def closed_pipe() -> int:
    """Quiet from here on: what is still buffered for the closed pipe is dropped, so that the
    interpreter's own flush at exit does not report the pipe once more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return CLOSED_PIPE


def entry() -> None:
    """The ``tfdist`` script: :func:`main`, then, when it is safe, exit without the
    interpreter's teardown.

    By then everything tfdist writes is closed or flushed (the run directory's files, the
    job store's writer, the summary); what is left is freeing every module and object one by
    one, ~10-15 ms at the end of every ``tfdist run``. It is skipped only when nothing else
    could need the normal exit: no thread that Python would wait for, and none of the
    libraries that register exit handlers of their own loaded (Ray's shutdown, py4j's
    gateway, the Kubernetes client's pools). ``main`` called in a process that goes on (the
    tests, ``python -m``) returns normally.
    """
    code = main()
    foreign = any(name in sys.modules for name in FOREIGN)
    if foreign or any(not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: nothing more can be said; the code stands
        pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
