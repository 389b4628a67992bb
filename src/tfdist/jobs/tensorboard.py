"""TensorBoard on a job's log directory (``<run_dir>/tensorboard``, where the runtime's
callbacks write), for ``tfdist tensorboard JOB`` and ``tfdist run --tensorboard``.

TensorBoard runs as its own process (in its own session, so a Ctrl-C reaches tfdist, which
then stops it) on 127.0.0.1 and a free port; its URL is read from its output, printed and
recorded in the job store. It stops when the job ends, or on Ctrl-C.

The command is ``python -m tensorboard.main`` when the ``tensorboard`` package is importable,
else ``tensorboard`` on PATH; ``TFDIST_TENSORBOARD`` overrides both (e.g. a TensorBoard
installed in another environment).
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfdist import runs
from tfdist.errors import BackendError
from tfdist.supervisor.observer import JobSnapshot, Observer
from tfdist.supervisor.status import TaskStatus

if TYPE_CHECKING:
    from tfdist.jobs.records import JobRecord
    from tfdist.jobs.store import Store

_URL = re.compile(r"(https?://[^\s]+:\d+/?)")


def command() -> list[str]:
    override = os.environ.get("TFDIST_TENSORBOARD")
    if override:
        return shlex.split(override)
    if importlib.util.find_spec("tensorboard") is not None:
        return [sys.executable, "-m", "tensorboard.main"]
    found = shutil.which("tensorboard")
    if found:
        return [found]
    raise BackendError(
        "TensorBoard is not installed: pip install tensorboard "
        "(or set TFDIST_TENSORBOARD to the command that starts it)"
    )


class TensorBoard:
    """One TensorBoard process. :meth:`start` returns at once; :meth:`wait_url` blocks."""

    def __init__(self, logdir: str | Path, *, port: int = 0, host: str = "127.0.0.1") -> None:
        self.logdir = Path(logdir)
        self.port = port
        self.host = host
        self.url: str | None = None
        self.proc: subprocess.Popen[str] | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=10)
        self._ready = threading.Event()
        self._on_url: list[Any] = []

    def start(self, on_url: Any = None) -> TensorBoard:
        cmd = command()
        self.logdir.mkdir(parents=True, exist_ok=True)
        if on_url is not None:
            self._on_url.append(on_url)
        try:
            self.proc = subprocess.Popen(
                [*cmd, "--logdir", str(self.logdir), "--host", self.host, "--port", str(self.port)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, start_new_session=True,
            )
        except OSError as err:
            raise BackendError(f"cannot start TensorBoard ({' '.join(cmd)}): {err}") from None
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail.append(line.rstrip())
            match = _URL.search(line) if self.url is None else None
            if match:
                self.url = match.group(1)
                self._ready.set()
                for callback in self._on_url:
                    with contextlib.suppress(Exception):
                        callback(self.url)
        self._ready.set()  # it exited

    def wait_url(self, timeout: float = 120) -> str:
        self._ready.wait(timeout)
        if self.url is None:
            self.stop()
            last = " | ".join(self.tail) or "no output"
            raise BackendError(f"TensorBoard did not start within {timeout:g}s: {last}")
        return self.url

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 5.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _record_url(run_dir: Path, url: str | None) -> None:
    from tfdist.jobs.store import Store

    with contextlib.suppress(Exception), contextlib.closing(Store()) as store:
        job_id = store.job_id_for_run_dir(str(run_dir))
        if job_id:
            store.set_tensorboard(job_id, url)


def serve_job(store: Store, job: JobRecord, *, port: int = 0) -> int:
    """``tfdist tensorboard JOB``: serve until the job ends (a running job) or Ctrl-C."""
    run_dir = Path(job.run_dir or ".")
    board = TensorBoard(run_dir / "tensorboard", port=port).start()
    try:
        url = board.wait_url()
        print(f"TensorBoard for {job.id}: {url}", flush=True)
        active = job.state.active
        if active:
            print("it stops when the job ends (or on Ctrl-C)", flush=True)
        else:
            print(f"the job is {job.state}; Ctrl-C stops TensorBoard", flush=True)
        while board.alive():
            if active and not store.job(job.id).state.active:
                print(f"job {job.id} ended; TensorBoard stopped", flush=True)
                break
            time.sleep(1)
        else:
            raise BackendError(f"TensorBoard exited: {' | '.join(board.tail)}")
    except KeyboardInterrupt:
        print("TensorBoard stopped", flush=True)
    finally:
        board.stop()
    return 0


class TensorBoardObserver(Observer):
    """``tfdist run --tensorboard``: TensorBoard from the job's start to its end. It starts
    in the background (the job does not wait for it); the URL is printed when it is ready."""

    def __init__(self) -> None:
        self.board: TensorBoard | None = None

    def __enter__(self) -> TensorBoardObserver:
        command()  # not installed: say so before the job starts
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def on_start(self, job: JobSnapshot, tasks: tuple[TaskStatus, ...]) -> None:
        if self.board is not None:
            return
        run_dir = Path(job.run_dir)

        def announce(url: str) -> None:
            print(f"tfdist: TensorBoard: {url}", file=sys.stderr, flush=True)
            with contextlib.suppress(OSError):  # for the backend (see runs.TENSORBOARD_URL)
                (run_dir / runs.TENSORBOARD_URL).write_text(url + "\n")
            _record_url(run_dir, url)

        self.board = TensorBoard(run_dir / "tensorboard").start(on_url=announce)

    def on_finish(self, job: JobSnapshot, result: Any) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.board is not None:
            board, self.board = self.board, None
            board.stop()
            with contextlib.suppress(OSError):
                (board.logdir.parent / runs.TENSORBOARD_URL).unlink(missing_ok=True)
            _record_url(board.logdir.parent, None)
