"""Per-job Python environments: what a cold build costs, and what a cached one adds to a job.

1. Cold build: ``ensure`` of a new environment (six + idna pinned) in an empty cache, with
   uv's download cache empty and then warm (another job with other pins of the same
   packages); its size next to the size of tfdist's own environment.
2. Warm reuse: ``tfdist run`` of a one-task job whose task imports tfdist.runtime, with the
   cached environment against the same job in tfdist's own environment; median of N
   alternating runs. Goal: <= 0.1 s extra.

    python benchmarks/envs.py [--runs 7] [--json]

Needs the package index (it installs real packages).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tfdist.pyenv.cache import tree_size

PY = sys.executable
TFDIST = [PY, "-m", "tfdist.cli"]


def job(tmp: Path, name: str, pins: list[str] | None) -> Path:
    path = tmp / f"{name}.yaml"
    spec = {"name": name, "strategy": "none", "roles": {"worker": 1},
            "command": ["python", "-c", "import tfdist.runtime, six; print(six.__version__)"]}
    if pins:
        spec["python"] = {"requirements": pins}
    path.write_text(json.dumps(spec))
    return path


CPU: list[float] = []  # CPU seconds (user + sys, the command and its children) of the last timed()


def timed(cmd: list[str], env: dict[str, str]) -> float:
    """Wall seconds of ``cmd``; its CPU seconds go to CPU (less disturbed by a loaded machine)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = dict(os.environ, TFDIST_HOME=str(tmp / "home"), UV_CACHE_DIR=str(tmp / "uv-cache"))
        ensure = [PY, "-c", "import sys; from tfdist.pyenv.build import ensure; from tfdist.jobspec import load; "
                  "ensure(load.from_file(sys.argv[1]))"]
        out["cold_build_empty_download_cache_s"] = round(timed([*ensure, str(job(tmp, "a", ["six==1.16.0", "idna==3.6"]))], env), 2)
        out["cold_build_warm_download_cache_s"] = round(
            timed([*ensure, str(job(tmp, "b", ["six==1.15.0", "idna==3.6"]))], env), 2)
        built = sorted((tmp / "home" / "envs").glob("*/tfdist-env.json"))
        out["env_size_mb"] = round(tree_size(built[0].parent) / 1e6, 2)
        out["tfdist_env_size_mb"] = round(tree_size(Path(sys.prefix)) / 1e6, 1)

        cached, plain = job(tmp, "c", ["six==1.16.0", "idna==3.6"]), job(tmp, "d", None)
        run = [*TFDIST, "run", "--quiet", "--runs-dir", str(tmp / "runs")]
        timed([*run, str(cached)], env)  # warm the page cache for both
        timed([*run, str(plain)], env)
        with_env, without, cpu_env, cpu_own = [], [], [], []
        for _ in range(args.runs):
            with_env.append(timed([*run, str(cached)], env))
            cpu_env.append(CPU[-1])
            without.append(timed([*run, str(plain)], env))
            cpu_own.append(CPU[-1])
        out["run_cpu_extra_s"] = round(statistics.median(cpu_env) - statistics.median(cpu_own), 3)
        out["run_with_cached_env_s"] = round(statistics.median(with_env), 3)
        out["run_in_tfdist_env_s"] = round(statistics.median(without), 3)
        out["warm_reuse_extra_s"] = round(statistics.median(with_env) - statistics.median(without), 3)
        out["runs"] = args.runs
        # the two parts of that difference, measured apart (less noise than whole runs)
        probe = [PY, "-c", "import sys, time; from tfdist.pyenv.build import ensure; from tfdist.jobspec import load; "
                 "j = load.from_file(sys.argv[1]); "
                 "ensure(j, open('/dev/null', 'w')); t = time.perf_counter(); "
                 "[ensure(j, open('/dev/null', 'w')) for _ in range(20)]; "
                 "print((time.perf_counter() - t) / 20)", str(cached)]
        out["ensure_cached_ms"] = round(1000 * float(subprocess.run(probe, env=env, capture_output=True, text=True,
                                                                    check=True).stdout), 2)
        job_python = built[0].parent / "bin" / "python"
        task = ["-c", "import tfdist.runtime, six"]
        starts_env, starts_own = [], []
        for _ in range(args.runs):
            timed([str(job_python), *task], env)
            starts_env.append(CPU[-1])
            timed([PY, *task], env)
            starts_own.append(CPU[-1])
        out["task_start_job_env_s"] = round(statistics.median(starts_env), 3)
        out["task_start_tfdist_env_s"] = round(statistics.median(starts_own), 3)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"cold build, empty download cache : {out['cold_build_empty_download_cache_s']} s")
    print(f"cold build, warm download cache  : {out['cold_build_warm_download_cache_s']} s")
    print(f"job environment size             : {out['env_size_mb']} MB (tfdist's own: {out['tfdist_env_size_mb']} MB)")
    print(f"tfdist run, cached job env       : {out['run_with_cached_env_s']} s (median of {args.runs})")
    print(f"tfdist run, tfdist's own env     : {out['run_in_tfdist_env_s']} s")
    print(f"extra for the job env            : {out['warm_reuse_extra_s']} s wall, "
          f"{out['run_cpu_extra_s']} s CPU (goal <= 0.1 s)")
    print(f"  of which: ensure() on a hit    : {out['ensure_cached_ms']} ms")
    print(f"  task start CPU, job / own env  : {out['task_start_job_env_s']} s / {out['task_start_tfdist_env_s']} s")


if __name__ == "__main__":
    main()
