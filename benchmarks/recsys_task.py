"""Put this task into the benchmark's cgroups, then exec the training command.

benchmarks/recsys.py runs every task of a job as
``python recsys_task.py [--slow TASK --cpu-dir D --cpuacct-dir A] [--memory-mb M --memory-parent P] -- python train.py ...``:
the task named ``--slow`` (``worker-1``) joins the CPU cgroup D, whose CFS quota the
launcher set, and the cpuacct cgroup A, whose usage it reads after the run; with
``--memory-mb`` every task makes a memory cgroup of its own under P with that limit and
joins it. Joining happens here, before TensorFlow starts a thread, so every thread of the
task is inside; ``exec`` keeps the pid tfdist watches. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def task_name() -> str:
    task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
    return f"{task.get('type', 'task')}-{task.get('index', 0)}"


def main() -> None:
    if "--" not in sys.argv:
        sys.exit("recsys_task.py: error: give the command after --")
    cut = sys.argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow")
    parser.add_argument("--cpu-dir")
    parser.add_argument("--cpuacct-dir")
    parser.add_argument("--memory-mb", type=int)
    parser.add_argument("--memory-parent")
    args = parser.parse_args(sys.argv[1:cut])
    command = sys.argv[cut + 1 :]
    if not command:
        sys.exit("recsys_task.py: error: no command after --")
    name = task_name()
    pid = str(os.getpid())
    if args.slow == name:
        for directory in (args.cpu_dir, args.cpuacct_dir):
            if directory:
                (Path(directory) / "cgroup.procs").write_text(pid)
        print(f"recsys_task: {name} (pid {pid}) joined {args.cpu_dir}", flush=True)
    if args.memory_mb:
        mine = Path(args.memory_parent or "") / f"{name}-{pid}"
        mine.mkdir()
        (mine / "memory.limit_in_bytes").write_text(str(args.memory_mb << 20))
        (mine / "cgroup.procs").write_text(pid)
        print(f"recsys_task: {name} (pid {pid}) limited to {args.memory_mb} MiB", flush=True)
    if command[0] == "python":
        command[0] = sys.executable
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
