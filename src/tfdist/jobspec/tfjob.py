"""Kubeflow TFJob manifests (kubeflow.org/v1), read as a tfdist job and written from one.

Teams that already have TFJob manifests can run them with tfdist unchanged: locally as
processes, to debug a cluster job on a laptop, or on Kubernetes. :func:`to_job_dict`
returns a plain job dict that :mod:`.load` checks like any job file, so the two paths share
every later check. :func:`manifest` is the way back: the TFJob of a job, around the pod
templates :mod:`tfdist.backends.k8s.manifests` renders (that module knows pods; this one
knows what a TFJob says about them), so both directions of the mapping live here.

What maps: roles (Chief/Master, Worker, PS, Evaluator), replicas, ``command`` + ``args``,
``env`` and resources of the container named ``tensorflow``, ``restartPolicy``,
``runPolicy.backoffLimit`` and ``activeDeadlineSeconds``, ``successPolicy``, and the pod
settings tfdist knows (image, pull policy, working directory, service account, node
selector, tolerations, a PVC volume mounted in the container, the ``tfjob-port``).
Variables tfdist itself sets (``TF_CONFIG``, ``TFDIST_*``) are dropped, except that
``TFDIST_STRATEGY`` and ``TFDIST_OPTIONS`` restore what tfdist rendered, so a rendered TFJob
reads back as the same job. Anything that cannot be honoured (an env value from
``valueFrom``) is a one-line SpecError naming the TFJob field, and so are the job spec's own
refusals (:func:`field_namer` renames tfdist's paths to the manifest's).

What a TFJob may say and tfdist keeps as said: an image per replica type
(``roles.<role>.kubernetes.image``); a container without ``command`` (the image's entrypoint:
``roles.<role>.kubernetes.args``, rendered back as is, refused for a local run with how to
give the command); ``cleanPodPolicy``; no ``TF_USE_LEGACY_KERAS`` (``legacy_keras: null``).
A manifest chooses no TF2 strategy: without ``TFDIST_STRATEGY``, PS replicas without a Chief
are a TF1-style job and run with plain TF_CONFIG (``strategy: none``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from tfdist import contract
from tfdist.contract import ROLES
from tfdist.jobspec.kube import Reader, expand, resources_of
from tfdist.jobspec.model import JobSpec
from tfdist.jobspec.text import env_name, exact_text

API_VERSION = "kubeflow.org/v1"
#: The replica type of each role; Master is the old name of Chief.
REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
ROLE_NAMES = {**{kind.lower(): role for role, kind in REPLICA_TYPES.items()}, "master": "chief"}
#: A replica spec's restartPolicy as tfdist's restart policy.
RESTART_POLICIES = {
    "Never": "never",
    "OnFailure": "on-failure",
    "Always": "always",
    "ExitCode": "exit-code",
}
_RESTART_NAMES = {policy: name for name, policy in RESTART_POLICIES.items()}
SUCCESS_POLICIES = {"": "chief", "AllWorkers": "all-workers"}
#: The container the training operator reads (tfdist names its container so in every form).
CONTAINER = "tensorflow"
#: The port name the training operator builds TF_CONFIG from.
PORT_NAME = "tfjob-port"
#: The pod label holding a replica's index, and the variable tfdist reads it into.
INDEX_LABEL = "training.kubeflow.org/replica-index"
INDEX_VAR = "TFDIST_REPLICA_INDEX"
#: The shipped workdir in every rendered form (``kubernetes.ship_workdir``, see
#: :mod:`tfdist.backends.k8s.workdir`): the ConfigMap's key, where it is mounted, where it is
#: unpacked, and the unpacker run as ``<python> -c WORKDIR_UNPACK <command...>``. A rendered
#: TFJob read back gives the job's own command (:func:`unwrap_workdir`).
WORKDIR_KEY = "workdir.tar.gz"
WORKDIR_ARCHIVE_DIR = "/tfdist/archive"
WORKDIR_MOUNT = "/tfdist/workdir"
WORKDIR_VOLUMES = ("tfdist-workdir-archive", "tfdist-workdir")
WORKDIR_UNPACK = (
    "import os,sys,tarfile\n"
    f"d={WORKDIR_MOUNT!r}\n"
    f"with tarfile.open({WORKDIR_ARCHIVE_DIR + '/' + WORKDIR_KEY!r}) as t:\n"
    " t.extractall(d,**({'filter':'data'} if hasattr(tarfile,'data_filter') else {}))\n"
    "os.chdir(d)\n"
    "try:\n"
    " os.execvp(sys.argv[1],sys.argv[1:])\n"
    "except OSError as e:\n"
    " sys.exit(f'tfdist: cannot run {sys.argv[1]}: {e}')\n"
)
#: The chief's and workers' program of a ``multi_worker_mirrored`` job in every form
#: (:mod:`tfdist.node.leave_program`: the tasks leave together): a ConfigMap's key, mounted
#: read-only from the volume named LEAVE_VOLUME at LEAVE_MOUNT; the command is
#: ``<python> LEAVE_PATH SECONDS <script...>``. A rendered TFJob read back gives the job's
#: own command (:func:`unwrap_leave`).
LEAVE_KEY = "leave_program.py"
LEAVE_MOUNT = "/tfdist/program"
LEAVE_PATH = f"{LEAVE_MOUNT}/{LEAVE_KEY}"
LEAVE_VOLUME = "tfdist-program"
#: Volumes tfdist renders for itself: not the job's (a local run provides neither).
TFDIST_VOLUMES = (*WORKDIR_VOLUMES, LEAVE_VOLUME)
#: Set by tfdist or the training operator; never part of the user's job.
DROPPED_ENV = ("TF_CONFIG", "PYTHONUNBUFFERED", "JOB_COMPLETION_INDEX")


def manifest(job: JobSpec, metadata: dict[str, Any], templates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The TFJob of ``job``, given each active role's pod template (the inverse of
    :func:`to_job_dict`: a rendered TFJob reads back as the same job)."""
    replica_specs = {
        REPLICA_TYPES[role]: {
            "replicas": job.replicas(role),
            "restartPolicy": _RESTART_NAMES[job.restart_policy_for(role)],
            "template": template,
        }
        for role, template in templates.items()
    }
    run_policy: dict[str, Any] = {
        "backoffLimit": job.restart.max_restarts,
        "cleanPodPolicy": job.kubernetes.clean_pod_policy or "Running",
    }
    if job.deadline_seconds:
        run_policy["activeDeadlineSeconds"] = math.ceil(job.deadline_seconds)
    spec: dict[str, Any] = {"runPolicy": run_policy}
    if job.success == "all-workers":
        spec["successPolicy"] = "AllWorkers"
    spec["tfReplicaSpecs"] = replica_specs
    return {"apiVersion": API_VERSION, "kind": "TFJob", "metadata": metadata, "spec": spec}


# -- reading ---------------------------------------------------------------------------------


def to_job_dict(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The tfdist job dict of a TFJob manifest; SpecError with the field for bad input."""
    r = Reader(source)
    name, meta, spec, replica_specs = _header(r, data)
    roles, pods = _replicas(r, replica_specs)
    order = [role for role in ROLES if role in roles]
    job: dict[str, Any] = {"name": name, **_runtime(r, roles, pods, order)}
    if all("command" in roles[role] for role in order):  # an entrypoint role must not inherit
        _hoist(roles, order, "command", job)
    _hoist_env(roles, order, job)
    restarts = {role: roles[role].pop("restart") for role in order}
    if len(set(restarts.values())) == 1:
        job["restart"] = {"policy": restarts[order[0]]}
    else:
        job["restart"] = {"policy": "never"}
        for role in order:
            roles[role]["restart"] = restarts[role]
    job["roles"] = {role: roles[role] for role in order}
    clean = _run_policy(r, spec, job)
    success = r.get(spec, "successPolicy", str, "spec", "")
    if success not in SUCCESS_POLICIES:
        raise r.fail("spec.successPolicy", f'expected "" or AllWorkers, got {success!r}')
    if SUCCESS_POLICIES[success] != "chief":
        job["success"] = SUCCESS_POLICIES[success]
    job["kubernetes"] = _kubernetes(r, meta, pods, order)
    if clean is not None:
        if clean not in ("Running", "All", "None"):
            raise r.fail("spec.runPolicy.cleanPodPolicy", f"expected Running, All or None, got {clean!r}")
        job["kubernetes"]["clean_pod_policy"] = clean
    images = [pods[role]["image"] for role in order]
    common = max(images, key=images.count)
    if common is not None:
        job["kubernetes"]["image"] = common
    for role in order:  # each replica type keeps its own image
        if pods[role]["image"] != common and pods[role]["image"] is not None:
            roles[role].setdefault("kubernetes", {})["image"] = pods[role]["image"]
    return job


def _header(r: Reader, data: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The job's name, metadata, spec and replica specs, each checked to be there."""
    api = data.get("apiVersion")
    if api != API_VERSION:
        raise r.fail("apiVersion", f"expected kubeflow.org/v1 for a TFJob, got {api!r}")
    meta = r.get(data, "metadata", dict, "", {})
    name = r.get(meta, "name", str, "metadata")
    if not name:
        raise r.fail("metadata.name", "give the job a name")
    spec = r.get(data, "spec", dict, "", None)
    if spec is None:
        raise r.fail("spec", "a TFJob needs a spec with tfReplicaSpecs")
    replica_specs = r.get(spec, "tfReplicaSpecs", dict, "spec")
    if not replica_specs:
        raise r.fail("spec.tfReplicaSpecs", "give at least one replica type (Chief, Worker)")
    return name, meta, spec, replica_specs


def _replicas(r: Reader, replica_specs: dict[Any, Any]) -> tuple[dict[str, dict], dict[str, dict]]:
    """Each replica type as (tfdist role dict, pod-level facts), by role."""
    roles: dict[str, dict[str, Any]] = {}
    pods: dict[str, dict[str, Any]] = {}
    for key, replica in replica_specs.items():
        path = f"spec.tfReplicaSpecs.{key}"
        role = ROLE_NAMES.get(key.lower()) if isinstance(key, str) else None
        if role is None:
            raise r.fail(path, "unknown replica type; use Chief (or Master), Worker, PS, Evaluator")
        if role in roles:
            raise r.fail(path, f"a second {role} replica spec (Chief and Master are the same)")
        if not isinstance(replica, dict):
            raise r.fail(path, "expected a mapping")
        roles[role], pods[role] = _role(r, replica, path)
    return roles, pods


def _runtime(
    r: Reader, roles: dict[str, Any], pods: dict[str, dict[str, Any]], order: list[str]
) -> dict[str, Any]:
    """Strategy, options and legacy Keras (what tfdist's own variables said) and the drain
    (what its leave program is given), once per job."""
    found: dict[str, Any] = {}
    strategies = {pods[role]["strategy"] for role in order} - {None}
    if len(strategies) > 1:
        raise r.fail("spec.tfReplicaSpecs", "TFDIST_STRATEGY differs between replica types")
    found["strategy"] = strategies.pop() if strategies else _strategy_of(roles)
    options = [pods[role]["options"] for role in order if pods[role]["options"] is not None]
    if options:
        found["options"] = options[0]
    drains = {pods[role]["drain"] for role in order} - {None}
    if len(drains) > 1:
        raise r.fail("spec.tfReplicaSpecs", f"the seconds after {LEAVE_PATH} differ between replica types")
    if drains:
        found["drain_seconds"] = drains.pop()  # the leave program's: the job's drain
    legacy = {pods[role]["legacy_keras"] for role in order} - {None}
    if legacy == {False}:
        found["legacy_keras"] = False
    elif not legacy:
        found["legacy_keras"] = None  # the manifest did not ask: the image's Keras as it is
    return found


def _run_policy(r: Reader, spec: dict[str, Any], job: dict[str, Any]) -> str | None:
    """``runPolicy``'s backoff limit and deadline into ``job``; its cleanPodPolicy, unchecked."""
    run_policy = r.get(spec, "runPolicy", dict, "spec", {})
    clean = r.get(run_policy, "cleanPodPolicy", str, "spec.runPolicy")
    backoff = r.get(run_policy, "backoffLimit", int, "spec.runPolicy")
    if backoff is not None:
        if backoff < 0:
            raise r.fail("spec.runPolicy.backoffLimit", f"must be 0 or more (got {backoff})")
        job["restart"]["max_restarts"] = backoff
    deadline = r.get(run_policy, "activeDeadlineSeconds", int, "spec.runPolicy")
    if deadline is not None:
        if deadline <= 0:
            raise r.fail("spec.runPolicy.activeDeadlineSeconds", f"must be positive ({deadline})")
        job["deadline_seconds"] = deadline
    return clean  # type: ignore[no-any-return]


def _strategy_of(roles: dict[str, Any]) -> str:
    """A manifest names no TF2 strategy: PS without Chief is TF1 style (plain TF_CONFIG);
    ParameterServerStrategy needs the chief's coordinator, so PS with a Chief is that."""
    if "ps" in roles:
        return "parameter_server" if "chief" in roles else "none"
    return "multi_worker_mirrored"


def local_notes(data: dict[str, Any], source: str) -> list[str]:
    """One warning for the volumes a manifest mounts, which a local run does not provide."""
    paths: list[str] = []
    specs = (data.get("spec") or {}).get("tfReplicaSpecs") or {}
    for replica in specs.values() if isinstance(specs, dict) else []:
        pod = ((replica or {}).get("template") or {}).get("spec") or {} if isinstance(replica, dict) else {}
        for c in pod.get("containers") or [] if isinstance(pod, dict) else []:
            for mount in (c.get("volumeMounts") or []) if isinstance(c, dict) else []:
                if isinstance(mount, dict) and mount.get("name") in TFDIST_VOLUMES:
                    continue  # the shipped workdir (a local run starts in it) or tfdist's program
                where = mount.get("mountPath") if isinstance(mount, dict) else None
                if isinstance(where, str) and where not in paths:
                    paths.append(where)
    if not paths:
        return []
    return [
        f"{source}: the TFJob mounts volumes at {', '.join(paths)}; a local run does not provide "
        "them (tasks see this machine's paths there)"
    ]


_FIELDS = {
    "name": "metadata.name",
    "roles": "spec.tfReplicaSpecs",
    "deadline_seconds": "spec.runPolicy.activeDeadlineSeconds",
    "restart.max_restarts": "spec.runPolicy.backoffLimit",
    "restart.policy": "spec.tfReplicaSpecs.*.restartPolicy",
    "success": "spec.successPolicy",
    "strategy": "env TFDIST_STRATEGY",
    "kubernetes.namespace": "metadata.namespace",
    "drain_seconds": "spec.tfReplicaSpecs.*.template.spec.containers[tensorflow].command (its seconds)",
}
_ROLE_FIELDS = {"replicas": "replicas", "restart": "restartPolicy"}


def field_namer(data: dict[str, Any]) -> Callable[[str], str]:
    """A function naming a tfdist field path as the TFJob manifest's field (for errors)."""
    keys = {}
    specs = (data.get("spec") or {}).get("tfReplicaSpecs") or {}
    for key in specs if isinstance(specs, dict) else []:
        if isinstance(key, str) and key.lower() in ROLE_NAMES:
            keys[ROLE_NAMES[key.lower()]] = key
    container = "template.spec.containers[tensorflow]"

    def name(path: str) -> str:
        if path in _FIELDS:
            return _FIELDS[path]
        parts = path.split(".")
        if parts[0] == "roles" and len(parts) > 2:
            head = f"spec.tfReplicaSpecs.{keys.get(parts[1], parts[1])}"
            field = _ROLE_FIELDS.get(parts[2])
            return f"{head}.{field}" if field else f"{head}.{container}.{'.'.join(parts[2:])}"
        if parts[0] in ("command", "env", "kubernetes"):
            tail = parts[-1:] if parts[0] == "kubernetes" else parts
            return f"spec.tfReplicaSpecs.*.{container}.{'.'.join(tail)}"
        return path

    return name


def _hoist(roles: dict[str, dict[str, Any]], order: list[str], key: str, job: dict) -> None:
    """Write the most common value once at the top level, as a person would."""
    values = [roles[role].get(key) for role in order]
    top = max(values, key=values.count)
    job[key] = top
    for role in order:
        if roles[role].get(key) == top:
            roles[role].pop(key, None)


def _hoist_env(roles: dict[str, dict[str, Any]], order: list[str], job: dict) -> None:
    envs = [roles[role].get("env", {}) for role in order]
    common = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs[1:])}
    if common:
        job["env"] = common
    for role in order:
        rest = {k: v for k, v in roles[role].pop("env", {}).items() if k not in common}
        if rest:
            roles[role]["env"] = rest


def _role(r: Reader, replica: dict[str, Any], path: str) -> tuple[dict, dict]:
    """One replica spec -> (tfdist role dict, pod-level facts to merge across roles)."""
    replicas = r.get(replica, "replicas", int, path, 1)
    if replicas < 0:
        raise r.fail(f"{path}.replicas", f"must be 0 or more (got {replicas})")
    policy = r.get(replica, "restartPolicy", str, path, "Never")
    if policy not in RESTART_POLICIES:
        raise r.fail(
            f"{path}.restartPolicy", f"expected one of {', '.join(RESTART_POLICIES)}, got {policy!r}"
        )
    template = r.get(replica, "template", dict, path, {})
    pod = r.get(template, "spec", dict, f"{path}.template", {})
    pod_path = f"{path}.template.spec"
    containers = r.get(pod, "containers", list, pod_path, [])
    main = next((c for c in containers if isinstance(c, dict) and c.get("name") == CONTAINER), None)
    if main is None:
        raise r.fail(
            f"{pod_path}.containers",
            "no container named 'tensorflow' (the name the training operator requires)",
        )
    cpath = f"{pod_path}.containers[tensorflow]"
    given = r.get(main, "command", list, cpath)
    args = r.get(main, "args", list, cpath, [])
    given_text = [exact_text(v, f"{cpath}.command[{i}]", r.source) for i, v in enumerate(given or [])]
    args_text = [exact_text(v, f"{cpath}.args[{i}]", r.source) for i, v in enumerate(args)]
    role: dict[str, Any] = {"replicas": replicas, "restart": RESTART_POLICIES[policy]}
    env, seen, facts = _container_env(r, main, cpath)
    if env:
        role["env"] = env
    drain: float | None = None
    if given:
        command = [expand(part, seen) for part in [*given_text, *args_text]]
        inner = unwrap_workdir(command)
        role["command"], drain = unwrap_leave(command if inner is None else inner)
        if drain is not None and not (drain >= 0 and math.isfinite(drain)):
            raise r.fail(f"{cpath}.command", f"the seconds after {LEAVE_PATH} must be a number of 0 or more")
    else:  # the image's entrypoint runs; the command is unknown until one is given
        role["kubernetes"] = {"args": [expand(part, seen) for part in args_text]}
    facts["drain"] = drain
    resources = resources_of(r, r.get(main, "resources", dict, cpath, {}), f"{cpath}.resources")
    if resources:
        role["resources"] = resources
    facts.update(_pod_facts(r, pod, main, pod_path, cpath))
    # A TFJob's image holds its files unless tfdist rendered it shipping the workdir: then the
    # job read back ships it again (from the job file's workdir), else it ships nothing.
    facts["ship_workdir"] = bool(given) and inner is not None
    if facts["ship_workdir"] and facts["working_dir"] == WORKDIR_MOUNT:
        facts["working_dir"] = None
    return role, facts


def unwrap_leave(command: list[str]) -> tuple[list[str], float | None]:
    """The job's command inside a rendered ``<python> LEAVE_PATH SECONDS <script...>`` and
    its seconds (the job's ``drain_seconds``; NaN when they are not a number), or
    ``command`` itself and None."""
    if len(command) > 3 and command[1] == LEAVE_PATH:
        try:
            seconds = float(command[2])
        except ValueError:
            seconds = math.nan
        return [command[0], *command[3:]], seconds
    return command, None


def unwrap_workdir(command: list[str]) -> list[str] | None:
    """The job's command inside a rendered shipped-workdir command, or None if it is not one."""
    if len(command) > 3 and command[1:3] == ["-c", WORKDIR_UNPACK]:
        return command[3:]
    return None


def _container_env(
    r: Reader, main: dict[str, Any], cpath: str
) -> tuple[dict[str, str], dict[str, str], dict[str, Any]]:
    """The container's env: the user's variables, every variable as the kubelet expands it
    (for the command's ``$(VAR)``), and what tfdist's own variables said."""
    seen: dict[str, str] = {}  # the container's env so far, for $(VAR) expansion
    facts: dict[str, Any] = {"strategy": None, "options": None, "legacy_keras": None}
    env: dict[str, str] = {}
    for i, item in enumerate(r.get(main, "env", list, cpath, [])):
        epath = f"{cpath}.env[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise r.fail(epath, "expected a mapping with a name")
        key = env_name(item["name"], f"{epath}.name", r.source)
        if "valueFrom" in item:
            if key.startswith("TFDIST_"):
                continue  # the per-pod index tfdist renders itself
            raise r.fail(
                f"{cpath}.env[{key}].valueFrom",
                "tfdist runs tasks with literal values only; give 'value' instead",
            )
        raw = item.get("value")  # Kubernetes reads a missing value as ""
        value = expand("" if raw is None else exact_text(raw, f"{cpath}.env[{key}].value", r.source), seen)
        seen[key] = value
        if key == contract.STRATEGY:
            facts["strategy"] = value
        elif key == contract.OPTIONS:
            try:
                facts["options"] = json.loads(value)
            except ValueError:
                raise r.fail(f"{cpath}.env[{key}]", "is not valid JSON") from None
        elif key == contract.LEGACY_KERAS:
            facts["legacy_keras"] = value.strip().lower() not in ("0", "false", "")
        elif key in DROPPED_ENV or key.startswith("TFDIST_"):
            continue
        else:
            env[key] = value
    return env, seen, facts


def _pod_facts(
    r: Reader, pod: dict[str, Any], main: dict[str, Any], pod_path: str, cpath: str
) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "image": r.get(main, "image", str, cpath),
        "image_pull_policy": r.get(main, "imagePullPolicy", str, cpath),
        "working_dir": r.get(main, "workingDir", str, cpath),
        "service_account": r.get(pod, "serviceAccountName", str, pod_path),
        "node_selector": r.get(pod, "nodeSelector", dict, pod_path, {}),
        "tolerations": r.get(pod, "tolerations", list, pod_path, []),
        "port": None,
        "model_volume_claim": None,
        "model_mount_path": None,
    }
    for port in r.get(main, "ports", list, cpath, []):
        if isinstance(port, dict) and port.get("name") == PORT_NAME:
            facts["port"] = port.get("containerPort")
    claims = {
        v.get("name"): v["persistentVolumeClaim"].get("claimName")
        for v in r.get(pod, "volumes", list, pod_path, [])
        if isinstance(v, dict) and isinstance(v.get("persistentVolumeClaim"), dict)
    }
    for mount in r.get(main, "volumeMounts", list, cpath, []):
        if isinstance(mount, dict) and mount.get("name") in claims:
            facts["model_volume_claim"] = claims[mount["name"]]
            facts["model_mount_path"] = mount.get("mountPath")
            break
    return facts


#: The pod settings every replica type must agree on, by their TFJob names (for errors).
_POD_FIELDS = {
    "image_pull_policy": "imagePullPolicy",
    "working_dir": "workingDir",
    "service_account": "serviceAccountName",
    "node_selector": "nodeSelector",
    "tolerations": "tolerations",
    "port": "tfjob-port containerPort",
    "model_volume_claim": "persistentVolumeClaim volume",
    "model_mount_path": "mountPath of the claim",
    "ship_workdir": "shipped workdir (tfdist's unpacker before the command)",
}


def _kubernetes(
    r: Reader, meta: dict[str, Any], pods: dict[str, dict[str, Any]], order: list[str]
) -> dict[str, Any]:
    """Pod settings tfdist keeps once per job: every replica type must agree on them."""
    found: dict[str, Any] = {}
    for key in _POD_FIELDS:  # the image may differ: see to_job_dict
        values = [pods[role][key] for role in order]
        if key == "port":
            values = [v for v in values if v is not None] or [None]  # the evaluator has none
        if any(v != values[0] for v in values):
            raise r.fail(
                "spec.tfReplicaSpecs",
                f"tfdist uses one {_POD_FIELDS[key]} for every replica type; "
                f"found {', '.join(repr(v) for v in values)[:300]}",
            )
        if values[0] not in (None, {}, []):
            found[key] = values[0]
    namespace = r.get(meta, "namespace", str, "metadata")
    if namespace:
        found["namespace"] = namespace
    labels = {
        str(k): exact_text(v, f"metadata.labels.{k}", r.source)
        for k, v in r.get(meta, "labels", dict, "metadata", {}).items()
        if not str(k).startswith("tfdist.io/") and k != "app.kubernetes.io/managed-by"
    }
    if labels:
        found["labels"] = labels
    return found
