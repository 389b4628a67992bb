"""benchmarks/suite_profile.py's reading of process accounting records (pure parts)."""

from __future__ import annotations

import struct

from benchmarks.suite_profile import Ended, kind_of, read_acct


def _record(name: bytes, started: int, elapsed_s: float, utime: int, stime: int, version: int = 3) -> bytes:
    """One ``struct acct_v3``: flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime,
    then the comp_t utime, stime, mem, io, rw, minflt, majflt, swaps, and the name."""
    return struct.pack("<BBHIIIIIIfHHHHHHHH16s", 0, version, 0, 0, 0, 0, 42, 1, started,
                       elapsed_s * 100, utime, stime, 0, 0, 0, 0, 0, 0, name)


def test_records_are_read_with_their_cpu_and_a_record_of_another_version_is_skipped() -> None:
    # comp_t: 13-bit mantissa, base-8 exponent in the top 3 bits, in 1/100 s:
    # 450 ticks = 4.5 s; (1 << 13) | 100 = 100 * 8 ticks = 8 s
    data = (_record(b"python3", 1000, 12.5, 450, 0) + _record(b"java", 1001, 2.0, (1 << 13) | 100, 50)
            + _record(b"old", 1002, 1.0, 1, 1, version=2))
    assert read_acct(data) == [Ended("python3", 1000.0, 12.5, 4.5), Ended("java", 1001.0, 2.0, 8.5)]


def test_kinds_by_name_and_cost() -> None:
    assert kind_of(Ended("python3", 0, 9, 4.9)) == "TensorFlow tasks"
    assert kind_of(Ended("tf_Compute", 0, 9, 6.0)) == "TensorFlow tasks"  # a TF thread ended last
    assert kind_of(Ended("python", 0, 1, 0.3)) == "other Python"
    assert kind_of(Ended("C1 CompilerThre", 0, 9, 3.0)) == "JVMs"
    assert kind_of(Ended("kube-apiserver", 0, 9, 40.0)) == "Kubernetes"
    assert kind_of(Ended("bash", 0, 1, 0.0)) == "other"
