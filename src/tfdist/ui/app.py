"""The dashboard's ASGI application (Starlette): pages rendered on the server with Jinja2
(autoescaped), a little script for what must be live (server-sent events redraw a page's
live part, follow a log), and charts drawn by plotly.js from the ``plotly`` package's own
copy (served from the package: no CDN, works offline).

Everything is read-only but ``stop`` and ``resubmit`` (POSTs with the page's token). Every
request has passed :class:`~.auth.TokenGate`.
Reads of the store are sync and run in Starlette's thread pool, each thread with its own
store connection; a page is one query limited in SQL (:func:`tfdist.jobs.queries.jobs_page`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from tfdist import runs
from tfdist.errors import SpecError, StoreError, TfdistError
from tfdist.jobs import queries, usage
from tfdist.jobs.fallback import effective_tasks
from tfdist.jobs.inputs import job_data
from tfdist.jobs.location import StoreLocation
from tfdist.jobs.manage import parse_age, task_names
from tfdist.jobs.queries import JobFilter
from tfdist.jobs.records import JobRecord
from tfdist.jobs.store import Store
from tfdist.states import JobState, exit_text
from tfdist.ui import auth, files, views

HERE = Path(__file__).parent
PAGE_SIZE = 50
#: How often live pages look for changes (seconds): a few cheap index lookups each time.
POLL_SECONDS = 1.0
#: A log follow sends what was appended, at most this many bytes per event.
FOLLOW_CHUNK = 64 * 1024
#: A stop or resubmit form (the page's token) is read up to this many bytes; a larger body is refused.
STOP_FORM_BYTES = 4096


def plotly_js() -> Path:
    """plotly.min.js as the plotly package ships it (package data)."""
    path = Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))
    if not path.is_file():
        raise FileNotFoundError("the plotly package has no package_data/plotly.min.js")
    return path


class Stores:
    """One store connection per thread (SQLite's and psycopg's connections are not shared
    by concurrent requests)."""

    def __init__(self, where: StoreLocation) -> None:
        self.where = where
        self._local = threading.local()
        self._all: list[Store] = []
        self._lock = threading.Lock()

    def get(self) -> Store:
        store = getattr(self._local, "store", None)
        if store is None:
            store = Store(self.where)
            self._local.store = store
            with self._lock:
                self._all.append(store)
        return store

    def close(self) -> None:
        with self._lock:
            for store in self._all:
                store.close()
            self._all.clear()


class Dashboard:
    """The dashboard's pages and data for one store and token; :func:`create_app` routes to
    its methods."""

    def __init__(self, where: StoreLocation, token: str,
                 stop: Callable[[Store, str], Any] | None = None,
                 resubmit: Callable[[JobRecord, str], str] | None = None) -> None:
        self.where = where
        self.token = token
        self.stores = Stores(where)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.globals.update(
            duration_text=views.duration_text, when_text=views.when_text,
            state_class=views.state_class, cause_line=views.cause_line,
            restarts_text=views.restarts_text, duration=views.duration, token=token,
            progress_text=views.progress_text, metrics_text=views.metrics_text,
            exit_text=exit_text, restarts_cell=views.restarts_cell, progress_cell=views.progress_cell,
            goodput_cell=views.goodput_cell, accuracy_cell=views.accuracy_cell, cpu_text=usage.cpu_text,
            memory_text=usage.memory_text, near_limit=views.near_memory_limit)
        self.do_stop = stop or self.stop_job
        self.do_resubmit = resubmit or self.resubmit_job

    @staticmethod
    def stop_job(store: Store, job_id: str) -> None:
        from tfdist.jobs.manage import stop as stop_it

        stop_it(store, job_id, grace=30.0)


    @staticmethod
    def resubmit_job(job: JobRecord, spec: str) -> str:
        """Submit ``job``'s stored spec again (``tfdist submit --like``); the new job's id."""
        from tfdist.jobs.submit import options_like, spec_like, submit

        backend, options = options_like(job)
        return submit(spec_like(job, spec), backend=backend, options=options).id

    def read_spec(self, job: JobRecord) -> tuple[str, str]:
        """The job's ``job.yaml`` (through the run directory's no-link reader) and, when it
        cannot be read, why."""
        if not job.run_dir:
            return "", "the job has no run directory"
        try:
            fd = files.open_in_run_dir(job.run_dir, runs.JOB_FILE)
            try:
                return files.read_small(fd), ""
            finally:
                os.close(fd)
        except files.OutsideRunDir as err:
            return "", str(err)

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def job_or_404(self, ref: str) -> JobRecord:
        """The job whose id is exactly ``ref`` (no prefix: an address names one job for good,
        and a ``NUL`` or other bytes added to an id name nothing), else a 404."""
        try:
            return self.stores.get().job(ref, exact=True)
        except SpecError as err:
            raise HTTPException(404, str(err)) from None
        except StoreError as err:
            if err.kind == "missing":
                raise HTTPException(404, str(err)) from None
            raise

    # -- jobs ----------------------------------------------------------------------

    def filters(self, request: Request) -> tuple[JobFilter, int, dict[str, str]]:
        q = request.query_params
        keys = ("state", "backend", "name", "user", "since", "label")
        given = {k: q.get(k, "").strip()[:200] for k in keys}
        for key, value in given.items():  # PostgreSQL refuses a NUL in text; no name holds one
            if "\x00" in value:
                raise HTTPException(400, f"{key}: contains a NUL byte")
        state = None
        if given["state"]:
            try:
                state = JobState(given["state"])
            except ValueError:
                raise HTTPException(400, f"state: {given['state']!r} is not a job state") from None
        since = None
        if given["since"]:
            try:
                since = time.time() - parse_age(given["since"])
            except TfdistError:
                raise HTTPException(400, "since: give an age such as 1h, 24h or 7d") from None
        try:
            page = max(1, min(int(q.get("page", "1")), 10**6))
        except ValueError:
            page = 1
        try:
            labels = views.parse_label_filter(given["label"])
        except ValueError as err:
            raise HTTPException(400, str(err)) from None
        where = JobFilter(state=state, backend=given["backend"] or None, name=given["name"] or None,
                          user=given["user"] or None, since=since, labels=labels)
        return where, page, given

    def jobs_context(self, request: Request) -> dict[str, Any]:
        where, page, given = self.filters(request)
        store = self.stores.get()
        rows, total = queries.jobs_page(store, where, PAGE_SIZE, (page - 1) * PAGE_SIZE)
        pages = max(1, math.ceil(total / PAGE_SIZE))
        keep = {k: v for k, v in given.items() if v}
        return {"jobs": rows, "total": total, "page": page, "pages": pages, "given": given,
                "query": keep, "states": [s.value for s in JobState], "backends": queries.backends(store),
                "now": time.time()}

    def jobs_page(self, request: Request) -> HTMLResponse:
        return self.render(request, "jobs.html", **self.jobs_context(request))

    def jobs_fragment(self, request: Request) -> HTMLResponse:
        return self.render(request, "jobs_table.html", **self.jobs_context(request))

    # -- one job -------------------------------------------------------------------

    def job_context(self, job_id: str, all_tasks: bool = False) -> dict[str, Any]:
        store = self.stores.get()
        job = self.job_or_404(job_id)
        tasks = effective_tasks(job, store.tasks(job.id))
        attempts = store.attempts(job.id)
        line = views.timeline(tasks, attempts, job.started_at or job.submitted_at, job.ended_at)
        names = task_names(job, [t.name for t in tasks])
        from tfdist.supervisor.goodput import summary_line

        good = summary_line(job.goodput) if job.goodput else ""
        if good and job.state is JobState.RUNNING:  # stored every few seconds while it runs
            good += " so far"
        happened, all_events = queries.recent_transitions(store, job.id, views.EVENT_ROWS)
        lead = "chief-0" if any(t.name == "chief-0" for t in tasks) else "worker-0"
        # which files each task got: the tasks listed, at most views.TASK_ROWS unless all asked for
        listed = [t.name for t in tasks] if all_tasks else [t.name for t in tasks][:views.TASK_ROWS]
        data = views.data_view(job_data(store, job.id, listed), tasks, job.goodput)
        epochs, left = views.epochs_left(queries.epoch_reports(store, job.id, lead),
                                         job.started_at, time.time(), job.state is JobState.RUNNING)
        return {"job": job, "tasks": tasks, "table": views.task_table(tasks, all_tasks),
                "all_tasks": all_tasks, "timeline": line, "now": time.time(),
                "cause": views.cause_line(job.root_cause),
                "cause_detail": views.cause_detail(job.root_cause), "tail": views.cause_tail(job.root_cause),
                "log_names": [*names, "supervisor"] if job.detached else names, "goodput": good,
                "events": views.events(happened), "events_total": all_events,
                "epochs": epochs, "time_left": left,
                "near": [t.name for t in tasks if views.near_memory_limit(t)], "data": data}

    def job_page(self, request: Request) -> HTMLResponse:
        context = self.job_context(request.path_params["job"], request.query_params.get("tasks") == "all")
        spec, spec_error = self.read_spec(context["job"])
        return self.render(request, "job.html", spec=spec, spec_error=spec_error, **context)

    def job_fragment(self, request: Request) -> HTMLResponse:
        return self.render(request, "job_live.html", **self.job_context(request.path_params["job"],
                                                                request.query_params.get("tasks") == "all"))

    def log_fd(self, job: JobRecord, task: str) -> int:
        """The task's log, only for the job's own task names (or ``supervisor``)."""
        names = set(task_names(job, [t.name for t in self.stores.get().tasks(job.id)]))
        if task != "supervisor" and task not in names:
            raise HTTPException(404, f"job {job.id} has no task {task!r}")
        if not job.run_dir:
            raise HTTPException(404, "the job has no run directory")
        parts = (runs.SUPERVISOR_LOG,) if task == "supervisor" else (runs.LOGS, f"{task}.log")
        try:
            return files.open_in_run_dir(job.run_dir, *parts)
        except files.OutsideRunDir as err:
            raise HTTPException(404, f"no log for {task}: {err}") from None

    def int_param(self, request: Request, name: str, default: int | None) -> int | None:
        text = request.query_params.get(name)
        if text is None or text == "":
            return default
        try:
            return max(0, min(int(text), 1 << 62))
        except ValueError:
            raise HTTPException(400, f"{name}: not a number") from None

    def log_range(self, request: Request) -> JSONResponse:
        job = self.job_or_404(request.path_params["job"])
        fd = self.log_fd(job, request.path_params["task"])
        try:
            start = self.int_param(request, "start", None)
            length = self.int_param(request, "length", files.TAIL_BYTES) or files.TAIL_BYTES
            chunk = files.tail(fd, length) if start is None else files.read_range(fd, start, length)
        finally:
            os.close(fd)
        return JSONResponse(chunk.to_dict())

    def log_search(self, request: Request) -> JSONResponse:
        job = self.job_or_404(request.path_params["job"])
        needle = request.query_params.get("q", "")[:200]
        if not needle:
            raise HTTPException(400, "q: give the text to look for")
        fd = self.log_fd(job, request.path_params["task"])
        try:
            found = files.search(fd, needle)
        finally:
            os.close(fd)
        return JSONResponse({"hits": [{"offset": o, "line": t} for o, t in found.hits],
                             "searched": found.searched, "size": found.size, "complete": found.complete})

    def still_active(self, job_id: str) -> bool | None:
        """Whether a followed job still runs: False once it ended or was removed from the store
        (``tfdist clean`` while its page is open), None when the store cannot say now. A
        stream has started by the time this is asked, so nothing here may raise: an error
        after the first event would end the connection with a traceback in the server's log."""
        try:
            return self.stores.get().job(job_id, exact=True).state.active
        except StoreError as err:
            return False if err.kind == "missing" else None

    async def log_follow(self, request: Request) -> StreamingResponse:
        job = await anyio.to_thread.run_sync(self.job_or_404, request.path_params["job"])
        fd = await anyio.to_thread.run_sync(self.log_fd, job, request.path_params["task"])
        start = self.int_param(request, "from", 0) or 0

        async def events() -> AsyncIterator[str]:
            pos = start
            try:
                idle = 0
                while True:
                    size = os.fstat(fd).st_size
                    if size < pos:  # truncated or replaced: start over
                        pos = 0
                    if size > pos:
                        chunk = files.read_range(fd, pos, FOLLOW_CHUNK)
                        if chunk.end > pos:
                            pos = chunk.end
                            yield f"data: {json.dumps(chunk.to_dict())}\n\n"
                            continue
                    idle += 1
                    if idle % 15 == 0:
                        active = await anyio.to_thread.run_sync(self.still_active, job.id)
                        if active is None:  # the store could not say: the browser reconnects
                            return
                        if not active:
                            yield "event: end\ndata: {}\n\n"
                            return
                        yield ": keep-alive\n\n"
                    await anyio.sleep(0.2)
            finally:
                os.close(fd)

        return StreamingResponse(events(), media_type="text/event-stream")

    async def changes(self, request: Request) -> StreamingResponse:
        """``change`` whenever the store has something new (of one job, if given). The job
        is looked up before the stream starts, so a job that is not there is a 404."""
        job_id = request.path_params.get("job")
        if job_id is not None:
            job_id = (await anyio.to_thread.run_sync(self.job_or_404, job_id)).id

        def look() -> Any:
            store = self.stores.get()
            mark = queries.changes(store, job_id)
            if job_id is None:  # a supervisor that died changes what is shown, not the store
                active, _ = queries.jobs_page(store, JobFilter(state=JobState.RUNNING), 1000)
                return mark, tuple(j.id for j in active)
            return mark, store.job(job_id, exact=True).state.value

        def look_or_none() -> Any:
            try:
                return look()
            except StoreError:  # the job was removed (`tfdist clean`) or the store is unavailable
                return None

        async def events() -> AsyncIterator[str]:
            last = await anyio.to_thread.run_sync(look_or_none)
            if last is None:
                return
            # what changed between the page's render and this connection is not in `last`:
            # one redraw now closes that gap
            yield "retry: 2000\nevent: change\ndata: {}\n\n"
            beats = 0
            while True:
                await anyio.sleep(POLL_SECONDS)
                now = await anyio.to_thread.run_sync(look_or_none)
                if now is None:  # ends the stream: the browser reconnects, and a job that is
                    return  # gone is a 404 then, which ends its EventSource for good
                if now != last:
                    last = now
                    yield "event: change\ndata: {}\n\n"
                beats += 1
                if beats % 15 == 0:
                    yield ": keep-alive\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    def stop_route(self, request: Request) -> Response:
        raise HTTPException(405, "stop is a POST")

    async def checked_form(self, request: Request, what: str) -> Response | None:
        """A change's form (stop, resubmit): one urlencoded field, the page's token, read here
        (starlette's form parser needs python-multipart) and no further than such a form can
        be. A refusal as a response, or None when the token is the page's."""
        body = b""
        try:
            async for part in request.stream():
                body += part
                if len(body) > STOP_FORM_BYTES:
                    return Response(f"tfdist ui: a {what} form is one field, the page's token\n",
                                    status_code=413, media_type="text/plain")
        except ClientDisconnect:  # the server gave up on the body (malformed, or cut short)
            return Response(f"tfdist ui: the {what} form's body was malformed or cut short\n",
                            status_code=400, media_type="text/plain")
        form = dict(parse_qsl(body.decode("latin-1")))
        if not auth.valid(form.get("token"), self.token):
            return Response(f"tfdist ui: the {what} form needs the page's token\n", status_code=403,
                            media_type="text/plain")
        return None

    async def stop_post(self, request: Request) -> Response:
        refused = await self.checked_form(request, "stop")
        if refused is not None:
            return refused
        job = await anyio.to_thread.run_sync(self.job_or_404, request.path_params["job"])
        if job.state.active:
            # stop waits for the supervisor's grace period: in the background, the page
            # shows the job stopping (live) and then stopped
            def run() -> None:
                store = Store(self.where)
                try:
                    self.do_stop(store, job.id)
                except TfdistError:
                    pass
                finally:
                    store.close()

            threading.Thread(target=run, name=f"tfdist-ui-stop-{job.id}", daemon=True).start()
        return RedirectResponse(f"/jobs/{quote(job.id, safe='')}", status_code=303)

    def resubmit_route(self, request: Request) -> Response:
        raise HTTPException(405, "resubmit is a POST")

    async def resubmit_post(self, request: Request) -> Response:
        """Submit the job's stored spec again (``tfdist submit --like``), then show the new
        job; a spec that no longer loads (or a backend that refuses) is said on a 400 page."""
        refused = await self.checked_form(request, "resubmit")
        if refused is not None:
            return refused
        job = await anyio.to_thread.run_sync(self.job_or_404, request.path_params["job"])
        spec, why = await anyio.to_thread.run_sync(self.read_spec, job)
        if not spec:
            raise HTTPException(400, f"job {job.id} has no stored spec to run again: {why or 'empty'}")
        try:
            new_id = await anyio.to_thread.run_sync(self.do_resubmit, job, spec)
        except TfdistError as err:
            raise HTTPException(400, f"resubmit {job.id}: {err}") from None
        return RedirectResponse(f"/jobs/{quote(new_id, safe='')}", status_code=303)

    # -- compare -------------------------------------------------------------------

    def compared(self, request: Request) -> list[JobRecord]:
        """The jobs named by ``jobs`` (checkboxes: the name repeated; or ``a,b``), each once."""
        refs: list[str] = []
        for value in request.query_params.getlist("jobs"):
            refs += [x for x in value.split(",") if x]
        refs = list(dict.fromkeys(refs))
        if len(refs) > views.MAX_COMPARED:
            raise HTTPException(400, f"jobs: compare at most {views.MAX_COMPARED} runs at a time")
        if not refs:
            raise HTTPException(400, "jobs: pick the runs to compare on the jobs list")
        jobs = [self.job_or_404(x) for x in refs]
        store = self.stores.get()  # the list's progress column, for each run
        return [dataclasses.replace(j, lead_progress=queries.lead_progress(store, j.id)) for j in jobs]

    def compare_page(self, request: Request) -> HTMLResponse:
        jobs = self.compared(request)
        specs = []
        missing = []
        for job in jobs:
            text, why = self.read_spec(job)
            if text:
                specs.append((job.id, text))
            else:
                missing.append((job.id, why or "empty"))
        return self.render(request, "compare.html", jobs=jobs, ids=",".join(j.id for j in jobs),
                           diffs=views.spec_diffs(specs), missing=missing,
                           base=specs[0][0] if specs else None, now=time.time())

    # -- curves --------------------------------------------------------------------

    def curves_page(self, request: Request) -> HTMLResponse:
        ids = [request.path_params["job"]] if "job" in request.path_params else [
            x for x in request.query_params.get("jobs", "").split(",") if x][:8]
        jobs = [self.job_or_404(x) for x in ids]
        return self.render(request, "curves.html", jobs=jobs, ids=",".join(j.id for j in jobs))

    def curves_data(self, request: Request) -> JSONResponse:
        out = {}
        for ref in [x for x in request.query_params.get("jobs", "").split(",") if x][:8]:
            job = self.job_or_404(ref)
            reports = queries.progress_sample(self.stores.get(), job.id, views.CURVE_POINTS)
            data = views.curves(reports, job.started_at or job.submitted_at)
            data["tensorboard"] = job.tensorboard_url if job.state is JobState.RUNNING else None
            data["state"] = job.state.value
            out[job.id] = data
        return JSONResponse(out)

    # -- resource use ----------------------------------------------------------------

    def usage_data(self, request: Request) -> JSONResponse:
        """A job's usage samples for its charts (bounded: :func:`usage.chart_data`), the
        running tasks' use per host, and the tasks near their memory limit."""
        job = self.job_or_404(request.path_params["job"])
        store = self.stores.get()
        tasks = effective_tasks(job, store.tasks(job.id))
        data = usage.chart_data(store, job.id, usage.chart_tasks(tasks))
        data["task_count"] = len(tasks)
        data["hosts"] = views.hosts(tasks)
        data["near_limit"] = [t.name for t in tasks if views.near_memory_limit(t)]
        data["state"] = job.state.value
        data["sampled"] = job.backend in usage.SAMPLED_BACKENDS
        return JSONResponse(data)

    async def plotly(self, request: Request) -> FileResponse:
        return FileResponse(plotly_js(), media_type="text/javascript")

    async def not_found(self, request: Request, exc: Exception) -> Response:
        code = getattr(exc, "status_code", 500)
        detail = getattr(exc, "detail", "") or "not found"
        if request.url.path.startswith(("/api/", "/events/")) or "/logs/" in request.url.path:
            return JSONResponse({"error": detail}, status_code=code)
        return self.render(request, "error.html", status=code, code=code, detail=detail)

    async def store_error(self, request: Request, exc: Exception) -> Response:
        return self.render(request, "error.html", status=503, code=503, detail=str(exc))


def create_app(where: StoreLocation, token: str, *, stop: Callable[[Store, str], Any] | None = None,
               resubmit: Callable[[JobRecord, str], str] | None = None) -> Any:
    """The dashboard for the store at ``where``, behind ``token`` (see :mod:`.auth`)."""
    d = Dashboard(where, token, stop, resubmit)
    routes = [
        Route("/", d.jobs_page),
        Route("/fragment/jobs", d.jobs_fragment),
        Route("/events/jobs", d.changes),
        Route("/jobs/{job}", d.job_page),
        Route("/jobs/{job}/fragment", d.job_fragment),
        Route("/events/jobs/{job}", d.changes),
        Route("/jobs/{job}/logs/{task}", d.log_range),
        Route("/jobs/{job}/logs/{task}/search", d.log_search),
        Route("/jobs/{job}/logs/{task}/follow", d.log_follow),
        Route("/jobs/{job}/stop", d.stop_post, methods=["POST"]),
        Route("/jobs/{job}/stop", d.stop_route, methods=["GET"]),
        Route("/jobs/{job}/resubmit", d.resubmit_post, methods=["POST"]),
        Route("/jobs/{job}/resubmit", d.resubmit_route, methods=["GET"]),
        Route("/compare", d.compare_page),
        Route("/jobs/{job}/curves", d.curves_page),
        Route("/curves", d.curves_page),
        Route("/api/curves", d.curves_data),
        Route("/api/jobs/{job}/usage", d.usage_data),
        Route("/static/plotly.min.js", d.plotly),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        d.stores.close()

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: d.not_found, StoreError: d.store_error})
    return auth.TokenGate(app, token)
