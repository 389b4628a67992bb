"""Labels, compare and resubmit in a real headless Chromium against a real ``tfdist ui`` and
real (tiny) jobs: two runs ticked on the jobs list and compared (curves of both, the diff of
their specs), the list filtered by a label, and a run resubmitted from its page."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import tfdist
from tests.ui.conftest import screenshot
from tfdist.jobs.store import Store

pytestmark = pytest.mark.browser
HERE = Path(__file__).parent


def _run(tmp_path: Path, name: str, label: str, epochs: int, gain: str) -> None:
    proc = tfdist("run", "-q", "--runs-dir", str(tmp_path / "runs"), "--workers", "1", "--name", name,
                  "--label", label, "--", sys.executable, str(HERE / "epochs_task.py"), str(epochs), gain)
    assert proc.returncode == 0, proc.stderr


def test_compare_two_runs_filter_by_label_and_resubmit(tmp_path: Path, ui, page) -> None:  # type: ignore[no-untyped-def]
    _run(tmp_path, "cmp-a", "team=vision", 4, "1")
    _run(tmp_path, "cmp-b", "team=nlp", 6, "2")
    ids = {j.name: j.id for j in Store().jobs()}
    page.goto(ui.url)
    rows = page.locator("table.jobs tbody tr")
    assert rows.count() == 2
    text = rows.all_inner_texts()
    assert "team=nlp" in text[0] and "epoch 6/6" in text[0] and "team=vision" in text[1]

    # compare: tick both rows, the compare page draws both runs' curves and diffs the specs
    for job_id in ids.values():
        page.check(f"input[name=jobs][value='{job_id}']")
    page.click("#compare-button")
    page.wait_for_url("**/compare?**")
    names = "(document.getElementById('chart-loss').data || []).map(t => t.name).join(' ')"
    page.wait_for_function(f"() => {names}.includes('{ids['cmp-a']}') && {names}.includes('{ids['cmp-b']}')",
                           timeout=120_000)  # plotly.min.js is 4.6 MB to parse
    assert page.evaluate("() => document.getElementById('chart-accuracy').data.length") == 2
    compared = page.inner_text("#compared")
    assert "epoch 4/4" in compared and "epoch 6/6" in compared and "team=nlp" in compared
    diff = page.inner_text("pre.diff")
    # against the first run ticked (the list is newest first: cmp-b)
    assert "-name: cmp-b" in diff and "+name: cmp-a" in diff and "+  team: vision" in diff
    screenshot(page, "compare.png")

    # labels: a label links to the list filtered by it; the filter box does the same
    page.goto(f"{ui.base}/")
    page.click("table.jobs a.label:text('team=vision')")
    page.wait_for_url("**/?label=team*")
    assert page.locator("table.jobs tbody tr").count() == 1
    assert ids["cmp-a"] in page.inner_text("table.jobs tbody")
    page.fill("input[name=label]", "team=nlp")
    page.click("form.filters button")
    page.wait_for_function("() => document.querySelectorAll('table.jobs tbody tr').length === 1 && "
                           f"document.querySelector('table.jobs tbody').textContent.includes('{ids['cmp-b']}')")

    # resubmit from the job page: a new run of the same spec, shown at once
    page.goto(f"{ui.base}/jobs/{ids['cmp-b']}")
    assert page.inner_text("#epochs") == "epochs 6/6"
    page.click("#resubmit")
    page.wait_for_url(lambda url: "/jobs/" in url and ids["cmp-b"] not in url)
    page.wait_for_function("() => document.querySelector('h1 .state')?.textContent === 'succeeded'",
                           timeout=120_000)
    new_id = page.url.rsplit("/", 1)[1]
    new = Store().job(new_id)
    assert new.name == "cmp-b" and new.labels == {"team": "nlp"} and len(Store().jobs()) == 3
    assert "team=nlp" in page.inner_text("#labels")
