"""Keep PROCESSES cores busy (default 2) for SECONDS, then print one JSON line: the CPU seconds
they used and this process's cpu cgroup's ``cpu.stat`` (cgroup v1 or v2), as the kernel
counted them.

A quota is only seen at work when the group wants more than it: on a busy shared machine
the group (with its parent groups, each one scheduling entity of default weight) may never
get half a core. So, for the length of the spin, the group and its parents get the highest
weight (``cpu.shares``/``cpu.weight``; needs root, restored at the end) and two spinners:
the group then asks for more than its quota, and only the quota can hold it back."""
import json
import os
import sys
import time


def cpu_group():
    """(directory, version) of this process's cpu cgroup, and the hierarchy's root."""
    with open("/proc/self/mounts") as handle:
        mounts = [line.split() for line in handle]
    with open("/proc/self/cgroup") as handle:
        memberships = handle.read().splitlines()
    for line in memberships:
        _, controllers, path = line.split(":", 2)
        for fields in mounts:
            v1 = fields[2] == "cgroup" and "cpu" in controllers.split(",") and "cpu" in fields[3].split(",")
            v2 = fields[2] == "cgroup2" and controllers == ""
            directory = fields[1] + path
            if (v1 or v2) and os.path.exists(os.path.join(directory, "cpu.max" if v2 else "cpu.cfs_quota_us")):
                return directory, 2 if v2 else 1, fields[1]
    return None, 0, None


def boost(directory, version, root):
    """Highest weight for the group and its parents below ``root``; returns what to restore."""
    name, top = ("cpu.weight", "10000") if version == 2 else ("cpu.shares", "262144")
    saved = []
    while directory and os.path.normpath(directory) != os.path.normpath(root):
        path = os.path.join(directory, name)
        with open(path) as handle:
            saved.append((path, handle.read().strip()))
        with open(path, "w") as handle:
            handle.write(top)
        directory = os.path.dirname(directory)
    return saved


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


seconds = float(sys.argv[1])
group, version, root = cpu_group()
saved = boost(group, version, root) if group else []
children = []
for _ in range(int(sys.argv[2]) - 1 if len(sys.argv) > 2 else 1):
    pid = os.fork()
    if pid == 0:
        spin(seconds)
        os._exit(0)
    children.append(pid)
spin(seconds)
for pid in children:
    os.waitpid(pid, 0)
for path, value in saved:
    with open(path, "w") as handle:
        handle.write(value)
stat = {}
if group:
    with open(os.path.join(group, "cpu.stat")) as handle:
        stat = {k: int(v) for k, v in (row.split() for row in handle)}
    stat["v"] = version
times = os.times()
used = times.user + times.system + times.children_user + times.children_system
print(json.dumps({"cpu_seconds": used, "stat": stat}), flush=True)
