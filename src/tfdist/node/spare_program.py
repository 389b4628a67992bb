"""The program a warm spare runs: import what the task will need, wait, then become the task.

Started by :mod:`tfdist.node.spares` exactly as the task itself would be (its session,
process group, parent-death signal, netguard preload, output pipe and environment), as
``python spare_program.py SCRIPT_DIR MODULE...``. It imports TensorFlow and the script's
installed imports, prints :data:`READY`, and blocks reading one JSON line on stdin: the
task's ``argv`` (``[script, args...]``, or ``["-m", module, args...]``), ``cwd`` and
``env``. Then it points stdin at /dev/null, replaces its environment (``os.environ`` updates
the C environment too, so TensorFlow's getenv sees the new values; TF_CONFIG is read when a
cluster resolver is made, after this), changes directory and runs the script as ``__main__``
with :mod:`runpy`, so its exit code and traceback are what ``python script.py`` gives. A
handover with ``leave`` (a MultiWorkerMirrored chief or worker) runs the script through
:mod:`tfdist.node.leave_program` instead, from its file or its text, as a cold start would.

Standard library only until the preloads: it must run in any job's interpreter. End of file
on stdin (the launcher closed the pipe, or died) exits quietly.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import runpy
import sys

#: The line a spare prints once its imports are done: what it printed before is import noise.
READY = "TFDIST_SPARE_READY"
#: Variables the launcher sets on the process itself, kept from the spare's own environment.
KEEP = ("TFDIST_PROC_TOKEN", "TFDIST_PARENT_PID")


def _installed(name: str, script_dir: str) -> bool:
    """Is ``name`` importable from outside the script's directory (an installed package, not
    a module of the job's own, whose import could have effects the script orders itself)?"""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin:  # missing, or a namespace package (could be the job's)
        return False
    if spec.origin in ("built-in", "frozen"):
        return True
    return not os.path.abspath(spec.origin).startswith(os.path.abspath(script_dir) + os.sep)


def preload(names: list[str], script_dir: str) -> None:
    for name in names:
        if _installed(name, script_dir):
            with contextlib.suppress(Exception):  # the script imports it (and fails) itself
                importlib.import_module(name)


def become(handover: dict[str, object]) -> None:
    """Turn into the task described by ``handover`` and run it."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    env = handover["env"]
    assert isinstance(env, dict)
    kept = {k: os.environ[k] for k in KEEP if k in os.environ}
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    os.environ.update(kept)
    os.chdir(str(handover["cwd"]))
    argv = [str(a) for a in handover["argv"]]  # type: ignore[attr-defined]
    leave = handover.get("leave")
    if isinstance(leave, dict):  # a MultiWorkerMirrored chief/worker: tfdist.node.leave_program
        leave_with_peers(leave, argv)
        return
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def leave_with_peers(leave: dict[str, object], argv: list[str]) -> None:
    """Run the task as ``python LEAVE_PROGRAM SECONDS ARGV`` would, in this process: the leave
    program (from its file, or its text) runs the script, then waits for the task's peers
    and exits (SystemExit) with the script's code."""
    args = [f"{float(str(leave['seconds'])):g}", *argv]
    program = leave.get("file")
    if program:
        sys.argv = [str(program), *args]
        runpy.run_path(str(program), run_name="__main__")
    else:
        sys.argv = ["-c", *args]
        code = compile(str(leave["source"]), "<string>", "exec")
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102 - tfdist's own program


def main() -> None:
    script_dir = sys.argv[1]
    sys.path[0] = script_dir  # not this file's directory (tfdist/backends: ray/, spark/, ...)
    preload(sys.argv[2:], script_dir)
    print(READY, flush=True)
    line = sys.stdin.readline()
    if not line.strip():
        os._exit(0)  # the launcher is done with this spare
    handover = json.loads(line)
    del sys.argv[:]
    become(handover)


if __name__ == "__main__":
    main()
