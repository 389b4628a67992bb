"""Scale of ``--backend kubernetes``: N supervised pods on kwok's fake nodes (``scale.py
--backend kubernetes``; needs the real control plane of ``make kube-up``).

One ``tfdist run --backend kubernetes`` of N workers (``strategy: none``, ``success:
all-workers``) in a namespace of its own, every pod told by kwok's ``tfdist-after/all`` label
(kube/stages.yaml) to run ``--sleep`` seconds and succeed. Meanwhile this process watches the
namespace's pods itself (one watch, as tfdist does) and notes, on its own clock, when each pod
was ADDED, first reported Running, first reported ended (Succeeded/Failed) and DELETED. It
watches in the API server's Table form without the objects (a row of a few hundred bytes
per change: name and status column), so that its own load on the shared 2 cores stays small
(a full watch decodes ~40 KB per change at 1,000 pods: see ``--bare`` and the README):

- created: seconds from launching tfdist until the API server had all N pods;
- running: seconds from launching tfdist until tfdist recorded the last task running
  (events.jsonl), i.e. created, bound by the scheduler, played Running by kwok, and seen;
- notice: median and max seconds from this watch seeing a pod end until tfdist recorded the
  task's exit (both hear the same watch stream; this is tfdist's own delay);
- deleted: seconds from the last pod's end until the last pod was deleted (the ConfigMap,
  Service and NetworkPolicy too: checked, not timed);
- wall: seconds from launching tfdist until it exited;
- cpu: CPU seconds each process spent from the launch until everything was deleted: tfdist
  (the supervisor), and the control plane's own processes (found by their state directory,
  next to the kubeconfig), to show where the time goes on a machine they all share.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
TFDIST = [sys.executable, "-m", "tfdist.cli"]
IMAGE = "registry.example/tfdist-train:1"  # never pulled: kwok plays the pods


def _kubeconfig() -> Path:
    found = Path(os.environ.get("KUBECONFIG") or ROOT / ".kube" / "config")
    if not found.exists():
        raise SystemExit("no control plane: start one with `make kube-up` (or set KUBECONFIG)")
    return found


class PodClock:
    """One watch on a namespace's pods, noting when each pod was seen in each state."""

    def __init__(self, api_client: Any, namespace: str, job: str) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.job = job
        self.added: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.deleted: dict[str, float] = {}
        self.task: dict[str, str] = {}  # pod name: its task
        self.columns: list[str] = []  # the Table's column names (sent with the first rows)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> None:
        resp = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        self.version = json.loads(resp.data)["metadata"]["resourceVersion"]
        self.thread.start()

    def _watch(self) -> None:
        while not self.stopping.is_set():
            query = [("watch", "true"), ("resourceVersion", self.version), ("timeoutSeconds", 5),
                     ("allowWatchBookmarks", "true"), ("includeObject", "None")]
            request = self.api_client.param_serialize(
                "GET", f"/api/v1/namespaces/{self.namespace}/pods", query_params=query,
                auth_settings=["BearerToken"], header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
            resp = self.api_client.call_api(*request[:4], _request_timeout=60).response
            buffer = b""
            for chunk in resp.stream(amt=None, decode_content=False):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._on(json.loads(line), time.time())
            resp.release_conn()

    def _on(self, event: dict[str, Any], now: float) -> None:
        obj = event["object"]
        self.version = obj["metadata"].get("resourceVersion", self.version)
        if event["type"] in ("BOOKMARK", "ERROR"):
            return
        columns = [c["name"] for c in obj.get("columnDefinitions") or []] or self.columns
        self.columns = columns
        for row in obj.get("rows") or []:
            cells = dict(zip(columns, row["cells"], strict=False))
            name, status = cells["Name"], cells["Status"]
            self.added.setdefault(name, now)
            # pod names are <job>-<task>-a<attempt> (tfdist.backends.k8s.names)
            self.task[name] = name.removeprefix(f"{self.job}-").rsplit("-a", 1)[0]
            if status == "Running":
                self.running.setdefault(name, now)
            if status in ("Completed", "Error", "Succeeded", "Failed"):
                self.ended.setdefault(name, now)
            if event["type"] == "DELETED":
                self.deleted.setdefault(name, now)

    def wait_deleted(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.added and set(self.deleted) >= set(self.added):
                return True
            time.sleep(0.1)
        return False


COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def _components(kubeconfig: Path) -> dict[str, psutil.Process]:
    """The control plane's processes of this kubeconfig (kube/kube.sh keeps their state,
    named on their command lines, in the directory of the kubeconfig)."""
    state = str(kubeconfig.resolve().parent)
    found = {}
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] in COMPONENTS and state in " ".join(proc.info["cmdline"] or []):
            found[proc.info["name"]] = proc
    return found


def _cpu(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def _call(api_client: Any, method: str, path: str, body: Any = None) -> Any:
    resp = api_client.call_api(*api_client.param_serialize(
        method, path, body=body, auth_settings=["BearerToken"],
        header_params={"Content-Type": "application/json", "Accept": "application/json"})[:4])
    data = resp.read()
    if resp.status >= 400 and not (method == "DELETE" and resp.status == 404):
        raise SystemExit(f"{method} {path}: {resp.status} {data[:300]!r}")
    return json.loads(data) if data else {}


def _drop_namespace(api_client: Any, namespace: str) -> None:
    """Delete the namespace and wait until it is gone: its pods' deletion must not load
    the next measurement."""
    _call(api_client, "DELETE", f"/api/v1/namespaces/{namespace}")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        resp = api_client.call_api(*api_client.param_serialize(
            "GET", f"/api/v1/namespaces/{namespace}", auth_settings=["BearerToken"])[:4])
        resp.read()
        if resp.status == 404:
            return
        time.sleep(0.5)


def _leftovers(api_client: Any, namespace: str) -> list[str]:
    found = []
    for path in (f"/api/v1/namespaces/{namespace}/pods", f"/api/v1/namespaces/{namespace}/services",
                 f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies",
                 f"/api/v1/namespaces/{namespace}/configmaps"):
        found += [o["metadata"]["name"] for o in _call(api_client, "GET", path).get("items") or []
                  if o["metadata"]["name"] not in ("kubernetes", "kube-root-ca.crt")]
    return found


def kube_one(n: int, sleep: float, tmp: Path) -> dict[str, Any]:
    from kubernetes import config

    kubeconfig = _kubeconfig()
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    namespace = f"scale-{n}-{uuid.uuid4().hex[:6]}"
    _call(api_client, "POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    try:
        deadline = time.monotonic() + 60  # pods are refused until the default ServiceAccount exists
        while not _call(api_client, "GET", f"/api/v1/namespaces/{namespace}/serviceaccounts").get("items"):
            if time.monotonic() > deadline:
                raise SystemExit(f"namespace {namespace}: no default service account after 60 s")
            time.sleep(0.2)
        return _measure(api_client, kubeconfig, namespace, n, sleep, tmp)
    finally:
        _drop_namespace(api_client, namespace)


def _measure(api_client: Any, kubeconfig: Path, namespace: str, n: int, sleep: float, tmp: Path) -> dict[str, Any]:
    job = {"name": f"scale{n}", "strategy": "none", "success": "all-workers", "command": ["python", "train.py"],
           "roles": {"worker": n},
           "kubernetes": {"image": IMAGE, "namespace": namespace, "labels": {"tfdist-after/all": f"{sleep:g}s"}}}
    jobfile = tmp / f"k8s-{n}.json"
    jobfile.write_text(json.dumps(job))
    clock = PodClock(api_client, namespace, job["name"])
    clock.start()
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    out_file = (tmp / f"k8s-summary-{n}.json").open("w+")
    err_file = (tmp / f"k8s-stderr-{n}.txt").open("w+")  # a file: a pipe would fill while we poll
    components = _components(kubeconfig)
    before = {name: _cpu(p) for name, p in components.items()}
    t0 = time.time()
    proc = psutil.Popen([*TFDIST, "run", "-q", "--json", "--backend", "kubernetes", "--runs-dir",
                         str(tmp / f"k8s-runs-{n}"), str(jobfile)],
                        stdout=out_file, stderr=err_file, text=True, env=env, cwd=tmp)
    tfdist_cpu = 0.0
    while proc.poll() is None:
        tfdist_cpu = max(tfdist_cpu, _cpu(proc))
        time.sleep(0.1)
    t_exit = time.time()
    proc.wait()
    err_file.seek(0)
    err = err_file.read()
    all_deleted = clock.wait_deleted(60)
    clock.stopping.set()
    cpu = {"tfdist": round(tfdist_cpu, 1), **{name: round(_cpu(p) - before[name], 1) for name, p in components.items()}}
    out_file.seek(0)
    summary = json.loads(out_file.read() or "{}")
    if proc.returncode != 0:
        raise SystemExit(f"{n} pods: tfdist exited {proc.returncode}: {err.strip()[-500:]}")
    left = _leftovers(api_client, namespace)
    events = [json.loads(ln) for ln in (Path(summary["run_dir"]) / "events.jsonl").read_text().splitlines()]
    running = [e["time"] for e in events if e["state"] == "running"]
    recorded_end = {e["task"]: e["time"] for e in events if e["state"] in ("succeeded", "failed")}
    ended_by_task = {clock.task[pod]: seen for pod, seen in clock.ended.items()}  # one attempt each
    lags = [recorded - ended_by_task[task] for task, recorded in recorded_end.items() if task in ended_by_task]
    return {
        "pods": n,
        "first_created_s": round(min(clock.added.values()) - t0, 2),
        "created_s": round(max(clock.added.values()) - t0, 2),
        "pods_seen": len(clock.added),
        "all_running_s": round(max(running) - t0, 2),
        "notice_median_ms": round(1000 * statistics.median(lags), 1) if lags else None,
        "notice_max_ms": round(1000 * max(lags), 1) if lags else None,
        "deleted_after_last_end_s": round(max(clock.deleted.values()) - max(clock.ended.values()), 2)
        if all_deleted and clock.ended else None,
        "tfdist_exit_after_last_end_s": round(t_exit - max(clock.ended.values()), 2) if clock.ended else None,
        "left_behind": left,
        "wall_s": round(t_exit - t0, 2),
        "cpu_s": cpu,
        "stderr_lines": len(err.splitlines()),
    }


def print_row(r: dict[str, Any]) -> None:
    print(f"{r['pods']:5d} pods: first created {r['first_created_s']} s, all created {r['created_s']} s, all running {r['all_running_s']} s, exit noticed "
          f"median {r['notice_median_ms']} ms (max {r['notice_max_ms']}), all deleted "
          f"{r['deleted_after_last_end_s']} s after the last end (tfdist exited after "
          f"{r['tfdist_exit_after_last_end_s']} s), left behind: {len(r['left_behind'])}, wall {r['wall_s']} s\n"
          f"        CPU s: {', '.join(f'{k} {v}' for k, v in r['cpu_s'].items())}; tfdist stderr lines: "
          f"{r['stderr_lines']}", flush=True)


def bare_creates(n: int, stub: bool) -> dict[str, Any]:
    """The pods tfdist renders for N workers, created straight from here, as many at once as
    tfdist sends them (and their run's ConfigMap first), without a supervisor; with ``stub``
    each pod's TF_CONFIG (now a reference to the cluster map in the ConfigMap; before, the
    map itself: ~41 KB per pod at 1,000) is cut to ``{}``. Shows what the pod's size costs
    the control plane: seconds until all are created, and until all run."""
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import config

    from tfdist import cluster
    from tfdist.backends.k8s import names, supervised
    from tfdist.backends.k8s.client import path, request
    from tfdist.backends.k8s.creates import CREATE_CONCURRENCY
    from tfdist.jobspec import load

    api_client = config.new_client_from_config(config_file=str(_kubeconfig()))
    namespace = f"bare-{n}-{uuid.uuid4().hex[:6]}"
    _call(api_client, "POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    try:
        while not _call(api_client, "GET", f"/api/v1/namespaces/{namespace}/serviceaccounts").get("items"):
            time.sleep(0.2)
        job = load.from_dict({"name": f"bare{n}", "strategy": "none", "command": ["python", "train.py"],
                              "roles": {"worker": n}, "kubernetes": {"image": IMAGE, "namespace": namespace,
                                                                     "labels": {"tfdist-after/all": "1h"}}}, "bench")
        tasks = cluster.plan(job, names.addresses(job, "pods"), run_dir="/run")
        bodies = [supervised.task_pod(job, task, 0, "bare") for task in tasks]
        for body in bodies if stub else []:
            for env in body["spec"]["containers"][0]["env"]:
                if env["name"] == "TF_CONFIG":
                    env["value"] = "{}"
        request(api_client, "POST", path("ConfigMap", namespace), body=supervised.cluster_config_map(job, "bare"))
        size = len(json.dumps(bodies[0]))
        t0 = time.time()
        with ThreadPoolExecutor(CREATE_CONCURRENCY) as pool:
            list(pool.map(lambda body: request(api_client, "POST", path("Pod", namespace), body=body), bodies))
        created = time.time() - t0
        while True:
            items = json.loads(request(api_client, "GET", path("Pod", namespace)))["items"]
            if sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running") == n:
                break
            time.sleep(0.2)
        return {"pods": n, "tf_config": "stub" if stub else "full", "pod_bytes": size,
                "created_s": round(created, 2), "all_running_s": round(time.time() - t0, 2)}
    finally:
        _drop_namespace(api_client, namespace)
