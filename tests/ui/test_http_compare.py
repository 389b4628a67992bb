"""The dashboard's routes for labels, resubmit and compare (Starlette's test client on the
real app): resubmit is a POST with the page's token exactly as stop is, compare shows the
chosen runs' curves box and the diff of their specs, and the jobs list filters by label."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.ui.seed import many_jobs
from tfdist import runs
from tfdist.jobs.location import location
from tfdist.jobs.store import Store, op_job_finished, op_task_progress, op_task_transition
from tfdist.states import JobState, TaskState
from tfdist.supervisor.status import TaskStatus
from tfdist.ui.app import create_app

TOKEN = "t0ken-for-tests"
SPEC = "name: {name}\ncommand:\n- python\n- -c\n- pass\nworkdir: {workdir}\nlabels:\n  team: vision\nroles:\n  worker:\n    replicas: {n}\n"


def _client(**kw):  # type: ignore[no-untyped-def]
    from starlette.testclient import TestClient

    return TestClient(create_app(location(), TOKEN, stop=lambda s, j: None, **kw),
                      base_url="http://127.0.0.1:8470")


def _stored(tmp_path: Path, name: str, workers: int = 1, labels: dict | None = None) -> str:
    run_dir = runs.new_run_dir(name, tmp_path / "runs")
    (run_dir / runs.JOB_FILE).write_text(SPEC.format(name=name, workdir=tmp_path, n=workers))
    store = Store()
    job_id = store.create_job(name, name=name, run_dir=str(run_dir), backend="local",
                              state=JobState.SUCCEEDED, max_restarts=2, labels=labels)
    store.write("update", op_task_transition(job_id, TaskStatus("worker-0", "worker", 0, TaskState.SUCCEEDED,
                                                                 exit_code=0), 1.0))
    store.close()
    return job_id


def test_resubmit_is_a_post_with_the_pages_token(tmp_path: Path) -> None:
    job_id = _stored(tmp_path, "again")
    asked: list[tuple[str, str]] = []

    def resubmit(job, spec):  # type: ignore[no-untyped-def]
        asked.append((job.id, spec))
        return "again-2"

    with _client(resubmit=resubmit) as c:
        # no token at all: refused before the route (like stop)
        assert c.post(f"/jobs/{job_id}/resubmit", data={"token": TOKEN}).status_code == 403
        c.headers["Authorization"] = f"token {TOKEN}"
        assert c.get(f"/jobs/{job_id}/resubmit").status_code == 405  # never a GET
        page = c.get(f"/jobs/{job_id}").text
        assert f'action="/jobs/{job_id}/resubmit"' in page and f'name="token" value="{TOKEN}"' in page
        assert c.post(f"/jobs/{job_id}/resubmit", data={"token": "forged"}).status_code == 403
        assert c.post(f"/jobs/{job_id}/resubmit", data={}).status_code == 403
        big = c.post(f"/jobs/{job_id}/resubmit", content=b"token=" + b"x" * 10_000,
                     headers={"content-type": "application/x-www-form-urlencoded"})
        assert big.status_code == 413
        assert c.post("/jobs/nope/resubmit", data={"token": TOKEN}).status_code == 404
        assert c.post(f"/jobs/{job_id}%00/resubmit", data={"token": TOKEN}).status_code == 404
        assert asked == []  # nothing refused was acted on
        r = c.post(f"/jobs/{job_id}/resubmit", data={"token": TOKEN}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/jobs/again-2"
    assert [a[0] for a in asked] == [job_id] and "replicas: 1" in asked[0][1]


def test_resubmit_submits_the_stored_spec_again(tmp_path: Path) -> None:
    """The real resubmit: a new detached job from the stored job.yaml, same labels, in the
    same runs directory; a spec that is gone is a 400 page, nothing started."""
    job_id = _stored(tmp_path, "real", workers=2, labels={"team": "vision"})
    with _client() as c:
        c.headers["Authorization"] = f"token {TOKEN}"
        r = c.post(f"/jobs/{job_id}/resubmit", data={"token": TOKEN}, follow_redirects=False)
        assert r.status_code == 303, r.text
        new_id = r.headers["location"].removeprefix("/jobs/")
        assert new_id != job_id
        store = Store()
        deadline = time.monotonic() + 120
        while store.job(new_id).state.active and time.monotonic() < deadline:
            time.sleep(0.2)
        new = store.job(new_id)
        assert new.state is JobState.SUCCEEDED and new.labels == {"team": "vision"}
        assert Path(new.run_dir or "").parent == tmp_path / "runs"
        assert len(store.tasks(new_id)) == 2
        (Path(new.run_dir or "") / runs.JOB_FILE).unlink()
        gone = c.post(f"/jobs/{new_id}/resubmit", data={"token": TOKEN}, follow_redirects=False)
        assert gone.status_code == 400 and "no stored spec" in gone.text
        assert len(store.jobs()) == 2
        store.close()


def test_compare_shows_the_runs_and_the_diff_of_their_specs(tmp_path: Path) -> None:
    a = _stored(tmp_path, "cmp-a", workers=1)
    b = _stored(tmp_path, "cmp-b", workers=3)
    with _client() as c:
        assert c.get(f"/compare?jobs={a}&jobs={b}").status_code == 403  # the token, as everywhere
        c.headers["Authorization"] = f"token {TOKEN}"
        page = c.get(f"/compare?jobs={a}&jobs={b}")
        assert page.status_code == 200
        assert f'data-jobs="{a},{b}"' in page.text and "/static/curves.js" in page.text
        assert "-    replicas: 1" in page.text and "+    replicas: 3" in page.text
        assert "-name: cmp-a" in page.text and "+name: cmp-b" in page.text
        assert "+    replicas: 3" in c.get(f"/compare?jobs={a},{b}").text  # a,b means the same
        same = c.get(f"/compare?jobs={a}&jobs={a},{a}")
        assert same.status_code == 200 and "-    replicas" not in same.text
        assert c.get("/compare").status_code == 400
        assert c.get("/compare?jobs=" + ",".join(f"x{i}" for i in range(9))).status_code == 400
        assert c.get(f"/compare?jobs={a}&jobs=nope").status_code == 404
        data = c.get(f"/api/curves?jobs={a},{b}").json()
        assert set(data) == {a, b}
        # the spec's text is escaped, never markup
        run_dir = Path(Store().job(b).run_dir or "")
        (run_dir / runs.JOB_FILE).write_text("name: <script>x</script>\n")
        hostile = c.get(f"/compare?jobs={a}&jobs={b}").text
        assert "<script>x</script>" not in hostile and "&lt;script&gt;x&lt;/script&gt;" in hostile


def test_compare_a_split_list_and_a_missing_spec(tmp_path: Path) -> None:
    a = _stored(tmp_path, "one")
    b = _stored(tmp_path, "two")
    (Path(Store().job(b).run_dir or "") / runs.JOB_FILE).unlink()
    with _client() as c:
        c.headers["Authorization"] = f"token {TOKEN}"
        page = c.get(f"/compare?jobs={a},{b}")
        assert page.status_code == 200 and f"{b}: no job.yaml" in page.text


@pytest.mark.parametrize("query", ["label=bad", "label=te%20am%3Dx", "label=team%3D%00"])
def test_a_bad_label_filter_is_a_400(query: str) -> None:
    with _client() as c:
        c.headers["Authorization"] = f"token {TOKEN}"
        r = c.get(f"/?{query}")
        assert r.status_code == 400 and "label" in r.text


def test_the_jobs_list_filters_by_label_and_shows_the_new_columns(store_kind: str) -> None:
    store = Store()
    many_jobs(store, 20)
    # a running job with progress: epochs, step and accuracy in its row, and its time left
    job_id = store.create_job("live", name="live", run_dir="/nonexistent/live", backend="local",
                              state=JobState.RUNNING, max_restarts=0, labels={"team": "nlp", "exp": "e9"})
    task = TaskStatus("worker-0", "worker", 0, TaskState.RUNNING, started_at=time.time() - 100)
    store.write("update", op_task_transition(job_id, task, time.time() - 100))
    now = time.time()
    for k, epoch in enumerate((1, 2, 3)):
        data = {"epoch": epoch, "epochs": 10, "step": epoch * 50, "loss": 1.0 / epoch,
                "metrics": {"accuracy": 0.5 + epoch / 10}}
        store.write("update", op_task_progress(job_id, "worker-0", 0, now - 30 + 10 * k, data, data))
    with _client() as c:
        c.headers["Authorization"] = f"token {TOKEN}"
        page = c.get("/?label=team%3Dnlp+exp%3De9").text
        assert page.count("<tr class=") == 1 and ">team=nlp<" in page
        assert "epoch 3/10 step 150" in page and "0.8000" in page and "0/0" in page
        vision = c.get("/?label=team%3Dvision").text
        assert vision.count("<tr class=") == 10 and "team=nlp" not in vision
        assert c.get("/?label=team%3DVision").text.count("<tr class=") == 0
        assert c.get("/fragment/jobs?label=exp%3De1").text.count("<tr class=") == 4
        every = c.get("/").text
        assert every.count('type="checkbox" name="jobs"') == 21 and 'form="compare"' in every
        restarts = [cell.split("</td>")[0] for cell in every.split('<td class="restarts">')[1:]]
        assert len(restarts) == 21 and all("/" in r and " of " not in r for r in restarts)
        job_page = c.get(f"/jobs/{job_id}").text
        assert "epochs 3/10" in job_page and "left" in job_page
        assert 'href="/?label=team%3Dnlp"' in job_page
        finished = c.get("/jobs/job-00003").text
        assert "labels" in finished and "left" not in finished
    store.write("update", op_job_finished(job_id, state=JobState.SUCCEEDED, exit_code=0, restarts_used=0,
                                          root_cause=None, metrics={"accuracy": 0.91}, ended_at=time.time()))
    with _client() as c:
        c.headers["Authorization"] = f"token {TOKEN}"
        assert "0.9100" in c.get("/?label=exp%3De9").text
        done = c.get(f"/jobs/{job_id}").text
        assert "epochs 3/10" in done and "left" not in done
    store.close()
