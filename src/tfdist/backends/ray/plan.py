"""Pure decisions of the Ray backend: the gang's bundles, its runtime_env, whether it can
ever fit a cluster. No Ray here (the checks are unit-tested without a cluster).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfdist import durations
from tfdist.cluster import TaskId
from tfdist.errors import SpecError
from tfdist.jobspec.model import JobSpec
from tfdist.pyenv.plan import ray_packages
from tfdist.runs import DEFAULT_RUNS

#: ``ray.placement`` -> Ray's placement group strategy.
PLACEMENT_STRATEGIES = {"spread": "SPREAD", "strict-spread": "STRICT_SPREAD", "pack": "PACK"}
#: Never uploaded with the working directory.
WORKING_DIR_EXCLUDES = [
    ".git", ".venv", "venv", ".tox", "node_modules", "__pycache__", "*.pyc",
    ".pytest_cache", ".mypy_cache", ".ruff_cache", DEFAULT_RUNS,
]


def bundles_for(job: JobSpec, tasks: list[TaskId]) -> list[dict[str, float]]:
    """One bundle per task: ``cpus`` (default 1) and ``gpus`` of its role."""
    out = []
    for t in tasks:
        res = job.role(t.role).resources
        bundle: dict[str, float] = {"CPU": float(res.cpus if res.cpus is not None else 1)}
        if res.gpus:
            bundle["GPU"] = float(res.gpus)
        out.append(bundle)
    return out


def runtime_env_for(job: JobSpec, runs_root: Path | None = None) -> dict[str, Any]:
    """The job's runtime_env: its workdir travels with it, and its own pip packages."""
    env: dict[str, Any] = {}
    if job.ray.working_dir:
        workdir = Path(job.workdir).resolve()
        excludes = list(WORKING_DIR_EXCLUDES)
        if runs_root is not None:  # never upload the runs of earlier jobs
            with contextlib.suppress(ValueError):
                runs = Path(runs_root).resolve().relative_to(workdir)
                if runs.parts:  # not the workdir itself
                    excludes.append("/" + runs.as_posix())
        env["working_dir"] = str(workdir)
        env["excludes"] = excludes
    packages = ray_packages(job)  # ray.pip and python.requirements (see tfdist.pyenv)
    if packages:
        env["pip"] = packages
    return env


def describe(resources: dict[str, float]) -> str:
    """``1 CPU, 1 GPU`` (``nothing`` for no resources), as messages show a bundle or a node."""
    return ", ".join(f"{v:g} {k}" for k, v in sorted(resources.items())) or "nothing"


def _fits(bundle: dict[str, float], node: dict[str, float]) -> bool:
    return all(node.get(k, 0.0) >= v for k, v in bundle.items())


def gang_problem(
    bundles: list[dict[str, float]], strategy: str, nodes: list[dict[str, float]]
) -> str | None:
    """Why this gang can never be placed on nodes with these total resources (or None).

    Exact for what cannot fit in any case (a bundle bigger than every node, more than the
    cluster's total, fewer nodes than STRICT_SPREAD needs); the rest is left to Ray.
    """
    total: dict[str, float] = {}
    for node in nodes:
        for k, v in node.items():
            total[k] = total.get(k, 0.0) + v
    need: dict[str, float] = {}
    for b in bundles:
        for k, v in b.items():
            need[k] = need.get(k, 0.0) + v
    short = [k for k, v in need.items() if total.get(k, 0.0) < v]
    if short:
        has = {k: total.get(k, 0.0) for k in need}
        return f"it needs {describe(need)} in all but the cluster has only {describe(has)}"
    for b in bundles:
        if not any(_fits(b, n) for n in nodes):
            return f"one task needs {describe(b)} and no node has that much"
    if strategy == "STRICT_SPREAD":
        free = list(range(len(nodes)))  # greedy: biggest bundles first, one node each
        for b in sorted(bundles, key=lambda b: -sum(b.values())):
            match = next((i for i in free if _fits(b, nodes[i])), None)
            if match is None:
                return (
                    f"placement strict-spread puts each of the {len(bundles)} tasks on its own "
                    f"node but only {sum(1 for n in nodes if _fits(b, n))} nodes can hold one"
                )
            free.remove(match)
    return None


def plain_resources(resources: dict[str, Any]) -> dict[str, float]:
    """CPU, GPU and custom resources; not memory, object store or node markers."""
    skip = ("memory", "object_store_memory")
    return {
        k: float(v)
        for k, v in resources.items()
        if k not in skip and not k.startswith("node:") and not k.startswith("accelerator_type")
    }


#: What a Ray address may be, for the one-line error that names it.
ADDRESS_FORMS = "HOST:PORT (e.g. 127.0.0.1:6379), [IPv6]:PORT, auto or ray://HOST:PORT"


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``[IPv6]:PORT``) as the host and port to try a TCP connect on; a
    ValueError says what is wrong with it in the user's terms (not ``int()``'s). An empty host
    is this machine."""
    host, colon, port = address.rpartition(":")
    if not colon:
        raise ValueError(f"no port in {address!r}; give {ADDRESS_FORMS}")
    if host.startswith("[") != host.endswith("]") or ("[" in host[1:-1] or "]" in host[1:-1]):
        raise ValueError(f"unbalanced brackets around the host {host!r}; give {ADDRESS_FORMS}")
    if host.startswith("["):
        host = host[1:-1]
        if not host or not all(c in "0123456789abcdefABCDEF:." for c in host):
            raise ValueError(f"{host!r} is not an IPv6 address; give {ADDRESS_FORMS}")
    elif ":" in host:
        raise ValueError(f"an IPv6 host goes in brackets ([{host}]:{port}); give {ADDRESS_FORMS}")
    elif host and not all(c.isascii() and (c.isalnum() or c in ".-_") for c in host):
        raise ValueError(f"{host!r} is not a host name or address; give {ADDRESS_FORMS}")
    if not (port.isascii() and port.isdigit()):
        raise ValueError(f"the port {port!r} is not a number; give {ADDRESS_FORMS}")
    number = int(port)
    if not 1 <= number <= 65535:
        raise ValueError(f"the port {number} is not between 1 and 65535; give {ADDRESS_FORMS}")
    return host or "127.0.0.1", number


PLACEMENT_TIMEOUT_ENV = "TFDIST_RAY_PLACEMENT_TIMEOUT"
DEFAULT_PLACEMENT_TIMEOUT = 60.0
MAX_PLACEMENT_TIMEOUT = 86_400.0


def placement_timeout(environ: Mapping[str, str]) -> float:
    """Seconds a busy cluster is waited for (``TFDIST_RAY_PLACEMENT_TIMEOUT``); a value that is
    no number of seconds from 0 to a day is bad input, said in one line."""
    text = environ.get(PLACEMENT_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_PLACEMENT_TIMEOUT
    value = durations.seconds(text, MAX_PLACEMENT_TIMEOUT)
    if value is None:
        raise SpecError(
            f"{PLACEMENT_TIMEOUT_ENV}: {text[:40]!r} is not a number of seconds from 0 to "
            f"{MAX_PLACEMENT_TIMEOUT:,.0f}; give e.g. {PLACEMENT_TIMEOUT_ENV}=60, or unset it for the "
            f"default ({DEFAULT_PLACEMENT_TIMEOUT:g})"
        )
    return value
