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

from tfdist.cli.parser import build_parser
from tfdist.errors import TfdistError
from tfdist.safe_text import one_line

__all__ = ["entry", "main"]

#: Libraries whose own exit handlers must run: with one of them loaded, :func:`entry` exits
#: the normal way.
FOREIGN = ("ray", "pyspark", "py4j", "kubernetes", "tensorflow", "tensorboard", "matplotlib")


def main(argv: list[str] | None = None) -> int:
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
    except KeyboardInterrupt:
        print("tfdist: interrupted", file=sys.stderr)
        return 130


#: The exit code of a command whose output pipe was closed by its reader, as a program
#: ended by SIGPIPE reports it to the shell (128 + 13); nothing is printed.
CLOSED_PIPE = 141


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
