"""The job's own YARN application, ``tfdist-JOB``: the one entry of a ``--backend yarn`` job
in YARN's UI, in the job's queue, with the run's tags and a tracking URL (the run's
TensorBoard while ``tfdist run --tensorboard`` serves one).

Why one more application: each role runs as an application of Hadoop's distributed shell,
whose ApplicationMaster registers an empty tracking URL, and only an application's AM can
set one. This application's AM is tfdist's own process, *unmanaged* (``"unmanaged-AM":
true`` in the REST submission): it holds no container and starts nothing, yet the RM counts
it as one of the queue's AMs (``plan.JOB_AM_MEMORY_MB``, 1 vcore, against the queue's AM
share: see ``plan.fit_problem``). It speaks Hadoop RPC (:mod:`.hrpc`): the AMRM token from the
application's report (simple authentication; the RM gives it to the application's owner
only), ``registerApplicationMaster`` with the URL, an ``allocate`` asking for nothing every
:data:`HEARTBEAT_SECONDS` (the RM expires an AM silent for 10 minutes; an allocate also
carries a changed URL), and ``finishApplicationMaster`` with the job's outcome.

It is an extra, never a condition of the job: whatever fails (the RM refusing the
submission or a call, Kerberos, a ``hadoop.rpc.protection`` other than ``authentication``)
is one warning line and the job goes on. All but the submission happens on a daemon thread,
so no task waits for it. A SIGKILLed tfdist leaves it RUNNING with nobody heartbeating; it
carries the run's tag, so the run's reaper (:mod:`.reaper`) kills it with the rest.

The decisions (the submission, the final status, the diagnostics, which URL is one) are
pure functions at the top; :class:`JobApplication` does the talking.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfdist.backends.yarn import conf as yarn_conf
from tfdist.backends.yarn import hrpc, plan, rest
from tfdist.errors import SpecError
from tfdist.states import JobState

#: Between two allocate heartbeats (the RM's AM expiry is 10 minutes by default); a new
#: TensorBoard URL reaches the RM with the next one.
HEARTBEAT_SECONDS = 5.0
_TOKEN_POLL = 0.5  # seconds between looks for the AMRM token while the attempt starts
_URL = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]{1,300}(/[^\s]{0,1000})?$")


def submission(app_id: str, name: str, queue: str, tags: list[str]) -> dict[str, Any]:
    """The RM REST body of the job's application: unmanaged (no AM container; the RM wants a
    command all the same, and never runs it), one attempt (tfdist's process is the AM: there
    is nothing to retry elsewhere)."""
    return {
        **plan.app_header(app_id, name, queue, tags),
        "unmanaged-AM": True,
        "max-app-attempts": 1,
        "resource": {"memory": plan.JOB_AM_MEMORY_MB, "vCores": 1},
        "am-container-spec": {"commands": {"command": "true"}},
    }


def final_status(state: JobState) -> str:
    """The application's final status for the job's end: SUCCEEDED and FAILED as the job;
    an interrupted or stopped job KILLED."""
    if state is JobState.SUCCEEDED:
        return "SUCCEEDED"
    if state in (JobState.FAILED, JobState.LOST):
        return "FAILED"
    return "KILLED"


def diagnostics(job: str, state: JobState, why: str) -> str:
    """The one line the RM shows as the application's diagnostics."""
    line = f"tfdist: job {job} {state}" + (f": {why}" if why else "")
    return (line.splitlines() or [""])[0][:500]


def tracking_url(text: str) -> str:
    """``text`` when it is one http(s) URL (what TensorBoard printed), else "" (nothing to
    show: a half-written or foreign file must not reach the RM)."""
    text = text.strip()
    return text if _URL.match(text) else ""


def run_listing(rm_url: str, run_tag: str) -> str:
    """The tracking URL when no TensorBoard runs, and after the job: the RM's own list of
    the run's applications (its REST API, by the run's tag), from which each role's
    application, its state and diagnostics are one click away. True for the whole run and
    after it, unlike a TensorBoard that stops with the job."""
    return f"{rm_url.rstrip('/')}/ws/v1/cluster/apps?applicationTags={run_tag}"


def url_in(path: Path) -> str:
    """The tracking URL a file names (the run's ``runs.TENSORBOARD_URL``), "" when none."""
    try:
        return tracking_url(path.read_text()[:2000])
    except (OSError, UnicodeDecodeError):
        return ""


class JobApplication:
    """The job's application from its submission to its finish (see the module's doc).

    ``url`` is asked at registration and at every heartbeat for the tracking URL to show
    (TensorBoard's; "" when none: then ``home``, also the URL it finishes with); ``warn``
    takes the one warning line when something fails."""

    def __init__(self, rm: rest.ResourceManager, site: dict[str, str], app_id: str, host: str,
                 url: Callable[[], str], home: str, warn: Callable[[str], None]) -> None:
        self.app_id = app_id
        self._rm = rm
        self._clients = yarn_conf.rm_rpc_addresses(site, "yarn.resourcemanager.address")
        self._schedulers = yarn_conf.rm_rpc_addresses(site, "yarn.resourcemanager.scheduler.address")
        self._host = host
        self._url = lambda: url() or home
        self._home = home
        self._warn = warn
        self._closing = threading.Event()
        self._lock = threading.Lock()  # one call at a time on the AM's connection
        self._conn: hrpc.Connection | None = None  # registered, while not None
        self._response_id = 0
        self._shown = ""  # the URL the RM has
        self._thread = threading.Thread(target=self._run, name="yarn-job-application", daemon=True)

    @classmethod
    def submit(cls, rm: rest.ResourceManager, name: str, queue: str, tags: list[str], run_tag: str,
               host: str, url: Callable[[], str], warn: Callable[[str], None]) -> JobApplication | None:
        """Submit it and start its AM's thread; None (after one warning) when the RM refuses.
        Without a TensorBoard its URL is :func:`run_listing` (``run_tag``: the run's tag)."""
        site = yarn_conf.read_site(yarn_conf.conf_dir(_environ()))
        try:
            app_id, _ = rm.new_application()
            rm.submit(submission(app_id, name, queue, tags))
        except (rest.RMError, SpecError) as err:
            warn(f"yarn: the job's application was not submitted ({err}); the job goes on without it")
            return None
        app = cls(rm, site, app_id, host, url, run_listing(rm.urls[0], run_tag), warn)
        app._thread.start()
        return app

    # -- its AM, on the thread -------------------------------------------------------------

    def _run(self) -> None:
        try:
            token = self._wait_for_token()
            if token is not None:
                self._register(token)
            while not self._closing.wait(HEARTBEAT_SECONDS):
                self._heartbeat()
        except (hrpc.RPCError, OSError) as err:
            self._give_up(err)

    def _wait_for_token(self) -> hrpc.Token | None:
        """The AMRM token, from the application's report once its attempt has started (an
        ACCEPTED application, held by the queue's AM limit, has none yet)."""
        with _connect(self._clients, hrpc.CLIENT_PROTOCOL, user=self._rm.user) as conn:
            while not self._closing.is_set():
                report = hrpc.application_report(conn, self.app_id)
                if report.am_rm_token is not None:
                    return report.am_rm_token
                if report.state in ("FINISHED", "FAILED", "KILLED"):
                    raise hrpc.RPCError(f"it is {report.state} before its AM registered")
                self._closing.wait(_TOKEN_POLL)
        return None

    def _register(self, token: hrpc.Token) -> None:
        with self._lock:
            if self._closing.is_set():
                return
            conn = _connect(self._schedulers, hrpc.AM_PROTOCOL, token=token)
            url = self._url()
            try:
                hrpc.register_am(conn, self._host, 0, url)
            except BaseException:
                conn.close()
                raise
            self._conn, self._shown = conn, url

    def _heartbeat(self) -> None:
        with self._lock:
            if self._conn is None or self._closing.is_set():
                return
            url = self._url()
            new = url if url and url != self._shown else ""
            # (a rolled AMRM token is not kept: the one connection serves the whole job)
            self._response_id, _ = hrpc.allocate(self._conn, self._response_id, new)
            if new:
                self._shown = new

    def _give_up(self, err: BaseException) -> None:
        with self._lock:
            if self._closing.is_set() and self._conn is None:
                return  # finish() raced the thread's last call; it says what it does
            self._drop()
        self._warn(f"yarn: the job's application {self.app_id} stopped ({err}); the job goes on "
                   "without it")

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- the end, from the backend's close() ---------------------------------------------

    def finish(self, state: JobState, why: str, job: str) -> bool:
        """Finish the application with the job's outcome (unregistering its AM), or kill it
        when it never registered or the RM would not take the finish. False when the RM
        took neither (the run's reaper is then left to try)."""
        self._closing.set()
        status, said = final_status(state), diagnostics(job, state, why)
        finished = False
        with self._lock:
            if self._conn is not None:
                try:
                    # the RM answers "not yet" until the unregistration has been processed
                    for _ in range(50):
                        if hrpc.finish_am(self._conn, status, said, self._home):
                            finished = True
                            break
                        time.sleep(0.1)
                except (hrpc.RPCError, OSError) as err:
                    self._warn(f"yarn: the job's application {self.app_id} did not take its finish "
                               f"({err}); killing it")
                self._drop()
        if not finished:
            try:
                self._rm.kill(self.app_id)
            except rest.RMError as err:
                self._warn(f"yarn: cannot end the job's application {self.app_id}: {err}")
                return False
        self._thread.join(timeout=5)
        return True


def _connect(addresses: list[tuple[str, int]], protocol: str, **how: Any) -> hrpc.Connection:
    """A connection to the first RM (with HA: in RM-id order) that takes it."""
    errors = []
    for host, port in addresses:
        try:
            return hrpc.Connection(host, port, protocol, timeout=30.0, **how)
        except (hrpc.RPCError, OSError) as err:
            errors.append(f"{host}:{port}: {err}")
    raise hrpc.RPCError(f"no ResourceManager takes the connection ({'; '.join(errors) or 'none named'})")


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)
