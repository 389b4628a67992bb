"""Staging: what copying a task's share costs, against a plain copy of the same files.

1. tfdist.node.staging.prepare of N files (one input, from a local directory) into an empty
   task directory, against ``cp`` of the same files (both timed, alternating, median of
   ``--runs``); the page cache is warm for both (the files were just written), so this is
   the stager's own overhead, not the disk's speed.
2. The same prepare again, every file cached: what a restarted task pays.

From HDFS against ``hdfs dfs -get`` (the issue's figure) needs the real HDFS of the YARN test
cluster and is not measured here yet.

    python benchmarks/staging.py [--files 64] [--mb 4] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tfdist import contract
from tfdist.node import staging


def plan_env(uris: list[str], sizes: list[int]) -> dict[str, str]:
    files = [{"uri": u, "size": s, "rel": u.rstrip("/").rsplit("/", 1)[-1]} for u, s in zip(uris, sizes, strict=True)]
    return {contract.DATA_PLAN: json.dumps({"task": "worker-0", "inputs": [{"name": "train", "files": files}],
                                            "outputs": []})}


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--mb", type=float, default=4.0, help="size of each file")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfdist-staging-bench-"))
    try:
        src = work / "src"
        src.mkdir()
        size = int(args.mb * 1_000_000)
        for i in range(args.files):
            (src / f"part-{i:05d}").write_bytes(os.urandom(size))
        paths = sorted(str(p) for p in src.iterdir())
        sizes = [size] * len(paths)
        total_mb = size * len(paths) / 1e6
        figures: dict[str, object] = {"files": args.files, "mb_each": args.mb, "total_mb": round(total_mb, 1)}
        stage, copy, cached = [], [], []
        for run in range(args.runs):
            dest = work / f"stage-{run}"
            stage.append(timed(lambda d=dest: staging.prepare(plan_env(paths, sizes), str(d), lambda _: None)))
            cached.append(timed(lambda d=dest: staging.prepare(plan_env(paths, sizes), str(d), lambda _: None)))
            target = work / f"cp-{run}"
            target.mkdir()
            copy.append(timed(lambda t=target: subprocess.run(["cp", *paths, str(t)], check=True)))
            shutil.rmtree(dest)
            shutil.rmtree(target)
        figures["stage_s"] = round(statistics.median(stage), 3)
        figures["cp_s"] = round(statistics.median(copy), 3)
        figures["stage_mb_per_s"] = round(total_mb / statistics.median(stage), 1)
        figures["cp_mb_per_s"] = round(total_mb / statistics.median(copy), 1)
        figures["stage_over_cp"] = round(statistics.median(stage) / statistics.median(copy), 2)
        figures["cached_s"] = round(statistics.median(cached), 4)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>20}: {value}")


if __name__ == "__main__":
    sys.exit(main())
