"""The dashboard in a real headless Chromium against a real ``tfdist ui`` and real jobs:
the jobs list, a failed job's root cause, a live job whose log and curve move while it runs
and that is stopped from the page, a 1,000-task job, and output hostile to a web page."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, tfdist
from tests.ui.conftest import screenshot
from tests.ui.seed import big_job
from tfdist.jobs.store import Store

pytestmark = pytest.mark.browser
HERE = Path(__file__).parent


def _run(tmp_path: Path, *args: str) -> None:
    proc = tfdist("run", "-q", "--runs-dir", str(tmp_path / "runs"), *args)
    assert proc.returncode in (0, 1), proc.stderr


def test_jobs_list_and_a_failed_jobs_root_cause(tmp_path: Path, ui, page) -> None:  # type: ignore[no-untyped-def]
    _run(tmp_path, "--workers", "2", "--name", "fine", "--", sys.executable, str(BIN / "ok.py"))
    _run(tmp_path, "--workers", "2", "--name", "broken", "--", sys.executable, str(BIN / "fail.py"), "3", "worker-1")
    page.goto(ui.url)
    assert "token" not in page.url  # the token moved into a cookie
    rows = page.locator("table.jobs tbody tr")
    assert rows.count() == 2
    text = rows.all_inner_texts()
    assert "fine-" in text[1] and "succeeded" in text[1] and "local" in text[1]
    assert "broken-" in text[0] and "failed" in text[0] and "worker-1: boom: simulated failure (exit code 3)" in text[0]
    page.select_option("select[name=state]", "failed")
    page.click("form.filters button")
    # the filter is a GET form: wait for the filtered page's load, or the count may read the
    # page between documents (it read 0 once in CI)
    page.wait_for_url("**/?state=failed*")
    assert page.locator("table.jobs tbody tr").count() == 1
    screenshot(page, "jobs.png")
    page.click("table.jobs a")
    page.wait_for_selector("#root-cause")
    assert page.inner_text("#root-cause") == "worker-1: boom: simulated failure (exit code 3)"
    assert "boom: simulated failure" in page.inner_text("pre.tail")
    page.select_option("#log-task", "worker-1")
    page.wait_for_function("() => document.getElementById('log-lines').textContent.includes('boom')")
    assert page.inner_text("#log-lines").splitlines()[1] == "worker-1 line 0"  # after tfdist's header
    page.fill("#log-search", "line 2")
    page.press("#log-search", "Enter")
    page.wait_for_selector("#log-hits li")
    assert "6 matching lines" in page.inner_text("#log-hits")  # line 2 and lines 20-24
    screenshot(page, "job-failed.png", full_page=True)


def test_a_live_job_moves_and_is_stopped_from_the_page(tmp_path: Path, ui, page) -> None:  # type: ignore[no-untyped-def]
    proc = tfdist("submit", "--runs-dir", str(tmp_path / "runs"), "--workers", "2", "--name", "live", "--",
                  sys.executable, str(HERE / "live_task.py"))
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.split()[-1]
    page.goto(ui.url)
    page.click(f"a[href='/jobs/{job}']")
    page.wait_for_function("() => document.getElementById('log-lines').textContent.includes('step 3')", timeout=60_000)
    page.wait_for_function("() => document.getElementById('log-lines').textContent.includes('step 12')", timeout=60_000)
    assert "running" in page.inner_text("h1")
    screenshot(page, "job-live.png", full_page=True)
    curves = page.context.new_page()
    curves.goto(f"{ui.base}/jobs/{job}/curves", timeout=120_000)  # plotly.min.js is 4.6 MB to parse
    count = "(document.getElementById('chart-loss').data?.[0]?.x.length || 0)"
    curves.wait_for_function(f"() => {count} > 2", timeout=30_000)
    first = curves.evaluate(f"() => {count}")
    curves.wait_for_function(f"() => {count} > {first + 3}", timeout=30_000)  # redrawn as reports arrive
    curves.wait_for_function("() => document.getElementById('stragglers').textContent.includes('worker-1')")
    assert "(straggler)" in " ".join(curves.evaluate(
        "() => document.getElementById('chart-loss').data.map(t => t.name)"))
    # a line, not dots: no gap in any trace's values
    assert curves.evaluate("() => document.getElementById('chart-loss').data.every("
                           "t => t.mode.includes('lines') && t.y.every(v => v !== null))")
    screenshot(curves, "curves.png")
    curves.close()
    page.click("#stop")
    page.wait_for_function("() => document.querySelector('h1 .state')?.textContent === 'stopped'", timeout=60_000)
    assert Store().job(job).state.value == "stopped"
    assert page.locator("#stop").count() == 0


def test_a_1000_task_jobs_page(ui, page) -> None:  # type: ignore[no-untyped-def]
    big_job(Store(), 1000)
    started = time.monotonic()
    page.goto(f"{ui.url}")
    page.goto(f"{ui.base}/jobs/big-job")
    took = time.monotonic() - started
    assert "worker: 1000 succeeded" in page.inner_text("ul.counts")
    assert page.locator("table.tasks tbody tr").all_inner_texts()[0].split()[:4] == ["worker-3", "succeeded", "1", "1"]
    # above 200 tasks the timeline draws the tasks worth a look: worker-3's two attempts
    assert page.locator("svg.timeline rect").count() == 2
    assert "worker-3 attempt 0: failed" in page.locator("svg.timeline rect title").nth(0).text_content()
    assert "999 tasks that ran once without trouble are not drawn" in page.inner_text("main")
    # an ended job that has no resource samples: said so, and no empty charts (a CSS display
    # rule once outranked their hidden attribute)
    page.wait_for_function("() => document.getElementById('usage-info').textContent !== ''")
    assert page.inner_text("#usage-info") == "no samples: the tasks ended before the first one was taken"
    assert page.locator("#usage-cpu").is_hidden() and page.locator("#usage-memory").is_hidden()
    screenshot(page, "job-1000.png")
    with page.expect_navigation():
        page.click("#all-tasks")
    page.wait_for_load_state("load")
    assert page.locator("table.tasks tbody tr").count() == 1000
    print(f"1,000-task job page in {took:.2f}s")


def test_hostile_output_cannot_break_or_script_the_page(tmp_path: Path, ui, page) -> None:  # type: ignore[no-untyped-def]
    _run(tmp_path, "--workers", "1", "--name", "hostile", "--", sys.executable, str(HERE / "hostile_task.py"))
    [job] = Store().jobs()
    page.goto(ui.url)
    page.goto(f"{ui.base}/jobs/{job.id}")
    pwned = "() => window.__pwned"
    page.wait_for_function("() => document.getElementById('log-lines').textContent.includes('after the long line')")
    shown = page.inner_text("#log-lines")
    assert "</pre><script>window.__pwned = 3</script>" in shown and page.evaluate(pwned) is None
    assert "<script>window.__pwned = 3</script>" in page.inner_text("pre.tail")  # the root cause's lines
    page.click("#log-older")  # the 64 KiB before: inside the 10 MB line
    page.wait_for_function("() => document.getElementById('log-lines').textContent.includes('more characters')")
    shown = page.inner_text("#log-lines")
    assert re.search(r"^A{4000} … \[[\d,]+ more characters\]\n+after the long line", shown, re.M)
    assert len(shown) < 200_000  # the 10 MB line is never sent whole
    page.fill("#log-search", "pwned")
    page.press("#log-search", "Enter")
    page.wait_for_selector("#log-hits li")
    hits = page.inner_text("#log-hits")
    assert "<script>window.__pwned = 1</script><img src=x onerror=" in hits and "2 matching lines" in hits
    page.locator("#log-hits li").first.click()  # the log from the first line: markup, escapes, bad bytes
    page.wait_for_function("() => document.getElementById('log-lines').textContent.startsWith('<script>')")
    shown = page.inner_text("#log-lines")
    first, second, third = shown.splitlines()[:3]
    assert first.startswith("<script>window.__pwned = 1</script><img")
    assert "\x1b" not in second and second.split() == ["red", "cleared"]
    assert "\ufffd" in third and "nul:\\x00 end" in third
    assert page.evaluate(pwned) is None
    assert page.locator("main script, main img").count() == 0
    screenshot(page, "job-hostile.png", "#log")


def test_resource_charts_move_while_a_job_runs_and_a_task_near_its_limit_is_flagged(
        tmp_path: Path, ui, page) -> None:  # type: ignore[no-untyped-def]
    job_file = tmp_path / "job.yaml"
    job_file.write_text(f"""name: memory
command: ["{sys.executable}", "{HERE / 'memory_task.py'}"]
roles:
  worker:
    replicas: 1
    command: ["{sys.executable}", "{HERE / 'memory_task.py'}", "92"]
    resources: {{memory: 100Mi}}
  chief:
    replicas: 1
    command: ["{sys.executable}", "{HERE / 'memory_task.py'}", "8"]
""")
    proc = tfdist("submit", "--runs-dir", str(tmp_path / "runs"), str(job_file),
                  env={"TFDIST_USAGE_INTERVAL": "0.3"})
    if "cannot be enforced here" in proc.stderr:
        pytest.skip(f"memory limits need cgroups this machine does not delegate: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.split()[-1]
    page.goto(ui.url)
    page.goto(f"{ui.base}/jobs/{job}")
    points = "(+document.getElementById('usage-memory').dataset.points || 0)"
    page.wait_for_function(f"() => {points} > 2", timeout=60_000)
    first = page.evaluate(f"() => {points}")
    page.wait_for_function(f"() => {points} > {first + 3}", timeout=60_000)  # it moves
    tasks = page.evaluate("() => [...document.querySelectorAll('#usage-memory polyline')].map(p => p.dataset.task)")
    assert sorted(tasks) == ["chief-0", "worker-0"]
    assert page.locator("#usage-memory line.limit-line").count() == 1  # worker-0's 100 MiB
    assert "memory limit 100 MiB" in page.locator("#usage-memory line.limit-line title").text_content()
    assert page.locator("#usage-cpu polyline").count() == 2
    page.wait_for_selector("#usage-hosts td")
    assert "127.0.0.1" in page.inner_text("#usage-hosts")
    page.wait_for_selector("#near-limit", timeout=60_000)  # 92 MiB and the interpreter of 100 MiB
    assert "worker-0" in page.inner_text("#near-limit") and "chief-0" not in page.inner_text("#near-limit")
    assert "near limit" in page.inner_text("table.tasks")
    screenshot(page, "job-resources.png", "#resources")
    run_dir = Path(Store().job(job).run_dir or "")
    (run_dir / "go").touch()
    page.wait_for_function("() => document.querySelector('h1 .state')?.textContent === 'succeeded'",
                           timeout=60_000)
    assert Store().job(job).state.value == "succeeded"


def test_a_jobs_data_section_names_each_tasks_files_as_text(tmp_path: Path, ui, page) -> None:  # type: ignore[no-untyped-def]
    """A real local job with a small data section of real files, one named with markup, a
    terminal escape and a newline: the job page's Data section names each worker's own files
    (count, bytes, first names) and its staging; the name is text and nothing runs."""
    data = tmp_path / "clicks"
    data.mkdir()
    hostile = "<img src=x onerror=window.__pwned=1>\x1b[31m\nred"
    for i, name in enumerate([*(f"part-{k}" for k in range(7)), hostile]):
        (data / name).write_bytes(b"r" * (1000 * (i + 1)))
    job_file = tmp_path / "job.yaml"
    job_file.write_text(f"""name: data
command: ["{sys.executable}", "-c", "print('trained')"]
roles: {{worker: 2}}
data:
  train: {{uris: ["{data}/*"], shard: file, mode: stage}}
""")
    _run(tmp_path, str(job_file))
    [job] = Store().jobs()
    page.goto(ui.url)
    page.goto(f"{ui.base}/jobs/{job.id}")
    page.wait_for_selector("#data-tasks td")
    inputs = page.inner_text("table.data-inputs")
    assert "train" in inputs and "8" in inputs and "36.0 KB" in inputs
    rows = {r.split("\t")[0]: r for r in page.locator("#data-tasks tbody tr").all_inner_texts()}
    assert set(rows) == {"worker-0", "worker-1"}
    w0 = rows["worker-0"]
    assert "train 4 files, 18.0 KB: <img src=x onerror=window.__pwned=1>\\x1b[31m\\nred, part-0, part-3 and 1 more" in w0
    assert "staged in " in w0 and "(copied 4 of 4 files)" in w0
    assert "train 4 files, 18.0 KB: part-1, part-2, part-5 and 1 more" in rows["worker-1"]
    assert page.evaluate("() => window.__pwned") is None and page.locator("main img").count() == 0
    screenshot(page, "job-data.png", "#data")
