"""Staging: what copying a task's share costs, against a plain copy of the same files.

1. tfdist.node.staging.prepare of N files (one input, from a local directory) into an empty
   task directory, against ``cp`` of the same files (both timed, alternating, median of
   ``--runs``); the page cache is warm for both (the files were just written), so this is
   the stager's own overhead, not the disk's speed.
2. The same prepare again, every file cached: what a restarted task pays.

With ``--hdfs``: the same files put in the real HDFS of the YARN test cluster (``make
yarn-up``; or ``--hdfs hdfs://HOST:PORT`` with ``HADOOP_CONF_DIR``), then staged from there
(WebHDFS, tfdist.node.webhdfs) against ``hdfs dfs -get`` of the same files (Hadoop's
FsShell through ``yarn/yarn.sh dfs``: a JVM's start-up included, measured apart as
``hdfs dfs -ls`` of one directory), alternating, median of ``--runs``.

    python benchmarks/staging.py [--files 64] [--mb 4] [--runs 5] [--hdfs [URL]] [--json]
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
    parser.add_argument("--hdfs", nargs="?", const="test-cluster", help="stage from HDFS (default: the test cluster's)")
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
        if args.hdfs:
            figures.update(from_hdfs(args.hdfs, paths, sizes, total_mb, args.runs, work))
            return output(figures, args.json)
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
    output(figures, args.json)


def output(figures: dict[str, object], as_json: bool) -> None:
    if as_json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>20}: {value}")


def from_hdfs(url: str, paths: list[str], sizes: list[int], total_mb: float, runs: int,
              work: Path) -> dict[str, object]:
    """Staged from HDFS against ``hdfs dfs -get`` of the same files (see the module's doc)."""
    import uuid

    from tfdist.node import stores, webhdfs

    root = Path(__file__).resolve().parents[1]
    if url == "test-cluster":
        url = (root / ".yarn" / "hdfs-url").read_text().strip()
        os.environ.setdefault("HADOOP_CONF_DIR", str(root / ".yarn" / "conf"))
    client, _ = webhdfs.connect(f"{url}/")
    base = f"/tfdist-bench/{uuid.uuid4().hex[:12]}"
    shell = [str(root / "yarn" / "yarn.sh"), "dfs"]
    try:
        for path in paths:
            client.upload(path, f"{base}/{Path(path).name}")
        route = stores.route(f"{url}/")
        routes = dict([route]) if route else {}
        files = [{"uri": f"{url}{base}/{Path(p).name}", "size": s, "rel": Path(p).name}
                 for p, s in zip(paths, sizes, strict=True)]
        stage, get = [], []
        for run in range(runs):
            dest = work / f"hdfs-stage-{run}"
            stage.append(timed(lambda d=dest: staging.stage_input("train", files, str(d), lambda _: None, routes)))
            target = work / f"hdfs-get-{run}"
            target.mkdir()
            get.append(timed(lambda t=target: subprocess.run([*shell, "-get", f"{url}{base}/*", str(t)],
                                                             check=True, capture_output=True)))
            shutil.rmtree(dest)
            shutil.rmtree(target)
        jvm = statistics.median(timed(lambda: subprocess.run([*shell, "-ls", f"{url}{base}"], check=True,
                                                             capture_output=True)) for _ in range(runs))
    finally:
        client.delete(base, recursive=True)
    return {"hdfs_stage_s": round(statistics.median(stage), 3), "hdfs_get_s": round(statistics.median(get), 3),
            "hdfs_ls_s": round(jvm, 3), "hdfs_stage_mb_per_s": round(total_mb / statistics.median(stage), 1),
            "stage_over_get": round(statistics.median(stage) / statistics.median(get), 2),
            "stage_over_get_less_ls": round(statistics.median(stage) / max(1e-9, statistics.median(get) - jvm), 2)}


if __name__ == "__main__":
    sys.exit(main())
