"""The task of the warm-spare tests. Every attempt prints what it sees (as one JSON line:
whether TensorFlow was imported before this script ran, TF_CONFIG as TensorFlow's resolver
reads it, the restart count as Python and as C's getenv see it, argv, cwd, pid, cgroups).

``--tf`` imports ``tfdist.runtime`` then TensorFlow (and reads TF_CONFIG through its resolver),
and says how many objects the collector has frozen (tfdist.node.import_gc). On attempt 0 it
waits until its own spare exists (a process running spare_program.py with this task's
process token), then does what ``--first`` says: ``fail`` (exit 1), ``kill-spare`` (SIGKILL
the spare, wait for it to go, exit 1) or ``hang`` (print the spare's pid, sleep). A later
attempt returns at once, or with ``--then hang`` reports progress every half second until it
is killed (so its own next spare is made).

Under an agent (Spark, YARN) each attempt has its own process token (``.../<attempt>``) and
the spare ``.../spare``; on the local backend the spare carries the task's own.
"""

from __future__ import annotations

import sys

PRE_IMPORTED = "tensorflow" in sys.modules

import argparse  # noqa: E402
import ctypes  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402


def spare_pid() -> int | None:
    token = os.environ["TFDIST_PROC_TOKEN"]
    marks = [f"TFDIST_PROC_TOKEN={token}".encode(), f"TFDIST_PROC_TOKEN={token.rsplit('/', 1)[0]}/spare".encode()]
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if b"spare_program.py" in cmdline and any(mark in environ for mark in marks):  # its text under -c
            return pid
    return None


def memory_group() -> tuple[list[str], str | None]:
    """This process's cgroups (``/proc/self/cgroup``), and the memory limit of its memory
    cgroup as the kernel holds it (v1 ``memory.limit_in_bytes``, v2 ``memory.max``)."""
    with open("/proc/self/cgroup") as handle:
        lines = handle.read().splitlines()
    with open("/proc/self/mounts") as handle:
        mounts = [line.split() for line in handle]
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for fields in mounts:
            if fields[2] == "cgroup" and "memory" in controllers.split(",") and "memory" in fields[3].split(","):
                name = "memory.limit_in_bytes"
            elif fields[2] == "cgroup2" and controllers == "":
                name = "memory.max"
            else:
                continue
            try:
                with open(os.path.join(fields[1] + path, name)) as handle:
                    return lines, handle.read().strip()
            except OSError:
                continue
    return lines, None


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tf", action="store_true")
    parser.add_argument("--first", default="fail")
    parser.add_argument("--then", default="return")
    args = parser.parse_args()
    seen = {"pre_imported": PRE_IMPORTED, "argv": sys.argv, "cwd": os.getcwd(), "pid": os.getpid(),
            "name": __name__, "restart_count": os.environ.get("TFDIST_RESTART_COUNT")}
    with open("/proc/self/maps") as maps:  # the netguard bind interposer, if it is loaded
        seen["interposer"] = sorted({line.split()[-1] for line in maps
                                     if "loopback_bind" in line or "loopback-bind" in line})
    seen["cgroups"], seen["memory_limit"] = memory_group()
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    seen["c_restart_count"] = (libc.getenv(b"TFDIST_RESTART_COUNT") or b"").decode()
    if args.tf:
        import gc  # noqa: I001  (tfdist.runtime before tensorflow, on purpose)

        from tfdist import runtime  # noqa: F401  # first, as a training script: TensorFlow's import frozen
        import tensorflow as tf

        seen["frozen"] = gc.get_freeze_count()  # by this import, or by the spare's (spares.imports_of)
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        seen["tf_task"] = [resolver.task_type, resolver.task_id]
        seen["tf_cluster"] = resolver.cluster_spec().as_dict()
    print("SEEN " + json.dumps(seen), flush=True)
    if seen["restart_count"] != "0":
        while args.then == "hang":
            print('TFDIST_PROGRESS {"step": 2}', flush=True)
            time.sleep(0.5)
        return
    print('TFDIST_PROGRESS {"step": 1}', flush=True)  # training runs: the spare is made now
    deadline = time.monotonic() + 120
    while (pid := spare_pid()) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"SPARE {pid}", flush=True)
    if args.first == "kill-spare" and pid:
        os.kill(pid, signal.SIGKILL)
        while running(pid):
            time.sleep(0.02)
        time.sleep(0.5)
    elif args.first == "hang":
        time.sleep(600)
    sys.exit(1)


if __name__ == "__main__":
    main()
