"""What every backend does, and the events it reports to the supervisor.

A backend owns the places tasks run (processes, pods, actors). The supervisor knows none
of that: it calls :meth:`Backend.reserve`, :meth:`Backend.start` and :meth:`Backend.stop`,
and reads :class:`Event` objects from :attr:`Backend.events`. Backends push every event the
moment it happens (no polling interval), so a task's exit is noticed within milliseconds.
"""

from __future__ import annotations

import json
import queue
import signal
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfdist.cluster import Task, TaskId
from tfdist.contract import PROGRESS_PREFIX
from tfdist.errors import SpecError
from tfdist.jobspec.model import JobSpec
from tfdist.runs import DEFAULT_RUNS
from tfdist.states import JobState

if TYPE_CHECKING:  # the data modules load only for a job with data (the HDFS client is ~30 ms)
    from tfdist.data.plan import DataPlan


@dataclass(frozen=True)
class BackendOptions:
    """What a run adds to the job spec for its backend, typed and in one place.

    The command line builds it once (:meth:`from_args`), the API takes it, and ``submit``
    hands it to the detached supervisor as argv again (:meth:`to_argv`), so the three can
    never disagree (tests/cli/test_options.py round-trips them through the parser). Each
    backend reads only its own fields.
    """

    #: Where run directories go (the Ray backend never uploads it with the working dir).
    runs_root: Path = Path(DEFAULT_RUNS)
    #: Ray: the cluster to join (``auto``, ``HOST:PORT`` or ``ray://...``); default: the job's.
    ray_address: str | None = None
    #: Spark: the master URL (``local[N]``, ``spark://HOST:PORT``, ``k8s://...``, ``yarn``).
    spark_master: str | None = None
    #: Kubernetes: an API client to use instead of the kubeconfig's (in-process callers and
    #: tests; not passed on to a detached supervisor).
    kubernetes_client: Any = None

    @classmethod
    def from_args(cls, args: Any) -> BackendOptions:
        """From ``run``/``submit``'s parsed arguments (an ``argparse.Namespace``: anything with
        ``runs_dir``, ``ray_address`` and ``spark_master``); read by attribute, so backends need
        not import the command line. An empty ``--ray-address`` or ``--spark-master`` (a
        variable that was not set) is bad input, not the default cluster, and an empty
        ``--runs-dir`` is not the current directory."""
        if not str(args.runs_dir).strip():
            raise SpecError(f"--runs-dir: empty; give a directory for run directories, or leave the "
                            f"flag out for the default ({DEFAULT_RUNS})")
        for flag, value in (("--ray-address", args.ray_address), ("--spark-master", args.spark_master)):
            if value is not None and not value.strip():
                raise SpecError(f"{flag}: empty; give the cluster, or leave the flag out for the "
                                "job file's setting or the default")
        return cls(runs_root=Path(args.runs_dir), ray_address=args.ray_address,
                   spark_master=args.spark_master)

    def to_argv(self) -> list[str]:
        """The options as ``run``'s arguments again (:meth:`from_args` reads them back), for the
        detached supervisor ``submit`` starts. ``--flag=value``: a value that starts with a
        dash is still read as the flag's value."""
        argv = [f"--runs-dir={self.runs_root}"]
        if self.ray_address:
            argv.append(f"--ray-address={self.ray_address}")
        if self.spark_master:
            argv.append(f"--spark-master={self.spark_master}")
        return argv


@dataclass(frozen=True)
class Started:
    task: str
    attempt: int
    time: float
    pid: int | None = None
    host: str | None = None
    #: The task's ``host:port`` when it differs from the one reserved (a backend that moved
    #: the job to other hosts, e.g. after one died, and gave it a new TF_CONFIG); None: unchanged.
    address: str | None = None


@dataclass(frozen=True)
class Exited:
    """A task ended. ``exit_code`` is negative -N when it died of signal N."""

    task: str
    attempt: int
    time: float
    exit_code: int
    reason: str | None = None  # backend detail, e.g. OOMKilled, node died
    #: The backend cannot run this task again (e.g. it would need an address the job's
    #: TF_CONFIG does not have): no restart policy retries it.
    final: bool = False


@dataclass(frozen=True)
class Output:
    task: str
    attempt: int
    time: float
    line: str


@dataclass(frozen=True)
class Active:
    """The task wrote output without a newline (a progress bar redrawn with ``\\r``): it is
    alive, though there is no line to log yet."""

    task: str
    attempt: int
    time: float


@dataclass(frozen=True)
class Progress:
    task: str
    attempt: int
    time: float
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Usage:
    """What a task's process tree used, sampled where it runs (:mod:`tfdist.node.usage`):
    ``cpu`` in cores since the previous sample (None for the first), ``rss`` in bytes,
    ``limit`` its memory limit in bytes (None: none)."""

    task: str
    attempt: int
    time: float
    cpu: float | None
    rss: int
    limit: int | None = None
    #: Bytes its memory cgroup is charged, when it has one (see node/usage.UsageSample).
    charged: int | None = None


Event = Started | Exited | Output | Progress | Active | Usage


def progress_data(line: str) -> dict[str, Any] | None:
    """The data of a ``TFDIST_PROGRESS {json}`` line, or None for ordinary output."""
    if not line.startswith(PROGRESS_PREFIX):
        return None
    try:
        data = json.loads(line[len(PROGRESS_PREFIX) :])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def line_event(task: str, attempt: int, time: float, line: str) -> Output | Progress:
    """One line of a task's output as the event every backend reports for it."""
    data = progress_data(line)
    return Output(task, attempt, time, line) if data is None else Progress(task, attempt, time, data)


def line_events(task: str, attempt: int, time: float, line: str) -> list[Output | Progress]:
    """One line of a task's output as the events every backend reports for it: one, or two
    when a progress report came right after a progress bar drawn without a newline. Keras's
    ``fit(verbose=1)`` redraws its bar with backspaces and a carriage return and ends the
    line only at the epoch's end, so a step report printed meanwhile lands on the bar's line;
    it is split off (the bar is output, the report a report). A report's prefix elsewhere in
    a line is the task's text, not a report."""
    at = line.find(PROGRESS_PREFIX)
    if at > 0 and ("\r" in line[:at] or "\x08" in line[:at]):
        data = progress_data(line[at:])
        if data is not None:
            return [Output(task, attempt, time, line[:at]), Progress(task, attempt, time, data)]
    return [line_event(task, attempt, time, line)]


def lost_events(
    task: str, attempt: int, time: float, reason: str, *, final: bool = False
) -> tuple[Output, Exited]:
    """A task whose node, actor or agent went away: a line saying so, and an exit as if
    SIGKILLed (the Ray and Spark backends learn of it from their cluster, not the process)."""
    return (Output(task, attempt, time, f"tfdist: {task} lost: {reason}"),
            Exited(task, attempt, time, -int(signal.SIGKILL), reason, final))


class Backend(ABC):
    """Start, watch and stop the tasks of one job."""

    name: str = "base"
    #: Whether it keeps warm spares (``restart.warm_spares``; see node/spares.py).
    keeps_spares: bool = False
    #: Whether it runs tfdist.node.staging where each task runs, so a task's inputs can be
    #: staged and its outputs kept (``mode: stage``, ``outputs``); without it only streamed
    #: inputs are possible (see :meth:`check_data`).
    stages_data: bool = False
    #: Whether a task's address stops resolving while the task is down (a pod's DNS name
    #: leaves its Service with the pod): the surviving parameter-server workers' gRPC
    #: channels then hold the failed lookup of a restarted ps's name, so the workers
    #: restart with the ps and the chief (see ``tfdist.supervisor.policy.restart_group``).
    addresses_vanish: bool = False

    def __init__(self, job: JobSpec, options: BackendOptions | None = None) -> None:
        self.job = job
        self.options = options or BackendOptions()
        self._run_dir: Path | None = None
        self.events: queue.Queue[Event] = queue.Queue()
        #: The job's data plan (tfdist.data.plan), given by :meth:`use_data` after check().
        self.data: DataPlan | None = None

    @property
    def run_dir(self) -> Path:
        """The job's run directory; known from :meth:`attach` on (after :meth:`check`)."""
        if self._run_dir is None:
            raise RuntimeError("the backend has no run directory yet: call attach() first")
        return self._run_dir

    def attach(self, run_dir: Path) -> None:
        """Give the backend the run directory made for this run (after a successful check)."""
        self._run_dir = run_dir

    def check_data(self, plan: DataPlan) -> None:
        """SpecError (one line, before anything starts) for what of ``plan`` this backend
        cannot do; by default staging and outputs need :attr:`stages_data`."""
        if plan.stages and not self.stages_data:
            what = "outputs" if plan.outputs else "data: mode: stage"
            raise SpecError(f"{what}: the {self.name} backend cannot stage inputs or keep outputs; "
                            "use mode: stream (the script reads the URIs itself) and save to shared "
                            "storage yourself, or run on the local, spark, yarn or ray backend")

    def use_data(self, plan: DataPlan) -> None:
        """Give the backend the job's data plan, checked (see :meth:`check_data`)."""
        self.check_data(plan)
        self.data = plan

    def data_env(self, task: str) -> dict[str, str]:
        """The data variables of ``task`` (empty without a data section)."""
        return self.data.task_env(task) if self.data is not None else {}

    def check(self) -> None:
        """Raise SpecError for what this backend cannot run, before anything starts (nothing
        may be written yet: the run directory does not exist)."""

    def warnings(self) -> list[str]:
        """What may go wrong with this job here that the job file cannot settle (one line
        each): :func:`tfdist.jobs.preflight.preflight` says them on stderr once every check
        has passed, so bad input is still one line."""
        return []

    @abstractmethod
    def reserve(self, tasks: list[TaskId]) -> dict[str, str]:
        """Reserve an address (``host:port``) for each training task; return them by name."""

    @abstractmethod
    def start(self, task: Task, attempt: int) -> None:
        """Start one attempt of a task; report Started, Output, Progress and Exited events."""

    @abstractmethod
    def stop(self, names: list[str], grace: float) -> None:
        """Stop these tasks: polite signal, ``grace`` seconds, then force. Blocks until done;
        each stopped task still reports its Exited event."""

    def job_ended(self, state: JobState, why: str) -> None:
        """The job's outcome, told once just before :meth:`close`: ``state`` (FAILED too when
        an error ends the run) and ``why`` in one line ("" when nothing failed). Only a
        backend that shows the job itself to its cluster needs it (YARN's job application
        finishes with it); the default ignores it."""

    def close(self) -> None:
        """Release everything (ports, connections). Called once, after all tasks ended."""
