"""The dashboard with a big history: 10,000 jobs and a 1,000-task job (with 256 resource
samples per task, the most the store keeps, and a data section: 10 input files a task) in
the store.

For SQLite and PostgreSQL (a real server: Debian's initdb in a temporary directory, as the
tests start it), a real ``tfdist ui`` serves the jobs page and the 1,000-task job's page;
reported are the median time to the first byte and to the whole response (raw HTTP on
loopback, alternating the two stores' servers), and the time until headless Chromium has
the page loaded. Goals: under 200 ms to the first byte of the jobs page, under 1 s to a
rendered job page. Then the log view's memory: the server's resident size after tail,
range and search requests on a 10 MB and on a 1 GB log (goal: no growth with the size).

    python benchmarks/ui.py [--jobs 10000] [--tasks 1000] [--runs 7] [--log-gb 1]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]


def fetch(base: str, token: str, path: str) -> tuple[float, float, int]:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    start = time.perf_counter()
    conn.request("GET", path, headers={"Authorization": f"token {token}"})
    resp = conn.getresponse()
    first = time.perf_counter() - start
    body = resp.read()
    whole = time.perf_counter() - start
    conn.close()
    assert resp.status == 200, (path, resp.status, body[:200])
    return first, whole, len(body)


def seed(where: str, jobs: int, tasks: int) -> None:
    from tests.ui.seed import big_job, job_inputs, many_jobs, usage_samples
    from tfdist.jobs.store import Store

    store = Store(where)
    many_jobs(store, jobs)
    big_job(store, tasks)
    usage_samples(store, "big-job", tasks)
    job_inputs(store, "big-job", tasks)  # the page's data section: 10 files a task
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--log-gb", type=float, default=1.0)
    args = parser.parse_args()
    from tests.postgres_server import running_server, unavailable
    from tests.ui.conftest import CHROMIUM_ARGS, start_ui

    home = Path(tempfile.mkdtemp(prefix="tfdist-bench-ui-"))
    os.environ["TFDIST_HOME"] = str(home)
    with contextlib.ExitStack() as stack:
        stores = {"sqlite": str(home / "jobs.db")}
        why = unavailable()
        if why is None:
            server = stack.enter_context(running_server())
            stores["postgresql"] = server.create_database("bench")
        else:
            print(f"PostgreSQL skipped: {why}")
        uis = {}
        for kind, where in stores.items():
            t = time.perf_counter()
            seed(where, args.jobs, args.tasks)
            print(f"{kind}: stored {args.jobs:,} jobs and a {args.tasks:,}-task job in {time.perf_counter() - t:.1f}s")
            ui = start_ui({"TFDIST_STORE": where})
            stack.callback(ui.proc.kill)
            uis[kind] = ui
        pages = {"jobs page": "/", "job page (1,000 tasks)": "/jobs/big-job",
                 "jobs page, filtered": "/?state=failed&user=bob",
                 "job page, all 1,000 rows": "/jobs/big-job?tasks=all",
                 "job's resource data": "/api/jobs/big-job/usage"}
        results: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
        for ui in uis.values():  # warm: the first request opens the store and templates
            for path in pages.values():
                fetch(ui.base, ui.token, path)
        for _ in range(args.runs):
            for label, path in pages.items():
                for kind, ui in uis.items():
                    results.setdefault((kind, label), []).append(fetch(ui.base, ui.token, path))
        print(f"\n{'store':<11} {'page':<24} {'first byte':>11} {'whole':>9} {'size':>9}   (median of {args.runs})")
        for (kind, label), rows in results.items():
            first = statistics.median(r[0] for r in rows) * 1000
            whole = statistics.median(r[1] for r in rows) * 1000
            print(f"{kind:<11} {label:<24} {first:>8.0f} ms {whole:>6.0f} ms {rows[0][2] / 1024:>6.0f} KiB")
        from playwright.sync_api import sync_playwright

        profile = tempfile.mkdtemp(prefix="tfdist-bench-chromium-")
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(profile, executable_path=shutil.which("chromium"),
                                                       headless=True, args=CHROMIUM_ARGS)
            page = ctx.new_page()
            times: dict[tuple[str, str], list[float]] = {}
            for ui in uis.values():
                page.goto(ui.url)
            for _ in range(max(3, args.runs // 2)):
                for label, path in list(pages.items())[:2]:
                    for kind, ui in uis.items():
                        ctx.clear_cookies()
                        page.goto(ui.url)
                        t = time.perf_counter()
                        page.goto(ui.base + path, wait_until="load")
                        times.setdefault((kind, label), []).append(time.perf_counter() - t)
                        if path == "/jobs/big-job":  # and until its resource charts are drawn
                            page.wait_for_function("() => +document.getElementById('usage-memory')"
                                                   ".dataset.points > 0", timeout=60_000)
                            times.setdefault((kind, "job page, charts drawn"), []).append(
                                time.perf_counter() - t)
            ctx.close()
        shutil.rmtree(profile, ignore_errors=True)
        print(f"\n{'store':<11} {'page':<24} {'loaded in Chromium':>19}")
        for (kind, label), ts in times.items():
            print(f"{kind:<11} {label:<24} {statistics.median(ts) * 1000:>16.0f} ms")
        log_memory(uis["sqlite"], home, args.log_gb)
    shutil.rmtree(home, ignore_errors=True)


def log_memory(ui, home: Path, gigabytes: float) -> None:  # type: ignore[no-untyped-def]
    """Resident size of the server after reading a small and a huge log the same ways."""
    import psutil

    from tfdist import runs
    from tfdist.jobs.store import Store, op_task_transition
    from tfdist.states import JobState, TaskState
    from tfdist.supervisor.status import TaskStatus

    store = Store(home / "jobs.db")
    block = b"".join(b"%08d some training output, loss 0.1234, step 99\n" % i for i in range(20_000))
    sizes = {"10 MB": 10 * 1024 * 1024, f"{gigabytes:g} GB": int(gigabytes * 1024**3)}
    proc = psutil.Process(ui.proc.pid)
    print(f"\nlog view memory (the server's RSS; started at {proc.memory_info().rss / 1e6:.0f} MB)")
    for label, size in sizes.items():
        run_dir = runs.new_run_dir(f"log-{label.split()[0]}", home / "runs")
        (run_dir / runs.LOGS).mkdir()
        with open(run_dir / runs.LOGS / "worker-0.log", "wb") as f:
            written = 0
            while written < size:
                f.write(block)
                written += len(block)
        job = run_dir.name
        store.create_job(job, name="log", run_dir=str(run_dir), backend="local", state=JobState.SUCCEEDED)
        store.write("update", op_task_transition(job, TaskStatus("worker-0", "worker", 0, TaskState.SUCCEEDED), 1.0))
        t = time.perf_counter()
        tail = fetch(ui.base, ui.token, f"/jobs/{job}/logs/worker-0")[1]
        for k in range(20):
            fetch(ui.base, ui.token, f"/jobs/{job}/logs/worker-0?start={k * (written // 20)}&length=65536")
        ranges = time.perf_counter() - t
        t = time.perf_counter()
        fetch(ui.base, ui.token, f"/jobs/{job}/logs/worker-0/search?q=00019999")
        search = time.perf_counter() - t
        print(f"  {label:>6} log: RSS {proc.memory_info().rss / 1e6:.0f} MB after the tail "
              f"({tail * 1000:.0f} ms), 20 ranges ({ranges * 1000:.0f} ms) and a search "
              f"({search:.1f} s, stops at 200 matches or 5 s)")
        (run_dir / runs.LOGS / "worker-0.log").unlink()
    store.close()


if __name__ == "__main__":
    main()
