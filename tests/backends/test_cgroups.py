"""The pure parts of per-task cgroups (tfdist.node.cgroups): choosing cgroup v1 or v2 from the
mounts, the files a group's limits are written to, the kernel's counters, a refusal that
leaves nothing behind and names the field, and the root cause of a memory kill."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tfdist.backends import local
from tfdist.errors import SpecError
from tfdist.jobspec import load
from tfdist.node import cgroups
from tfdist.node.procs import TaskProcess
from tfdist.states import describe_memory_kill, size_text

HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
proc /proc proc rw 0 0
"""
UNIFIED = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"
COMOUNTED = "cgroup /sys/fs/cgroup/cpu\\040acct cgroup rw,cpu,cpuacct 0 0\ncgroup /m cgroup rw,memory 0 0\n"


def test_hybrid_machine_uses_v1_where_the_controllers_are() -> None:
    mounts = cgroups.parse_mounts(HYBRID)
    assert [m[0] for m in mounts] == ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/memory",
                                      "/sys/fs/cgroup/unified"]
    layout = cgroups.choose(mounts, {"/sys/fs/cgroup/unified": set()}, ["memory", "cpu"])
    assert layout == cgroups.Layout(1, {"memory": "/sys/fs/cgroup/memory", "cpu": "/sys/fs/cgroup/cpu"})
    assert layout.hierarchies() == ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/memory"]


def test_v2_wins_when_the_unified_hierarchy_has_every_controller() -> None:
    layout = cgroups.choose(cgroups.parse_mounts(HYBRID), {"/sys/fs/cgroup/unified": {"memory", "cpu", "io"}},
                            ["memory", "cpu"])
    assert layout == cgroups.Layout(2, {"memory": "/sys/fs/cgroup/unified", "cpu": "/sys/fs/cgroup/unified"})
    only = cgroups.choose(cgroups.parse_mounts(UNIFIED), {"/sys/fs/cgroup": {"memory"}}, ["memory"])
    assert only.version == 2 and only.hierarchies() == ["/sys/fs/cgroup"]


def test_a_missing_controller_is_named() -> None:
    with pytest.raises(cgroups.CgroupError, match="no 'cpu' cgroup controller"):
        cgroups.choose(cgroups.parse_mounts(UNIFIED), {"/sys/fs/cgroup": {"memory"}}, ["memory", "cpu"])
    with pytest.raises(cgroups.CgroupError, match="no 'memory'"):
        cgroups.choose([], {}, ["memory"])
    split = "cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\ncgroup2 /u cgroup2 rw 0 0\n"
    with pytest.raises(cgroups.CgroupError, match="'memory' controller is in cgroup v2 and the others in v1"):
        cgroups.choose(cgroups.parse_mounts(split), {"/u": {"memory"}}, ["memory", "cpu"])


def test_comounted_v1_and_escaped_mount_points() -> None:
    layout = cgroups.choose(cgroups.parse_mounts(COMOUNTED), {}, ["cpu", "memory"])
    assert layout.roots == {"cpu": "/sys/fs/cgroup/cpu acct", "memory": "/m"}


def test_limit_files_v1_and_v2() -> None:
    limits = cgroups.Limits(memory=200 << 20, cpus=0.5)
    assert cgroups.limit_files(1, limits, swap=True) == [
        ("memory", "memory.limit_in_bytes", str(200 << 20)),
        ("memory", "memory.memsw.limit_in_bytes", str(200 << 20)),  # after the memory limit: never below it
        ("cpu", "cpu.cfs_period_us", "100000"), ("cpu", "cpu.cfs_quota_us", "50000"),
    ]
    assert cgroups.limit_files(1, cgroups.Limits(memory=1 << 30), swap=False) == [
        ("memory", "memory.limit_in_bytes", str(1 << 30))]
    assert cgroups.limit_files(2, limits, swap=True) == [
        ("memory", "memory.max", str(200 << 20)), ("memory", "memory.swap.max", "0"),
        ("cpu", "cpu.max", "50000 100000"),
    ]
    assert cgroups.limit_files(2, cgroups.Limits(memory=1 << 30), swap=False) == [
        ("memory", "memory.max", str(1 << 30))]
    assert cgroups.quota_us(0.001) == cgroups.MIN_QUOTA_US and cgroups.quota_us(2) == 200_000
    assert cgroups.Limits().controllers() == () and not cgroups.Limits().wanted


def test_counters_of_v1_and_v2() -> None:
    assert cgroups.counter("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "oom_kill") == 2
    assert cgroups.counter("low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n", "oom_kill") == 1
    assert cgroups.counter("oom_kill_disable 0\nunder_oom 0\n", "oom_kill") is None  # before Linux 4.13


def test_owner_tags_tell_a_live_owner_from_a_dead_one() -> None:
    assert cgroups.owner_alive(cgroups.owner_tag() + "-job-abc")
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert not cgroups.owner_alive(f"{dead.pid}.1-job-abc")
    assert not cgroups.owner_alive("junk")
    pid, start = cgroups.owner_tag().split(".")
    assert not cgroups.owner_alive(f"{pid}.{int(start) + 1}-job")  # the pid, reused by another process


def test_a_refused_group_leaves_nothing_behind(tmp_path: Path) -> None:
    """A directory that is no cgroup has no limit files: the write fails and the new group goes."""
    groups = cgroups.JobGroups(cgroups.Layout(1, {"memory": str(tmp_path)}), "job-1")
    with pytest.raises(OSError) as err:
        groups.create("worker-0", cgroups.Limits(memory=1 << 20))
    assert err.value.filename.endswith("memory.limit_in_bytes")
    job_dir = Path(groups.dirs[str(tmp_path)])
    assert job_dir.is_dir() and list(job_dir.iterdir()) == []
    assert groups.close() and not job_dir.exists()


def test_refusal_names_the_field_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = load.from_dict({"name": "a", "command": ["x"],
                          "roles": {"chief": {"resources": {"cpus": 1}},
                                    "worker": {"replicas": 2, "resources": {"memory": "1Gi"}}}}, "t")
    limits = local.role_limits(job)
    assert limits == {"chief": cgroups.Limits(cpus=1.0), "worker": cgroups.Limits(memory=1 << 30)}
    monkeypatch.setattr(cgroups, "detect", lambda wanted: cgroups.Layout(1, {c: str(tmp_path) for c in wanted}))
    with pytest.raises(SpecError) as err:
        local.prepare_limits(limits, "a-1")
    message = str(err.value)
    assert message.startswith("roles.chief.resources.cpus: cannot be enforced here: the kernel refused"), message
    assert "cpu.cfs_period_us" in message and "\n" not in message
    assert list(Path(tmp_path, cgroups.BASE).iterdir()) == []  # nothing half-made stays

    def missing(wanted: list[str]) -> cgroups.Layout:
        raise cgroups.CgroupError("the kernel offers no 'memory' cgroup controller here")

    monkeypatch.setattr(cgroups, "detect", missing)
    with pytest.raises(SpecError, match=r"^roles\.chief\.resources\.cpus: cannot be enforced here: the kernel offers"):
        local.prepare_limits(limits, "a-1")


class FakeGroup:
    def __init__(self, kills: int) -> None:
        self.oom_kills = kills


@pytest.mark.parametrize(("kills", "code", "memory_kill"), [(1, -9, True), (0, -9, False), (1, 0, False)])
def test_an_exit_is_a_memory_kill_only_when_the_kernel_counted_one(kills: int, code: int, memory_kill: bool) -> None:
    report = local._ExitReport("worker-0", 0, cgroups.Limits(memory=200 << 20))
    report.know(FakeGroup(kills))  # type: ignore[arg-type]
    event = report.exited(code, 1.0)
    assert (event.exit_code, event.reason is not None) == (code, memory_kill)
    if memory_kill:
        assert event.reason == describe_memory_kill(200 << 20)


def test_the_root_cause_of_a_memory_kill_reads_as_one_line() -> None:
    text = describe_memory_kill(200 << 20)
    assert text.startswith("killed for memory: over its 200 MiB limit (resources.memory)")
    assert "shard them over parameter servers (strategy: parameter_server)" in text and "\n" not in text
    assert "over its memory limit" in describe_memory_kill(None)
    assert [size_text(n) for n in (300, 4 << 30, 3 << 29, 1536)] == ["300 bytes", "4 GiB", "1.5 GiB", "1.5 KiB"]


def test_a_process_that_cannot_enter_its_group_never_runs(tmp_path: Path) -> None:
    """The child's write into cgroup.procs fails (here: /dev/full): the start fails, both for
    the check before the job and for a task, and the program never ran."""
    (tmp_path / "cgroup.procs").symlink_to("/dev/full")
    group = cgroups.TaskGroup(1, {"memory": str(tmp_path)}, cgroups.Limits(memory=1 << 20))
    with pytest.raises(OSError) as err:
        local._enter(group)
    assert err.value.filename.endswith("cgroup.procs") and "could not enter" in str(err.value)
    marker = tmp_path / "ran"
    with pytest.raises(OSError, match="could not enter its cgroup"):
        TaskProcess(["touch", str(marker)], {"PATH": os.environ["PATH"]}, None, token="t/worker-0",
                    on_lines=lambda lines, when: None, on_exit=lambda code, when: None,
                    setpriv=None, cgroup=group)
    assert not marker.exists()
