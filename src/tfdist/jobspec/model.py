"""The job model: what the user asked for, as records that are valid from the moment they exist.

:class:`JobSpec` holds the whole job; each backend's own settings are a small record of it
(``kubernetes``, ``ray``, ``spark``), ignored by the other backends. Every record forbids
unknown keys, so a typo is named with a did-you-mean (by :mod:`tfdist.jobspec.load`) instead of
silently ignored. Specs round-trip: ``JobSpec.build(job.to_dict())`` gives the same job. The
records are frozen dataclasses checked when built (see :mod:`tfdist.jobspec.schema`).
"""


import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any, Literal

from tfdist.contract import DATA_SCHEMES, ROLES, SINGLE_TASK_STRATEGIES
from tfdist.errors import SpecError
from tfdist.jobspec.schema import Record, rules

#: The names of tfdist.contract.STRATEGIES (a Literal must spell them out; a test keeps the
#: two equal).
Strategy = Literal[
    "multi_worker_mirrored",
    "parameter_server",
    "mirrored",
    "central_storage",
    "one_device",
    "none",
]
RestartPolicyName = Literal["never", "on-failure", "always", "exit-code"]
SuccessRule = Literal["chief", "all-workers"]
RoleName = Literal["chief", "worker", "ps", "evaluator"]

NAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")  # always fullmatch: "a\n" is no name
#: Most tasks in one job: one supervisor plans, watches and records every task (a process or
#: pod, a port and a log each); 1,000 is what tfdist is built and measured for.
MAX_TASKS = 2000
MAX_RESTARTS = 10_000
DAY = 86_400


def _at_most(limit: int, human: str) -> Callable[[Any], Any]:
    """A duration bound: a typo (``1e30``, ``.inf``) must not stop the clock or overflow a timer."""

    def check(value: Any) -> Any:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and not value <= limit:  # also nan
            raise ValueError(f"at most {limit:,} seconds ({human}), a finite number")
        return value

    return check


def _split_command(value: Any) -> Any:
    """A string is shlex-split; list items are already exact text (see tfdist.jobspec.load.normalize)."""
    if isinstance(value, str):
        return shlex.split(value)
    return value


def _role_shorthand(value: Any) -> Any:
    """``worker: 2`` means ``worker: {replicas: 2}``."""
    if isinstance(value, dict):
        return {k: ({"replicas": v} if isinstance(v, int) else v) for k, v in value.items()}
    return value


def _one_or_many(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _requirements(value: Any) -> Any:
    """One requirement or a list of them; an empty one is refused here (pip would be blamed)."""
    value = _one_or_many(value)
    if isinstance(value, list) and any(isinstance(v, str) and not v.strip() for v in value):
        raise ValueError("an empty requirement; give each as pip takes it, e.g. numpy==1.26.4")
    return value


def _index_url(value: Any) -> Any:
    """An http(s) URL with a host and nothing pip would read as more than a URL (a newline
    would start another line of its requirements; ``ftp://`` is retried by pip for 12 s)."""
    if not isinstance(value, str):
        return value
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        scheme, host = parts.scheme.lower(), parts.hostname
        parts.port  # noqa: B018 -- raises for a port that is not one (pip/uv would be blamed on the requirements)
    except ValueError:  # e.g. a malformed IPv6 host, a port out of range or not a number
        scheme, host = "", None
    if (any(c.isspace() or c < " " or c == "\x7f" for c in value)
            or scheme not in ("http", "https") or not host):
        raise ValueError(f"{value[:80]!r} is not an http(s) URL of a package index; give e.g. "
                         "https://pypi.org/simple")
    return value


def _given(default: str, hint: str = "") -> Callable[[Any], Any]:
    """A setting whose empty text would quietly mean its default (``--set spark.master=$M``
    with ``M`` unset runs the job somewhere else): empty or blank is refused, naming the
    default it would have been (or, with ``hint``, what to give)."""
    def check(value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError(f"empty; {hint or f'give a value, or leave it out for {default}'}")
        return value

    return check


def _job_name(value: Any) -> Any:
    """The name's pattern; a wrong length is left to the length rules (their message)."""
    if isinstance(value, str) and value and len(value) <= 63 and not NAME_RE.fullmatch(value):
        raise ValueError("use lower-case letters, digits and '-' (like a Kubernetes name)")
    return value


def _labels(value: Any) -> Any:
    """The job's own labels (``tfdist submit --label team=vision``): Kubernetes' rules for
    keys and values (:mod:`tfdist.jobspec.labels`), so one label is valid everywhere."""
    from tfdist.jobspec import labels

    if isinstance(value, dict):
        for k, v in value.items():
            said = labels.problem("labels", str(k), v if isinstance(v, str) else str(v))
            if said:
                raise ValueError(said.removeprefix("labels: ").removeprefix("labels."))
        return {str(k): str(v) for k, v in value.items()}
    return value


def _conf_strings(value: Any) -> Any:
    """Spark settings are text; ``true`` in YAML means Spark's ``true``. A nested mapping or a
    list is refused: ``conf: {spark: {yarn: {queue: x}}}`` would become the text of a dict
    under the key ``spark``, which Spark never reads; its keys are written whole."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not str(k).strip():
                raise ValueError("a setting with an empty name; give each setting its Spark name, "
                                 "e.g. spark.yarn.queue: research")
            if any(c < " " or c == "\x7f" for c in str(k)):
                raise ValueError(f"{str(k)[:60]!r}: a setting's name has no control characters")
            if isinstance(v, dict | list):
                raise ValueError(f"'{str(k)[:60]}' holds a {'mapping' if isinstance(v, dict) else 'list'}; "
                                 "write each setting as one dotted key, e.g. spark.yarn.queue: research")
        return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    return value


#: Most CPUs one task may ask for: far beyond any machine, so a typo (``1e9``) is refused
#: instead of becoming an unschedulable pod or a CPU quota the kernel rejects.
MAX_CPUS = 4096
#: Most memory one task may ask for (1 PiB), for the same reason; and at least one byte.
MAX_MEMORY = 1 << 50
_MEMORY = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(?:[eE]\+?(\d{1,3})|(Ki|Mi|Gi|Ti|Pi|Ei|k|K|M|G|T|P|E))?")
_MEMORY_FACTORS = {None: 1, "k": 1000, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
                   "P": 1000**5, "E": 1000**6, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30,
                   "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60}


def memory_bytes(text: str) -> int:
    """A memory size as every backend reads it, in bytes (rounded up to a whole byte): a
    Kubernetes quantity that names whole bytes (``512Mi``, ``4Gi``, ``1G``, ``1e9``,
    ``300000000``; YARN's ``4 Gi`` with a space too). ``ValueError`` says what is wrong:
    NaN, a sign, zero, more than :data:`MAX_MEMORY`, milli-bytes (``500m``) or any other text."""
    stripped = text.strip()
    found = _MEMORY.fullmatch(stripped.replace(" ", "", 1)) if len(text) <= 64 else None
    if found is None:
        if stripped[:1] in ("-", "+"):
            raise ValueError("a memory size has no sign; write e.g. 512Mi or 4Gi")
        if re.fullmatch(r"[0-9.]+[mun]", stripped):
            raise ValueError("that would be a fraction of a byte ('m' is milli); write e.g. 512Mi or 512M")
        raise ValueError("not a memory size; write e.g. 512Mi or 4Gi")
    number, exponent, unit = found.groups()
    size = Decimal(number) * (10 ** int(exponent) if exponent else _MEMORY_FACTORS[unit])
    if size <= 0:
        raise ValueError("must be more than 0 bytes; write e.g. 512Mi or 4Gi")
    if size > MAX_MEMORY:
        raise ValueError("more than any machine has (at most 1Pi per task)")
    return int(size.to_integral_value(rounding=ROUND_CEILING))


def _memory(value: Any) -> Any:
    """``resources.memory``: checked here once for every backend (YARN and Kubernetes read the
    same bytes); kept as written, apart from a space before the unit and ``K`` for ``k``, so
    a Kubernetes manifest gets the quantity the user wrote, in a form the API accepts."""
    if isinstance(value, str):
        memory_bytes(value)
        text = value.strip().replace(" ", "", 1)
        return text[:-1] + "k" if text.endswith("K") else text  # Kubernetes spells 1000 "k"
    return value


#: An input's or output's name: it becomes part of an environment variable's name.
DATA_NAME_RE = re.compile(r"[a-z][a-z0-9_]*")
MAX_DATA_NAME = 40


def check_data_name(name: Any, where: str) -> None:
    if not isinstance(name, str) or not DATA_NAME_RE.fullmatch(name) or len(name) > MAX_DATA_NAME:
        raise ValueError(f"{where}{str(name)[:60]!r} is no name for it; use lower-case letters, digits "
                         f"and '_', starting with a letter, at most {MAX_DATA_NAME} characters (e.g. train)")


def check_uri(uri: str, where: str, glob: bool = True) -> None:
    """A path or a URI of a scheme some store handles (``glob``: with ``*?[`` in it)."""
    if not uri.strip():
        raise ValueError(f"{where}: an empty path; give a path{', a glob' if glob else ''} or an hdfs:// URI")
    if not glob and any(c in uri for c in "*?["):
        raise ValueError(f"{where}: {uri[:80]!r} is a pattern; an output is one directory")
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme not in DATA_SCHEMES:
        raise ValueError(f"{where}: {uri[:80]!r}: no store handles {scheme}://; use a path on a shared "
                         "file system (or file://) or hdfs://")
    if scheme and "/" not in uri.split("://", 1)[1]:
        raise ValueError(f"{where}: {uri[:80]!r} has no path; write {scheme}://HOST/path")


def _data_names(value: Any) -> Any:
    if isinstance(value, dict):
        for name in value:
            check_data_name(name, "")
    return value


DURATION = rules(ge=0, before=_at_most(DAY, "1 day"))
POSITIVE_DURATION = rules(gt=0, before=_at_most(DAY, "1 day"))


@dataclass(frozen=True, kw_only=True)
class Resources(Record):
    """What one task of a role needs. ``gpus`` is honoured by every backend."""

    cpus: float | None = field(default=None, metadata=rules(gt=0, le=MAX_CPUS))
    gpus: int = field(default=0, metadata=rules(ge=0))
    #: A Kubernetes memory quantity, e.g. 4Gi (see :func:`memory_bytes`): the container's
    #: size on YARN and Kubernetes, the task's cgroup limit on the local backend.
    memory: str | None = field(default=None, metadata=rules(before=_memory))

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory is None else memory_bytes(self.memory)


@dataclass(frozen=True, kw_only=True)
class RoleKubernetesSpec(Record):
    """Per-role pod settings (Kubernetes only; a TFJob may give each replica type its own)."""

    #: Default: kubernetes.image.
    image: str | None = field(default=None, metadata=rules(before=_given("kubernetes.image")))
    #: Only for a role without any command: the image's own entrypoint runs with these
    #: arguments (a TFJob container without command); only --as tfjob can express it.
    args: list[str] | None = None


@dataclass(frozen=True, kw_only=True)
class RoleSpec(Record):
    """One role (chief, worker, ps, evaluator): how many tasks and how they run."""

    replicas: int = field(default=1, metadata=rules(ge=0))  # an int, never a bool: `worker: true`
    command: list[str] | None = field(default=None, metadata=rules(before=_split_command))
    env: dict[str, str] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    restart: RestartPolicyName | None = None
    kubernetes: RoleKubernetesSpec = field(default_factory=RoleKubernetesSpec)


@dataclass(frozen=True, kw_only=True)
class RestartSpec(Record):
    """Restart rules. ``max_restarts`` is one budget for the whole job.

    One *restart* is one decision to start tasks again, whether it restarts one task (a
    parameter-server worker) or the whole group (all-reduce training).
    """

    policy: RestartPolicyName = "never"
    max_restarts: int = field(default=3, metadata=rules(ge=0, le=MAX_RESTARTS))
    backoff_seconds: float = field(default=1.0, metadata=DURATION)
    backoff_max_seconds: float = field(default=30.0, metadata=DURATION)
    #: Keep a standby process per task that has already imported TensorFlow (and the
    #: script's imports), so a restart skips that start-up; local backend only (each idle
    #: spare holds ~200 MB of private memory: see docs/goodput.md).
    warm_spares: bool = False


@dataclass(frozen=True, kw_only=True)
class CommunicationSpec(Record):
    """MultiWorkerMirroredStrategy collective options."""

    implementation: Literal["auto", "ring", "nccl"] = "auto"
    bytes_per_pack: int = field(default=0, metadata=rules(ge=0))
    timeout_seconds: float | None = field(default=None, metadata=POSITIVE_DURATION)


@dataclass(frozen=True, kw_only=True)
class PartitionSpec(Record):
    """ParameterServerStrategy variable partitioning (MinSizePartitioner)."""

    min_shard_bytes: int = field(default=256 << 10, metadata=rules(gt=0))
    max_shards: int | None = field(default=None, metadata=rules(ge=1))  # default: number of ps


@dataclass(frozen=True, kw_only=True)
class UpdateSpec(Record):
    """How parameter-server updates are applied (see tfdist.runtime.sync.config)."""

    mode: Literal["async", "sync", "backup", "timeout", "stale"] = "async"
    replicas_to_aggregate: int | None = field(default=None, metadata=rules(ge=1))
    timeout_seconds: float | None = field(default=None, metadata=POSITIVE_DURATION)
    min_replicas: int = field(default=1, metadata=rules(ge=1))
    max_staleness: int = field(default=0, metadata=rules(ge=0))


@dataclass(frozen=True, kw_only=True)
class StrategyOptions(Record):
    """Options the runtime reads to build the strategy and the input pipeline."""

    communication: CommunicationSpec = field(default_factory=CommunicationSpec)
    partition: PartitionSpec | None = None
    auto_shard: Literal["auto", "file", "data", "off"] = "auto"
    update: UpdateSpec = field(default_factory=UpdateSpec)


@dataclass(frozen=True, kw_only=True)
class KubernetesSpec(Record):
    """Where and how the job runs on Kubernetes (ignored by other backends)."""

    image: str | None = field(default=None, metadata=rules(before=_given(
        "", "give the container image the tasks run in, e.g. tensorflow/tensorflow:2.21.0")))
    #: The container's working directory (default: the image's).
    working_dir: str | None = field(default=None, metadata=rules(
        before=_given("the image's working directory")))
    namespace: str = "default"
    service_account: str | None = field(default=None, metadata=rules(
        before=_given("the namespace's default account")))
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    model_volume_claim: str | None = field(default=None, metadata=rules(before=_given("no model volume")))
    model_mount_path: str = "/model"
    port: int = field(default=2222, metadata=rules(ge=1, le=65535))
    #: A pod no node can take this long fails its task.
    unschedulable_timeout_seconds: float = field(default=60.0, metadata=POSITIVE_DURATION)
    #: TFJob runPolicy.cleanPodPolicy (default: Running).
    clean_pod_policy: Literal["Running", "All", "None"] | None = None
    #: Ship the job's workdir to the pods (a ConfigMap, unpacked before the command; at most
    #: 1 MiB packed): default, unless ``working_dir`` names the image's own directory.
    ship_workdir: bool | None = None


@dataclass(frozen=True, kw_only=True)
class RaySpec(Record):
    """Placement on a Ray cluster (ignored by other backends)."""

    address: str | None = field(default=None, metadata=rules(
        before=_given("RAY_ADDRESS, else a local Ray started for the job")))
    placement: Literal["spread", "strict-spread", "pack"] = "spread"
    pip: list[str] = field(default_factory=list)
    working_dir: bool = True


@dataclass(frozen=True, kw_only=True)
class SparkSpec(Record):
    """Where and how the job runs on a Spark cluster (ignored by other backends)."""

    #: ``local[N]``, ``local-cluster[W,C,M]``, ``spark://HOST:PORT``, ``k8s://...``, ``yarn``.
    master: str | None = field(default=None, metadata=rules(
        before=_given("SPARK_MASTER, else local[N] on this machine")))
    #: The standalone master's web UI (``http://HOST:8080``): its JSON status tells tfdist the
    #: cluster's cores, so a gang that can never fit is refused before a session starts.
    master_ui: str | None = field(default=None, metadata=rules(before=_given("the master's own web UI")))
    #: Ship the job's workdir as a Spark archive; tasks start in the unpacked copy.
    ship_workdir: bool = True
    #: Extra Spark settings for the session (``spark.archives``, ``spark.pyspark.python``, ...).
    conf: dict[str, str] = field(default_factory=dict, metadata=rules(before=_conf_strings))
    #: How long a busy cluster is waited for (enough free task slots) before giving up.
    placement_timeout_seconds: float = field(default=60.0, metadata=rules(gt=0))


@dataclass(frozen=True, kw_only=True)
class YarnSpec(Record):
    """Where the job runs on a YARN cluster (``--backend yarn``; ignored by other backends).
    The cluster is the one ``HADOOP_CONF_DIR`` names."""

    #: The scheduler queue (a leaf's name, or its path such as ``root.research``).
    queue: str = field(default="default", metadata=rules(min_length=1, max_length=200))
    #: How long a busy queue is waited for (every container running) before giving up.
    placement_timeout_seconds: float = field(default=300.0, metadata=rules(gt=0))
    #: The Python the containers run the agent (and ``command: [python, ...]``) with; default:
    #: tfdist's own, which is right when every node has it at the same path.
    python: str | None = field(default=None, metadata=rules(min_length=1, max_length=500))
    #: How often YARN relaunches a container that ended without tfdist asking (in place).
    container_retries: int = field(default=3, metadata=rules(ge=0, le=100))
    #: Ship the job's workdir to every container (tasks start in the unpacked copy); false:
    #: tasks start in ``workdir`` as it is on the nodes (a shared file system).
    ship_workdir: bool = True


@dataclass(frozen=True, kw_only=True)
class PythonSpec(Record):
    """The job's own Python packages (see :mod:`tfdist.pyenv`): built once per distinct content
    into a cached environment layered over tfdist's own, so the job's pins win and everything
    else (TensorFlow, tfdist.runtime) comes from tfdist's environment."""

    requirements: list[str] = field(default_factory=list, metadata=rules(before=_requirements))
    requirements_file: str | None = field(default=None, metadata=rules(min_length=1))  # relative to workdir
    index_url: str | None = field(default=None, metadata=rules(before=_index_url))

    @property
    def wanted(self) -> bool:
        return bool(self.requirements or self.requirements_file)


@dataclass(frozen=True, kw_only=True)
class DataSpec(Record):
    """One named input of the job (see docs/data.md): its files and how they reach the tasks."""

    #: Paths, globs (``*?[`` in any part) and ``hdfs://`` URIs; a directory means every file
    #: under it. A string is a list of one.
    uris: list[str] = field(metadata=rules(before=_one_or_many))
    #: ``file``: the files are split over the training workers (balanced by bytes);
    #: ``none``: every task gets all of them.
    shard: Literal["file", "none"] = "file"
    #: ``stage``: copied to the task's node before the script starts (local paths);
    #: ``stream``: the script gets the URIs and reads them itself.
    mode: Literal["stage", "stream"] = "stage"

    def check(self) -> None:
        if not self.uris:
            raise ValueError("uris: give at least one path, glob or hdfs:// URI")
        for i, uri in enumerate(self.uris):
            check_uri(uri, f"uris.{i}")


@dataclass(frozen=True, kw_only=True)
class JobSpec(Record):
    """A whole distributed training job."""

    name: str = field(metadata=rules(min_length=1, max_length=63, before=_job_name))
    strategy: Strategy = "multi_worker_mirrored"
    command: list[str] | None = field(default=None, metadata=rules(before=_split_command))
    workdir: str = "."
    env: dict[str, str] = field(default_factory=dict)
    #: The job's own labels (team, experiment): kept with the job, shown and filtered in
    #: ``tfdist list`` and the dashboard; not the Kubernetes objects' (kubernetes.labels).
    labels: dict[str, str] = field(default_factory=dict, metadata=rules(before=_labels))
    roles: dict[RoleName, RoleSpec] = field(default_factory=dict, metadata=rules(before=_role_shorthand))
    restart: RestartSpec = field(default_factory=RestartSpec)
    success: SuccessRule = "chief"
    deadline_seconds: float | None = field(
        default=None, metadata=rules(gt=0, before=_at_most(30 * DAY, "30 days"))
    )
    hang_timeout_seconds: float | None = field(
        default=None, metadata=rules(gt=0, before=_at_most(30 * DAY, "30 days"))
    )
    stop_grace_seconds: float = field(default=10.0, metadata=rules(ge=0, before=_at_most(3600, "1 hour")))
    #: After success, how long the evaluator and workers may finish.
    drain_seconds: float = field(default=30.0, metadata=DURATION)
    #: TF_USE_LEGACY_KERAS=1 (true); false: not set; null: set for processes here, not in
    #: Kubernetes pods (the image decides: a TFJob that does not set it).
    legacy_keras: bool | None = True
    options: StrategyOptions = field(default_factory=StrategyOptions)
    kubernetes: KubernetesSpec = field(default_factory=KubernetesSpec)
    ray: RaySpec = field(default_factory=RaySpec)
    python: PythonSpec = field(default_factory=PythonSpec)
    spark: SparkSpec = field(default_factory=SparkSpec)
    yarn: YarnSpec = field(default_factory=YarnSpec)
    #: Named inputs (see docs/data.md).
    data: dict[str, DataSpec] = field(default_factory=dict, metadata=rules(before=_data_names))
    #: Named outputs: what the chief writes to the local directory in TFDIST_OUTPUT_<NAME> is
    #: copied to this URI as it is saved (see docs/data.md).
    outputs: dict[str, str] = field(default_factory=dict, metadata=rules(before=_data_names))

    def check(self) -> None:
        for name, uri in self.outputs.items():
            check_uri(uri, f"outputs.{name}", glob=False)
        self._check_roles()
        self._check_update()
        for role, spec in self.roles.items():
            if spec.replicas and not (spec.command or self.command) and spec.kubernetes.args is None:
                raise ValueError(f"roles.{role}.command: give a command here or at the top level")

    def _check_roles(self) -> None:
        """How many tasks of each role the strategy allows."""
        count = self.replicas
        total = sum(count(role) for role in ROLES)
        if total > MAX_TASKS:
            many = f"{total:,}" if total < 10**18 else "over 10^18"  # past the digit limit: no text
            raise ValueError(
                f"roles: {many} tasks is more than one job may have ({MAX_TASKS:,}): one "
                "supervisor starts, watches and records every task (a process or pod, a port and "
                "a log each); split the work into several jobs"
            )
        if count("chief") > 1:
            raise ValueError("roles.chief.replicas: a job has at most one chief")
        if count("evaluator") > 1:
            raise ValueError("roles.evaluator.replicas: a job has at most one evaluator")
        if count("chief") + count("worker") == 0:
            raise ValueError("roles: give at least one chief or worker")
        if self.strategy == "parameter_server":
            if count("ps") == 0:
                raise ValueError("roles.ps: parameter_server needs at least one ps task")
            if count("worker") == 0:
                raise ValueError("roles.worker: parameter_server needs at least one worker")
            if count("chief") == 0:
                raise ValueError(
                    "roles.chief: parameter_server needs a chief (it runs the ClusterCoordinator); "
                    "add chief: 1"
                )
        elif count("ps") and self.strategy != "none":
            raise ValueError(
                f"roles.ps: strategy {self.strategy} has no parameter servers; "
                "remove ps or use strategy: parameter_server (or none for a script that "
                "manages its own cluster)"
            )
        if self.strategy in SINGLE_TASK_STRATEGIES and count("chief") + count("worker") > 1:
            raise ValueError(
                f"strategy: {self.strategy} runs in one task; use one chief or one worker, "
                "or multi_worker_mirrored for several"
            )

    def _check_update(self) -> None:
        """Which parameter-server update modes the strategy and the roles allow."""
        count = self.replicas
        update = self.options.update
        if update.mode != "async" and self.strategy != "parameter_server":
            raise ValueError(
                f"options.update.mode: {update.mode} needs strategy: parameter_server "
                "(other strategies apply every update synchronously)"
            )
        if update.mode == "sync" and update.replicas_to_aggregate not in (None, count("worker")):
            raise ValueError(
                f"options.update.replicas_to_aggregate: sync aggregates all {count('worker')} workers; "
                "use mode: backup to aggregate fewer or more"
            )
        if update.mode == "timeout" and update.timeout_seconds is None:
            raise ValueError("options.update.timeout_seconds: mode timeout needs it, e.g. 0.5")

    # -- derived views ---------------------------------------------------------------

    def replicas(self, role: str) -> int:
        spec = self.roles.get(role)  # type: ignore[call-overload]
        return spec.replicas if spec else 0

    def role(self, role: str) -> RoleSpec:
        return self.roles.get(role) or RoleSpec(replicas=0)  # type: ignore[call-overload]

    def command_for(self, role: str) -> list[str]:
        """The role's argv; empty when it runs its image's own entrypoint (see require_commands)."""
        return list(self.role(role).command or self.command or [])

    def image_for(self, role: str) -> str | None:
        return self.role(role).kubernetes.image or self.kubernetes.image

    def require_commands(self) -> None:
        """SpecError unless every role has a command tfdist can start (not an image's entrypoint)."""
        for role in ROLES:
            if self.replicas(role) and not self.command_for(role):
                raise SpecError(
                    f"roles.{role}: its container has no command, so the image's own start command "
                    "would run, and tfdist does not know it; give it with "
                    f"--set command='python train.py ...' (or roles.{role}.command)"
                )

    def restart_policy_for(self, role: str) -> RestartPolicyName:
        return self.role(role).restart or self.restart.policy

    @property
    def restart_budget(self) -> int:
        """Restarts training can actually use: 0 when no training role's policy restarts
        (the evaluator's restarts are counted apart; see supervisor/policy.py)."""
        roles = [r for r in ROLES if self.replicas(r) and r != "evaluator"]
        if all(self.restart_policy_for(r) == "never" for r in roles):
            return 0
        return self.restart.max_restarts

    @property
    def has_chief(self) -> bool:
        return self.replicas("chief") > 0

    def to_dict(self) -> dict[str, Any]:
        return self.dump(exclude_defaults=True)

    def to_yaml(self) -> str:
        from tfdist.jobspec import yaml  # here, not at the top: a job built without a file never needs PyYAML

        return yaml.dump(self.to_dict())
