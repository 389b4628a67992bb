"""Staging throughput from HDFS: tfdist's WebHDFS client (``tfdist.node.webhdfs``, one file
after another, as a task stages its share) against ``hdfs dfs -get`` of the same files (Hadoop's
FsShell in one JVM, as a user or a script would run it), in the same run, alternating so drift
in machine load hits both alike. ``hdfs dfs`` is ``yarn/yarn.sh dfs``: ``java -cp CONF:lib/*
org.apache.hadoop.fs.FsShell``, JVM start-up included (its time alone, an ``-test -d``, is
printed too).

Needs the test HDFS (``make yarn-up``). Files of random bytes are written once under
``/tfdist-bench/`` and removed at the end.

    python benchmarks/hdfs_staging.py [--files 8] [--mb 16] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.backends.yarn.hdfs_cluster import Hdfs, why_hdfs_unavailable  # noqa: E402
from tfdist.node import webhdfs  # noqa: E402

BASE = "/tfdist-bench"


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def fsshell(hdfs: Hdfs, *args: str) -> float:
    began = time.monotonic()
    done = hdfs.dfs(*args)
    took = time.monotonic() - began
    if done.returncode != 0:
        sys.exit(f"hdfs dfs {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--mb", type=int, default=16, help="each file's size in MiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    why = why_hdfs_unavailable()
    if why:
        sys.exit(why)
    hdfs = Hdfs()
    client, _ = webhdfs.connect(f"{hdfs.url}/", environ={"HADOOP_CONF_DIR": str(hdfs.conf_dir)})
    total = args.files * args.mb * 1024 * 1024
    rows: dict[str, list[float]] = {"webhdfs": [], "fsshell": [], "fsshell_startup": []}
    loads = [load()]
    with tempfile.TemporaryDirectory(prefix="tfdist-hdfs-bench-") as tmp:
        src = Path(tmp) / "src"
        src.write_bytes(os.urandom(args.mb * 1024 * 1024))
        client.delete(BASE, recursive=True)
        for i in range(args.files):
            client.upload(src, f"{BASE}/part-{i:05d}")
        for r in range(args.rounds):
            order = ["webhdfs", "fsshell"] if r % 2 == 0 else ["fsshell", "webhdfs"]
            for kind in order:
                dest = Path(tmp) / f"{kind}-{r}"
                dest.mkdir()
                if kind == "webhdfs":
                    began = time.monotonic()
                    for path, _ in client.glob(f"{BASE}/part-*"):
                        client.download(path, dest / path.rpartition("/")[2])
                    rows[kind].append(time.monotonic() - began)
                else:
                    rows[kind].append(fsshell(hdfs, "-get", f"{hdfs.url}{BASE}/part-*", str(dest)))
                got = sum(p.stat().st_size for p in dest.iterdir())
                if got != total:
                    sys.exit(f"{kind} staged {got} bytes, not {total}")
                shutil.rmtree(dest)
            rows["fsshell_startup"].append(fsshell(hdfs, "-test", "-d", f"{hdfs.url}{BASE}"))
            loads.append(load())
        client.delete(BASE, recursive=True)
    ratios = [w / f for w, f in zip(rows["webhdfs"], rows["fsshell"], strict=True)]
    result = {
        "files": args.files, "mib_each": args.mb, "rounds": args.rounds,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": loads,
        "seconds": {k: [round(v, 3) for v in vs] for k, vs in rows.items()},
        "median_mib_per_s": {k: round(total / 2**20 / statistics.median(rows[k]), 1) for k in ("webhdfs", "fsshell")},
        "ratio_webhdfs_to_fsshell_time": [round(x, 2) for x in ratios],
        "median_ratio": round(statistics.median(ratios), 2),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.files} files x {args.mb} MiB from {hdfs.url}{BASE}, {args.rounds} rounds, {result['date']}")
    for kind in ("webhdfs", "fsshell", "fsshell_startup"):
        print(f"  {kind:16s} " + "  ".join(f"{v:7.2f}s" for v in rows[kind]))
    print(f"  median throughput: WebHDFS client {result['median_mib_per_s']['webhdfs']} MiB/s, "
          f"hdfs dfs -get {result['median_mib_per_s']['fsshell']} MiB/s")
    print(f"  time ratio WebHDFS / hdfs dfs -get: {result['ratio_webhdfs_to_fsshell_time']} "
          f"(median {result['median_ratio']})")
    print(f"  load (1, 5, 15 min) before and after each round: {loads}")


if __name__ == "__main__":
    main()
