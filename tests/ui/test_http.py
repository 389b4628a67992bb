"""The dashboard's routes without a browser (Starlette's test client on the real app): the
token, the CSRF-safe stop, no file outside a run directory (traversal, symbolic links, a
run directory that is not tfdist's), byte-range reads of a large log, and the jobs page's
filters and pages on both stores."""

from __future__ import annotations

import concurrent.futures
import json
import os
import time
from pathlib import Path

import pytest

from tests.ui.seed import many_jobs
from tfdist import runs
from tfdist.jobs import queries
from tfdist.jobs.location import location
from tfdist.jobs.queries import JobFilter
from tfdist.jobs.store import Store, op_task_progress, op_task_transition
from tfdist.states import JobState, TaskState
from tfdist.supervisor.status import TaskStatus
from tfdist.ui import files
from tfdist.ui.app import create_app

TOKEN = "t0ken-for-tests"


@pytest.fixture
def client():  # type: ignore[no-untyped-def]
    from starlette.testclient import TestClient

    with TestClient(create_app(location(), TOKEN, stop=lambda store, job: None),
                    base_url="http://127.0.0.1:8470") as c:
        yield c


def _authed(client):  # type: ignore[no-untyped-def]
    client.headers["Authorization"] = f"token {TOKEN}"
    return client


def _job_with_log(tmp_path: Path, text: bytes = b"hello\n", name: str = "j") -> Path:
    run_dir = runs.new_run_dir(name, tmp_path / "runs")
    (run_dir / runs.LOGS).mkdir()
    (run_dir / runs.LOGS / "worker-0.log").write_bytes(text)
    store = Store()
    store.create_job(name, name=name, run_dir=str(run_dir), backend="local", state=JobState.SUCCEEDED)
    store.write("update", op_task_transition(name, TaskStatus("worker-0", "worker", 0, TaskState.SUCCEEDED, exit_code=0), 1.0))
    return run_dir


def test_every_route_needs_the_token(tmp_path: Path, client) -> None:  # type: ignore[no-untyped-def]
    _job_with_log(tmp_path)
    for path in ("/", "/jobs/j", "/jobs/j/logs/worker-0", "/jobs/j/logs/worker-0/search?q=h",
                 "/events/jobs", "/api/curves?jobs=j", "/fragment/jobs", "/curves?jobs=j"):
        for headers in ({}, {"Authorization": "token wrong"}, {"Cookie": "tfdist_ui=wrong"}):
            r = client.get(path, headers=headers)
            assert r.status_code == 403 and "hello" not in r.text, (path, headers)
        assert client.get(path + ("&" if "?" in path else "?") + "token=nope").status_code == 403
    r = client.post("/jobs/j/stop", data={"token": TOKEN})  # no cookie: refused before the route
    assert r.status_code == 403
    assert client.get("/static/app.css").status_code == 200  # nothing of the store
    # The token in the URL becomes a strict, HttpOnly cookie and leaves the address bar.
    r = client.get(f"/jobs/j?token={TOKEN}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/jobs/j"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    r = client.get("/jobs/j")
    assert r.status_code == 200 and "j" in r.text
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["cache-control"] == "no-store"


def test_stop_is_a_post_with_the_pages_token(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    stopped: list[str] = []
    store = Store()
    from tfdist.pids import start_time

    store.create_job("run", name="run", run_dir="/r", backend="local", state=JobState.RUNNING,
                     supervisor_pid=os.getpid(), supervisor_start=start_time(os.getpid()))
    app = create_app(location(), TOKEN, stop=lambda s, job: stopped.append(job))
    with TestClient(app, base_url="http://127.0.0.1:8470") as c:
        c.headers["Authorization"] = f"token {TOKEN}"
        assert c.get("/jobs/run/stop").status_code == 405  # never a GET
        page = c.get("/jobs/run").text
        assert f'name="token" value="{TOKEN}"' in page
        assert c.post("/jobs/run/stop", data={"token": "forged"}).status_code == 403
        assert c.post("/jobs/run/stop", data={}).status_code == 403
        r = c.post("/jobs/run/stop", data={"token": TOKEN}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/jobs/run"
    deadline = time.monotonic() + 10
    while not stopped and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stopped == ["run"]


def test_stop_reads_no_more_of_a_body_than_a_form_needs() -> None:
    """A body sent to stop is read only up to the size of a stop form: a client with the
    token cannot make the dashboard hold a body of gigabytes in memory."""
    import anyio

    app = create_app(location(), TOKEN, stop=lambda s, job: None)
    chunk, sent, replies = b"token=" + b"x" * 65_536, [0], []

    async def receive() -> dict:
        sent[0] += 1
        return {"type": "http.request", "body": chunk, "more_body": sent[0] < 10_000}  # 640 MB

    async def send(message: dict) -> None:
        replies.append(message)

    scope = {"type": "http", "method": "POST", "path": "/jobs/run/stop", "raw_path": b"/jobs/run/stop",
             "query_string": b"", "root_path": "", "scheme": "http", "server": ("127.0.0.1", 8470),
             "headers": [(b"authorization", f"token {TOKEN}".encode()), (b"host", b"127.0.0.1:8470"),
                         (b"content-type", b"application/x-www-form-urlencoded")]}
    # in a thread of its own: an event loop an earlier test left marked as running in this
    # thread (seen once in the full suite) would make anyio.run refuse to start
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, app, scope, receive, send).result(timeout=120)
    assert replies[0]["status"] == 413 and sent[0] <= 2


def test_no_route_reads_outside_a_run_directory(tmp_path: Path, client) -> None:  # type: ignore[no-untyped-def]
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-CONTENT\n")
    run_dir = _job_with_log(tmp_path, b"fine\n", name="a")
    c = _authed(client)
    assert c.get("/jobs/a/logs/worker-0").json()["lines"] == ["fine"]
    for task in ("..%2F..%2F..%2Fsecret.txt", "../../secret.txt", "worker-9", "%2Fetc%2Fpasswd",
                 "worker-0.log%00", "%2e%2e", "%2E"):
        r = c.get(f"/jobs/a/logs/{task}")
        assert r.status_code == 404 and "SECRET" not in r.text, task
    # the task replaced its log with a link to another file
    log = run_dir / runs.LOGS / "worker-0.log"
    log.unlink()
    log.symlink_to(secret)
    for path in ("/jobs/a/logs/worker-0", "/jobs/a/logs/worker-0/search?q=SECRET", "/jobs/a/logs/worker-0/follow"):
        r = c.get(path)
        assert r.status_code == 404 and "SECRET" not in r.text, path
    # ... or made logs/ a link to a directory elsewhere
    log.unlink()
    (run_dir / runs.LOGS).rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "worker-0.log").write_text("SECRET-CONTENT\n")
    (run_dir / runs.LOGS).symlink_to(elsewhere, target_is_directory=True)
    r = c.get("/jobs/a/logs/worker-0")
    assert r.status_code == 404 and "SECRET" not in r.text
    (run_dir / runs.JOB_FILE).symlink_to(secret)
    assert "SECRET" not in c.get("/jobs/a").text  # the spec is not followed through a link
    # a record whose run directory is not tfdist's (no marker): nothing is read from it
    plain = tmp_path / "plain"
    (plain / runs.LOGS).mkdir(parents=True)
    (plain / runs.LOGS / "worker-0.log").write_text("SECRET-CONTENT\n")
    store = Store()
    store.create_job("b", name="b", run_dir=str(plain), backend="local", state=JobState.SUCCEEDED)
    store.write("update", op_task_transition("b", TaskStatus("worker-0", "worker", 0, TaskState.SUCCEEDED), 1.0))
    r = c.get("/jobs/b/logs/worker-0")
    assert r.status_code == 404 and "SECRET" not in r.text


def test_a_log_or_spec_that_is_a_fifo_is_refused_not_waited_for(tmp_path: Path, client) -> None:  # type: ignore[no-untyped-def]
    """A task can replace its log (or job.yaml) with a named pipe: opening one for reading
    waits for a writer, so each request would hold a server thread for good (40 of them and
    no page answers). It is refused like any file that is not a regular file."""
    import contextlib
    import threading

    run_dir = _job_with_log(tmp_path)
    fifos = [run_dir / runs.LOGS / "worker-0.log", run_dir / runs.JOB_FILE]
    fifos[0].unlink()
    for fifo in fifos:
        os.mkfifo(fifo)
    c = _authed(client)
    got = {}

    def ask() -> None:
        got["log"] = c.get("/jobs/j/logs/worker-0")
        got["page"] = c.get("/jobs/j")

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    asking.join(10)
    waited = asking.is_alive()
    while asking.is_alive():  # let a blocked open() return, so the test can end
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        asking.join(0.1)
    assert not waited, "a request waited on a named pipe"
    assert got["log"].status_code == 404 and "not a regular file" in got["log"].text
    assert got["page"].status_code == 200 and "not a regular file" in got["page"].text


def test_what_a_task_reports_is_shown_as_short_text(tmp_path: Path, client) -> None:  # type: ignore[no-untyped-def]
    """A progress report and the final metrics are the task's own JSON: any string, up to a
    whole output line. The job page shows them as text (no escape, no NUL) and short."""
    _job_with_log(tmp_path)
    hostile = "<b>x</b>\x1b[31mred\x1b[0m\x00" + "Z" * 60_000
    store = Store()
    store.write("update", op_task_progress("j", "worker-0", 0, 2.0, {"step": 7, "loss": hostile, "epoch": hostile}))
    store.write("update", lambda db: db.execute("UPDATE jobs SET metrics = ? WHERE id = ?",
                                                (json.dumps({"acc\x1b[2J": 0.5, **{f"k{i}": i for i in range(5000)}}), "j")))
    page = _authed(client).get("/jobs/j").text
    assert "step 7 loss &lt;b&gt;x&lt;/b&gt;red" in page and "acc 0.5, k0 0, k1 1" in page
    assert "\x1b" not in page and "\x00" not in page and "<b>x" not in page
    assert "Z" * 1000 not in page and "k4999" not in page and len(page) < 20_000, len(page)


def test_a_large_log_is_read_by_ranges(tmp_path: Path, client) -> None:  # type: ignore[no-untyped-def]
    lines = b"".join(b"line %07d\n" % i for i in range(300_000))  # 3.6 MB
    run_dir = _job_with_log(tmp_path, lines + b"x" * (3 * files.MAX_CHUNK) + b"\nlast\n")
    c = _authed(client)
    tail = c.get("/jobs/j/logs/worker-0").json()
    assert tail["lines"] == ["last"] and tail["end"] == tail["size"]  # the long line is not whole
    older = c.get(f"/jobs/j/logs/worker-0?start={tail['start'] - files.MAX_CHUNK}&length=999999999").json()
    assert older["end"] - older["start"] <= files.MAX_CHUNK and older["cut_before"]
    assert older["lines"][0].endswith("more characters]")
    mid = c.get("/jobs/j/logs/worker-0?start=55&length=100").json()
    assert mid["lines"] == [f"line {i:07d}" for i in range(5, 11)]  # whole lines in bytes 55-155
    found = c.get("/jobs/j/logs/worker-0/search?q=LINE 0299999").json()
    assert [h["line"] for h in found["hits"]] == ["line 0299999"] and found["complete"]
    assert found["hits"][0]["offset"] == 299_999 * 13
    assert c.get("/jobs/j/logs/worker-0?start=abc").status_code == 400
    with open(run_dir / runs.LOGS / "worker-0.log", "ab") as f:
        f.write(b"appended\n")
    assert c.get("/jobs/j/logs/worker-0").json()["lines"][-1] == "appended"


def test_jobs_page_filters_and_pages_in_sql(store_kind: str, client) -> None:  # type: ignore[no-untyped-def]
    store = Store()
    many_jobs(store, 130)
    rows, total = queries.jobs_page(store, JobFilter(), 50, 0)
    assert total == 130 and [r.id for r in rows][:2] == ["job-00129", "job-00128"] and len(rows) == 50
    rows, total = queries.jobs_page(store, JobFilter(), 50, 100)
    assert len(rows) == 30 and rows[-1].id == "job-00000"
    rows, total = queries.jobs_page(store, JobFilter(state=JobState.FAILED, user="BOB"), 50, 0)
    assert total == len(rows) and rows and all(r.state is JobState.FAILED and r.user == "bob" for r in rows)
    assert {i for i in range(130) if i % 4 == 1 and i % 3 == 1} == {int(r.id[4:]) for r in rows}
    rows, total = queries.jobs_page(store, JobFilter(backend="ray", name="train-3"), 50, 0)
    assert rows and all(r.backend == "ray" and "train-3" in r.name for r in rows)
    assert queries.jobs_page(store, JobFilter(name="%"), 50, 0)[1] == 0  # wildcards are literal
    assert queries.jobs_page(store, JobFilter(since=time.time() + 10), 50, 0)[1] == 0
    assert queries.jobs_page(store, JobFilter(state=JobState.RUNNING), 50, 0)[1] == 0
    c = _authed(client)
    page = c.get("/?state=failed&user=bob")
    assert page.status_code == 200 and page.text.count("<tr class=") == total_failed_bob(store)
    assert "ValueError: bad batch" in page.text
    assert c.get("/?page=3").text.count("<tr class=") == 30
    assert c.get("/?state=bogus").status_code == 400
    for key in ("name", "user", "backend"):  # PostgreSQL refuses a NUL in text: said as bad input
        assert c.get(f"/?{key}=a%00b").status_code == 400, key
    assert c.get("/?since=forever").status_code == 400


def test_curves_send_a_bounded_sample_of_many_reports(store_kind: str, client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A long job (or a task printing reports in a loop) has millions of progress reports:
    its curves are a sample, at most ``CURVE_POINTS`` a job and the latest report of every
    task always in it, chosen in SQL, so the response does not grow with the reports."""
    from tfdist.jobs.store import JobRef, op_create_job
    from tfdist.ui import views

    monkeypatch.setattr(views, "CURVE_POINTS", 300, raising=False)
    store = Store()
    ref = JobRef()
    ops = [op_create_job("long", name="long", run_dir="/nonexistent", backend="local",
                         state=JobState.SUCCEEDED, ref=ref)]
    for i in range(3000):
        ops += [op_task_progress(ref, f"worker-{k}", 0, 1000.0 + i, {"step": i, "loss": 1 / (i + 1),
                                                                     "steps_per_sec": 10.0 if k else 2.0})
                for k in range(3)]
    short = JobRef()
    ops += [op_create_job("short", name="short", run_dir="/nonexistent-2", backend="local",
                          state=JobState.SUCCEEDED, ref=short)]
    ops += [op_task_progress(short, "worker-0", 0, 1000.0 + i, {"step": i}) for i in range(20)]
    store.write_batch(ops)
    got = _authed(client).get("/api/curves?jobs=long,short").json()
    assert got["short"]["tasks"]["worker-0"]["step"] == list(range(20))  # a short job: every report
    data = got["long"]
    assert sorted(data["tasks"]) == ["worker-0", "worker-1", "worker-2"]
    for series in data["tasks"].values():
        steps = series["step"]
        assert 50 <= len(steps) <= 100 and steps[-1] == 2999 and steps == sorted(steps), steps
    assert data["stragglers"] == ["worker-0"]  # from each task's latest rate, as before


def total_failed_bob(store: Store) -> int:
    return queries.jobs_page(store, JobFilter(state=JobState.FAILED, user="bob"), 1000, 0)[1]


def test_bad_ui_arguments_are_one_line(tmp_path: Path) -> None:
    from tests.conftest import tfdist

    for args, needle, code in ((["--port", "70000"], "--port", 2), (["--host", "no.such.host.invalid"], "--host", 2),
                               # the resolver's IDNA encoding raised UnicodeError: a traceback
                               (["--host", "\udcff"], "is not a host name", 2),
                               (["--host", "a" * 64], "is not a host name", 2)):
        proc = tfdist("ui", *args, timeout=60)
        assert proc.returncode == code and proc.stderr.startswith("tfdist: error: ") and needle in proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    proc = tfdist("ui", env={"TFDIST_STORE": "mysql://x"}, timeout=60)
    assert proc.returncode == 2 and "TFDIST_STORE" in proc.stderr


def test_an_exit_by_signal_is_named_as_the_terminal_names_it(tmp_path: Path, client) -> None:  # type: ignore[no-untyped-def]
    """``SIGKILL`` on the page as in ``tfdist status`` and the summary, never ``-9``."""
    _job_with_log(tmp_path)
    Store().write("update", op_task_transition("j", TaskStatus("worker-0", "worker", 0, TaskState.FAILED,
                                                               exit_code=-9), 2.0))
    page = _authed(client).get("/jobs/j").text
    assert "<td>SIGKILL</td>" in page and "<td>-9</td>" not in page


def test_the_job_page_lists_its_events(tmp_path: Path, client) -> None:  # type: ignore[no-untyped-def]
    """What happened, like ``kubectl describe``'s events: a failure with its exit and reason,
    the restart; the last ``EVENT_ROWS`` of a long history, saying so."""
    from tfdist.ui import views

    _job_with_log(tmp_path)
    store = Store()
    store.write("update", op_task_transition("j", TaskStatus("worker-0", "worker", 0, TaskState.FAILED, exit_code=3,
                                                             reason="<b>bad</b> batch"), 2.0))
    store.write("update", op_task_transition("j", TaskStatus("worker-0", "worker", 0, TaskState.RUNNING,
                                                             attempt=1), 3.0))
    page = _authed(client).get("/jobs/j").text
    events = page[page.index('id="events"'):]
    assert "worker-0 attempt 0" in events and "exit code 3, &lt;b&gt;bad&lt;/b&gt; batch" in events
    assert events.index("exit code 3") < events.index("worker-0 attempt 1")
    for i in range(views.EVENT_ROWS + 5):
        store.write("update", op_task_transition("j", TaskStatus("worker-0", "worker", 0, TaskState.RUNNING,
                                                                 attempt=2 + i), 4.0 + i))
    page = _authed(client).get("/jobs/j").text
    total = len(store.transitions("j"))
    assert total > views.EVENT_ROWS + 5 and f"the last {views.EVENT_ROWS} of {total}" in page
    assert page[page.index('id="events"'):].count("<tr>") == views.EVENT_ROWS + 1  # the header's too


def test_a_running_jobs_phase_is_shown_beside_its_state(tmp_path: Path, client) -> None:  # type: ignore[no-untyped-def]
    from tfdist.jobs.store import op_job_phase
    from tfdist.states import PhaseState

    run_dir = _job_with_log(tmp_path, name="p")
    store = Store()
    store.set_supervisor("p", 1, None)  # pid 1 lives: the job counts as running
    store.write("update", lambda db: db.execute("UPDATE jobs SET state = 'running' WHERE id = 'p'"))
    store.write("update", op_job_phase("p", PhaseState.RESTARTING))
    assert run_dir.is_dir()
    for path in ("/", "/jobs/p"):
        page = _authed(client).get(path)
        assert page.status_code == 200
        assert '>running</span> <span class="muted">restarting</span>' in page.text, path
    store.write("update", op_job_phase("p", PhaseState.RUNNING))
    assert "restarting" not in _authed(client).get("/jobs/p").text


# -- the HTTP edges: what a request names must be exactly a job or task of the store -------


def test_an_event_stream_for_a_missing_or_ambiguous_job_is_refused_before_it_starts(tmp_path: Path, client) -> None:  # type: ignore[no-untyped-def]
    """The stream of a job that is not there (or a prefix of two jobs) is a 404, not a 200
    that breaks after its first event with a traceback in the server's log."""
    for name in ("ab-1", "ab-2"):
        Store().create_job(name, name=name, run_dir=str(tmp_path / name), backend="local", state=JobState.SUCCEEDED)
    c = _authed(client)
    for job in ("nope", "ab", "ab-", "ab-1%00"):
        with c.stream("GET", f"/events/jobs/{job}") as r:
            assert r.status_code == 404, job
            assert "text/event-stream" not in r.headers.get("content-type", ""), job
    with c.stream("GET", "/events/jobs/ab-1") as r:  # the job itself still streams
        assert r.status_code == 200 and "text/event-stream" in r.headers["content-type"]
        assert "event: change" in next(r.iter_text())


def test_a_job_or_task_is_named_exactly(tmp_path: Path) -> None:
    """A NUL, a prefix, or anything else that is not exactly a job's id or a task's name is a
    404 on every route, and is never acted on: ``stop`` of ``run%00`` stops nothing."""
    from starlette.testclient import TestClient

    from tfdist.pids import start_time

    _job_with_log(tmp_path, name="done")
    stopped: list[str] = []
    Store().create_job("run", name="run", run_dir=str(tmp_path / "r"), backend="local", state=JobState.RUNNING,
                       supervisor_pid=os.getpid(), supervisor_start=start_time(os.getpid()))
    app = create_app(location(), TOKEN, stop=lambda s, job: stopped.append(job))
    with TestClient(app, base_url="http://127.0.0.1:8470") as c:
        c.headers["Authorization"] = f"token {TOKEN}"
        assert c.get("/jobs/done/logs/worker-0").status_code == 200
        for path in ("/jobs/done%00", "/jobs/don", "/jobs/done%00/fragment", "/jobs/done%00/curves",
                     "/jobs/done%00/logs/worker-0", "/jobs/done/logs/worker-0%00",
                     "/jobs/done/logs/worker-0%00/search?q=h", "/api/curves?jobs=done%00",
                     "/curves?jobs=don", "/jobs/" + "d" * 1000, "/jobs/%FF%FE"):
            r = c.get(path)
            assert r.status_code == 404, (path[:80], r.status_code)
        for job in ("run%00", "ru", "run%00x"):
            r = c.post(f"/jobs/{job}/stop", data={"token": TOKEN}, follow_redirects=False)
            assert r.status_code == 404, job
        assert c.post("/jobs/run/stop", data={"token": TOKEN}, follow_redirects=False).status_code == 303
    deadline = time.monotonic() + 10  # the one real stop shows that the refused ones would have
    while not stopped and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stopped == ["run"]


def test_redirects_stay_on_this_server(tmp_path: Path, client) -> None:  # type: ignore[no-untyped-def]
    """The token's redirect names a path of this server whatever the request's path was:
    ``//host/x`` or ``/\\host/x`` would be a ``Location`` to another host."""
    _job_with_log(tmp_path)
    for path, raw in (("/jobs/j", "/jobs/j"), ("//evil.example/x", "//evil.example/x"),
                      ("/\\evil.example/x", "/%5Cevil.example/x"), ("/%2F%2Fevil.example", "/%2F%2Fevil.example"),
                      ("/\\/evil.example", "/%5C/evil.example"), ("/jobs/a b", "/jobs/a%20b")):
        r = client.get(f"http://127.0.0.1:8470{raw}?token={TOKEN}&x=1", follow_redirects=False)
        where = r.headers["location"]
        assert r.status_code == 303 and where.startswith("/"), (path, where)
        assert not where.startswith(("//", "/\\")) and "\\" not in where and "evil.example/" not in where[:2], (path, where)
        assert where.endswith("?x=1") and " " not in where, (path, where)
    assert client.get(f"/jobs/j?token={TOKEN}", follow_redirects=False).headers["location"] == "/jobs/j"


def test_a_cookie_header_with_malformed_pairs_still_carries_the_token(tmp_path: Path, client) -> None:  # type: ignore[no-untyped-def]
    """Another application on the same host can set a cookie the standard library's parser
    rejects; browsers send it along with ours, and the token must still be found."""
    _job_with_log(tmp_path)
    for header in (f"a=b; ;; tfdist_ui={TOKEN}; c", f'tfdist_ui="{TOKEN}"', f"x=\"un; tfdist_ui={TOKEN}",
                   f"tfdist_ui=wrong; tfdist_ui={TOKEN}", f"a=[b]; tfdist_ui={TOKEN}; {{}}=="):
        r = client.get("/jobs/j", headers={"Cookie": header})
        assert r.status_code == 200, header
    r = client.get("/jobs/j", headers=[("Cookie", "a=b"), ("Cookie", f"tfdist_ui={TOKEN}")])  # split headers
    assert r.status_code == 200
    for header in (f"a=b; ;; tfdist_uix={TOKEN}; c", f"x=tfdist_ui={TOKEN}", "tfdist_ui=", ";;;", f"{TOKEN}"):
        assert client.get("/jobs/j", headers={"Cookie": header}).status_code == 403, header


def _raw(base: str, request: bytes, end: bool = False) -> bytes:
    """What a server answers to bytes no client library would send (then, if ``end``, the
    end of what this client sends: a body cut short ends there)."""
    import socket

    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        if end:
            sock.shutdown(socket.SHUT_WR)
        got = b""
        while True:
            try:
                part = sock.recv(65536)
            except ConnectionResetError:
                break
            if not part:
                break
            got += part
    return got


def test_bad_requests_are_a_400_without_a_traceback(tmp_path: Path) -> None:
    """A CR or LF in the path, or a stop whose chunked body is malformed, is answered 400 by
    a real server (the client libraries would not send them), and its log has no traceback."""
    from tests.ui.conftest import start_ui
    from tfdist.pids import start_time

    Store().create_job("run", name="run", run_dir=str(tmp_path / "r"), backend="local", state=JobState.RUNNING,
                       supervisor_pid=os.getpid(), supervisor_start=start_time(os.getpid()))
    server = start_ui()
    try:
        auth_header = f"Authorization: token {server.token}\r\nHost: x\r\nConnection: close\r\n".encode()
        for path in (b"/jobs/a%0D%0ASet-Cookie:%20x=1", b"/jobs/a%0Ab", b"/%0D%0A",
                     f"/jobs/a%0D%0Ab?token={server.token}".encode()):
            got = _raw(server.base, b"GET " + path + b" HTTP/1.1\r\n" + auth_header + b"\r\n")
            assert got.startswith(b"HTTP/1.1 400 "), (path, got[:200])
            assert b"\r\nSet-Cookie: x" not in got, path
        stop = (b"POST /jobs/run/stop HTTP/1.1\r\n" + auth_header +
                b"Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n")
        for body in (b"zz\r\ntoken=x\r\n0\r\n\r\n", b"5\r\ntoken=xxxxxxx\r\n0\r\n\r\n", b"3\r\ntok"):
            got = _raw(server.base, stop + body, end=True)
            assert got.startswith(b"HTTP/1.1 400 ") or got == b"", (body, got[:200])
        assert Store().job("run").state is JobState.RUNNING  # nothing was stopped
        # the server still answers: nothing above took it down
        assert _raw(server.base, b"GET /jobs/run HTTP/1.1\r\n" + auth_header + b"\r\n").startswith(b"HTTP/1.1 200 ")
    finally:
        server.proc.terminate()
        _, err = server.proc.communicate(timeout=30)
    assert "Traceback" not in err and "Exception" not in err, err[-3000:]


def test_the_resource_charts_data_is_served_bounded_with_hosts_and_the_near_limit_flag(
        tmp_path: Path, store_kind: str, client) -> None:  # type: ignore[no-untyped-def]
    from tfdist.jobs.usage import Thinning, op_task_usage
    from tfdist.node.usage import UsageSample, latest

    run_dir = _job_with_log(tmp_path, name="use")
    store = Store()
    store.write("update", lambda db: db.execute("UPDATE jobs SET state = 'running' WHERE id = 'use'"))
    for i, (name, host) in enumerate((("worker-0", "h1"), ("worker-1", "h1"), ("worker-2", "h2"))):
        store.write("update", op_task_transition("use", TaskStatus(name, "worker", i, TaskState.RUNNING,
                                                                   host=host), 1.0))
        thinning, before = Thinning(), None
        for k in range(30):
            charged = 950 << 20 if name == "worker-2" and k == 29 else 100 << 20
            sample = UsageSample(100.0 + k, 0.5, 200 << 20, 1 << 30, charged)
            before = latest(before, sample)
            seq, thin = thinning.add()
            store.write("update", op_task_usage("use", name, 0, seq, thin, sample.to_dict(), before))
    assert run_dir.exists()
    _authed(client)
    data = client.get("/api/jobs/use/usage").json()
    assert set(data["tasks"]) == {"worker-0", "worker-1", "worker-2"}
    assert len(data["tasks"]["worker-0"]["rss"]) == 30 and data["tasks"]["worker-0"]["limit"][0] == 1 << 30
    assert data["near_limit"] == ["worker-2"] and data["sampled"] is True
    assert {h["host"]: (h["tasks"], h["rss"]) for h in data["hosts"]} == {"h1": (2, 400 << 20),
                                                                           "h2": (1, 200 << 20)}
    page = client.get("/jobs/use").text
    assert 'id="resources"' in page and "/api/jobs/use/usage" in page and "usage.js" in page
    assert 'id="near-limit"' in page and "worker-2" in page.split('id="near-limit"')[1].split("</p>")[0]
    assert "950 MiB of 1 GiB limit 93%" in page
    assert client.get("/api/jobs/nope/usage").status_code == 404
    assert client.get("/static/usage.js").status_code == 200


def test_a_stream_whose_job_is_removed_ends_without_a_traceback(tmp_path: Path, client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``tfdist clean`` may remove a job while its page streams: the event stream ends (its
    EventSource then gets a 404 and stops), a log follow says ``end``; neither raises after
    the response started (that was a traceback in the server's log and a cut connection)."""
    import tfdist.ui.app as app_module

    monkeypatch.setattr(app_module, "POLL_SECONDS", 0.05)
    _job_with_log(tmp_path, name="gone")
    c = _authed(client)
    with c.stream("GET", "/events/jobs/gone") as events, c.stream("GET", "/jobs/gone/logs/worker-0/follow") as follow:
        assert events.status_code == follow.status_code == 200
        lines, follows = events.iter_lines(), follow.iter_lines()
        assert next(lines).startswith("retry:")  # the first event: the stream has started
        assert next(lines) == "event: change" and [next(lines), next(lines)] == ["data: {}", ""]
        assert "hello" in next(follows)
        Store().delete_job("gone")
        assert [x for x in lines if x.startswith("event:")] == []  # then the stream ends
        assert "event: end" in list(follows)
    assert c.get("/events/jobs/gone").status_code == 404  # what the reconnecting EventSource gets


def test_the_job_page_shows_which_files_each_task_got_and_its_staging(
        tmp_path: Path, store_kind: str, client) -> None:  # type: ignore[no-untyped-def]
    """The data section, from the store on both stores: each input's totals, the output and
    its writer, per task a count, bytes and the first names of its files and how long its
    staging took; a hostile file name (markup, an escape, a newline) is text; 150 tasks list
    the first 100 (the page's task rows) and say how many more."""
    from tfdist.data import plan as data_plan
    from tfdist.jobs.inputs import op_job_data

    _job_with_log(tmp_path, name="dat")
    store = Store()
    hostile = "/d/<img src=x onerror=alert(1)>\x1b[31m\nfake"
    tasks = {f"worker-{i}": {"train": [hostile if i == 0 else f"/d/part-{i}", *(f"/d/more-{i}-{k}" for k in range(9))]}
             for i in range(150)}
    store.write("update", op_job_data("dat", data_plan.summary({
        "inputs": {"train": {"mode": "stage", "files": 1500, "bytes": 15 * 2**20}},
        "outputs": {"model_dir": "hdfs://nn/m<script>"}, "writer": "worker-0", "tasks": tasks,
        "bytes": {t: {"train": 100 * 1024} for t in tasks}})))
    for i in range(150):
        store.write("update", op_task_transition("dat", TaskStatus(f"worker-{i}", "worker", i, TaskState.SUCCEEDED,
                                                                   exit_code=0), 1.0))
    store.write("update", op_task_progress("dat", "worker-1", 0, 2.0, {"mark": "stage", "seconds": 0.5},
                                           {"staging": {"seconds": 0.5, "files": 10, "copied": 4, "bytes": 1}}))
    store.write("update", lambda db: db.execute("UPDATE jobs SET goodput = ? WHERE id = 'dat'", (json.dumps(
        {"goodput": 0.5, "wall_seconds": 10.0, "seconds": {"productive": 5.0, "staging": 2.0}}),)))
    page = _authed(client).get("/jobs/dat").text
    assert "staging took 2.00 s of the job&#39;s 10.0 s (goodput&#39;s staging cause, 20%)" in page
    section = page.split('<section id="data">')[1].split("</section>")[0]
    assert "<td>train</td><td>stage</td><td>1500</td><td>15.7 MB</td>" in section, section[:600]
    assert "hdfs://nn/m&lt;script&gt; (kept from worker-0)" in section
    assert "10 files, 102.4 KB: part-1, more-1-0, more-1-1 and 7 more" in section
    assert "staged in 0.50 s (copied 4 of 10 files, the rest from the cache)" in section
    assert "&lt;img src=x onerror=alert(1)&gt;\\x1b[31m\\nfake" in section
    assert "<img" not in page and "\x1b" not in page
    assert section.count("<tr>") == 2 + 1 + 1 + 100 and "50 more tasks got files" in section
    assert "worker-149" in _authed(client).get("/jobs/dat?tasks=all").text.split('<section id="data">')[1]
    # a job without data has no section
    _job_with_log(tmp_path, name="plain")
    assert 'id="data"' not in client.get("/jobs/plain").text
