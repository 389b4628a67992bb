"""Time to a target AUC on the click-through workload: MWMS, async PS, sync PS, backup PS.

Runs examples/recsys through ``tfdist run`` (local backend), two workers in every mode:

* ``mwms``: MultiWorkerMirroredStrategy, Keras ``fit`` (examples/recsys/mwms.yaml);
* ``async`` / ``sync`` / ``backup``: ParameterServerStrategy with two ps (the table split
  over both) and ``tfdist.runtime.sync`` in mode ``async``, ``sync`` (K = N = 2) or
  ``backup`` (K = N - 1 = 1) (examples/recsys/sync.yaml with ``--set``).

Same model, data, per-worker batch, optimizer (Adam) and learning rate; runs alternate
modes within each seed (the seed sets the initial weights and the shuffle). Worker 1 is
slowed by a real CPU limit: its process joins a cgroup with a CFS quota (cgroup v1
``cpu.cfs_quota_us``) of 1/f of the CPU rate it used while training in the un-slowed run
of the same mode and seed (a cpuacct cgroup sampled every 0.25 s), f = 1, 2, 4; the quota
is set once that worker has built its input pipeline, so start-up runs at full speed. Time to target is the chief's
wall time from the start of training to the first evaluation at or above the target
(evaluations included), from the run's progress reports.

``largest_rows``: the largest embedding table (rows, padded beyond the data's vocabulary
with ``--table-rows``) each strategy trains for 20 steps when EVERY task is limited to
``--memory-mb`` by a memory cgroup of its own (made directly, cgroup v1
``memory.limit_in_bytes``: tfdist's ``resources.memory`` is not enforced on the local
backend in this branch). MWMS keeps the table and Adam's two slots whole on each worker;
PSS (async, ClusterCoordinator loop) splits them over two ps. Sizes double until a run fails.

    python benchmarks/recsys.py --quick --json     # < 15 minutes; the last line is JSON
    python benchmarks/recsys.py --json             # the full size (generates ~3.4 GB first)
    python benchmarks/recsys.py --out r.json --plot auc.png    # raw runs saved after every run
    python benchmarks/recsys.py --plot-from r.json --plot auc.png   # redraw, no runs

Needs root (cgroups); tasks run on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parents[1]
RECSYS = ROOT / "examples" / "recsys"
TASK = Path(__file__).resolve().parent / "recsys_task.py"
MODES = ("mwms", "async", "sync", "backup")
MIN_QUOTA_US, PERIOD_US = 1000, 100_000


def _origin(controller: str) -> Path:
    """This process's cgroup (v1) for ``controller``: the benchmark's cgroups go below it."""
    base = Path("/sys/fs/cgroup") / controller
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return base / path.lstrip("/")
    return base


class Cgroups:
    """The benchmark's cgroups (v1): a CPU one with a quota and a cpuacct one for the slowed
    worker, and a parent for per-task memory cgroups; all removed at the end."""

    def __init__(self) -> None:
        for c in ("cpu", "cpuacct", "memory"):
            if not (Path("/sys/fs/cgroup") / c / "cgroup.procs").exists():
                raise SystemExit(f"tfdist: error: no cgroup v1 '{c}' controller at /sys/fs/cgroup/{c}")
        tag = f"tfdist-recsys-bench-{os.getpid()}"
        self.cpu = _origin("cpu") / tag
        self.cpuacct = _origin("cpuacct") / tag
        self.memory = _origin("memory") / tag
        for d in (self.cpu, self.cpuacct, self.memory):
            d.mkdir()

    def quota(self, cores: float | None, *, reset: bool = True) -> None:
        (self.cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        quota = -1 if cores is None else max(MIN_QUOTA_US, int(cores * PERIOD_US))
        (self.cpu / "cpu.cfs_quota_us").write_text(str(quota))
        if reset:
            (self.cpuacct / "cpuacct.usage").write_text("0")

    def cpu_seconds(self) -> float:
        return int((self.cpuacct / "cpuacct.usage").read_text()) / 1e9

    def _remove(self, d: Path) -> None:
        for _ in range(100):  # the job's processes may take a moment to be reaped
            with contextlib.suppress(OSError):
                for child in d.iterdir():
                    if child.is_dir():
                        child.rmdir()
                d.rmdir()
                return
            time.sleep(0.1)
        print(f"benchmark: could not remove {d}", file=sys.stderr)

    def close(self) -> None:
        for d in (self.cpu, self.cpuacct, self.memory):
            if d.exists():
                self._remove(d)


def _training(runs: Path, since: float) -> bool:
    """Has worker-1 of the run started after ``since`` built its input pipeline? (FileShards
    says so in its log: from then on it trains.) TF's import and the cluster's set-up run
    at full speed, so the quota slows training, not start-up."""
    with contextlib.suppress(OSError):
        for run_dir in runs.iterdir():
            log = run_dir / "logs" / "worker-1.log"
            if (
                run_dir.stat().st_mtime >= since - 1
                and log.exists()
                and "tfdist: input pipeline" in log.read_text()
            ):
                return True
    return False


def generate(out: Path, quick: bool) -> dict[str, Any]:
    if not (out / "manifest.json").exists():
        size = (
            ["--rows", "400000", "--files", "8", "--vocab-scale", "0.002", "--eval-rows", "8000"]
            if quick
            else ["--benchmark"]
        )
        subprocess.run(
            [sys.executable, str(RECSYS / "generate.py"), "--out", str(out), *size, "--jobs", "2"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    return json.loads((out / "manifest.json").read_text())


def run(
    args: argparse.Namespace,
    cg: Cgroups,
    mode: str,
    seed: int,
    *,
    cores: float | None = None,
    table_rows: int = 0,
    memory_mb: int = 0,
) -> dict[str, Any]:
    """One ``tfdist run``; the chief's final report and a few facts about the run."""
    wrap = [
        "python",
        str(TASK),
        "--slow",
        "worker-1",
        "--cpu-dir",
        str(cg.cpu),
        "--cpuacct-dir",
        str(cg.cpuacct),
    ]
    if memory_mb:
        wrap += ["--memory-mb", str(memory_mb), "--memory-parent", str(cg.memory)]
    train = [
        "python",
        "train.py",
        "--data",
        str(args.data / "train-*"),
        "--seed",
        str(seed),
        "--batch",
        str(args.batch),
        "--lr",
        str(args.lr),
        "--eval-every",
        str(args.eval_every),
    ]
    sets: list[str] = []
    if table_rows:  # the memory sweep: 20 steps, no target
        train += [
            "--table-rows",
            str(table_rows),
            "--max-steps",
            "20",
            "--eval-every",
            "10",
            "--target-auc",
            "1",
        ]
    else:
        train += [
            "--target",
            str(args.target),
            "--max-steps",
            str(args.max_steps),
            "--max-seconds",
            str(args.max_seconds),
        ]
    if mode == "mwms":
        job, loop = "mwms.yaml", "fit"
    elif mode == "pss_loop":
        job, loop = "pss_coordinator.yaml", "coordinator"
    else:
        job, loop = "sync.yaml", "sync"
        sets += [f"options.update.mode={mode}"]
        if mode == "backup":
            sets += ["options.update.replicas_to_aggregate=1"]
    command = [*wrap, "--", *train, "--loop", loop]
    cg.quota(None)  # full speed until the slowed worker has built its input pipeline
    cmd = [
        sys.executable,
        "-m",
        "tfdist.cli",
        "run",
        "--quiet",
        "--json",
        "--runs-dir",
        str(args.runs),
        str(RECSYS / job),
        "--set",
        f"command={json.dumps(command)}",
        "--set",
        "roles.worker=2",
    ]
    for s in sets:
        cmd += ["--set", s]
    start, start_wall = time.monotonic(), time.time()
    samples = []  # (time, slowed worker's CPU seconds): its rate while training is what f divides
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        proc = subprocess.Popen(cmd, stdout=so, stderr=se, text=True)
        limited = cores is None
        while proc.poll() is None:
            samples.append((time.time(), cg.cpu_seconds()))
            if not limited and _training(args.runs, start_wall):
                cg.quota(cores, reset=False)
                limited = True
            if time.monotonic() - start > args.run_timeout:
                proc.terminate()
            time.sleep(0.25)
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    wall = time.monotonic() - start
    try:
        summary = json.loads(stdout[stdout.index("{") :])
    except ValueError:
        return {
            "state": "no summary",
            "error": (stdout + stderr)[-500:],
            "wall_s": wall,
            "train_s": None,
            "reached": False,
            "final_auc": None,
            "time_to_target_s": None,
            "steps": None,
            "rate": None,
        }
    chief = "worker-0" if mode == "mwms" else "chief-0"
    rows = [
        json.loads(line) for line in (Path(summary["run_dir"]) / "progress.jsonl").read_text().splitlines()
    ]
    rows = [r for r in rows if r.get("task") == chief and "auc" in r.get("metrics", {})]
    final: dict[str, Any] = next((r for r in reversed(rows) if r.get("final")), {})
    rate = None
    if final.get("seconds") and len(samples) > 2:  # CPU over [training start, its end]
        t0, t1 = final["time"] - final["seconds"], final["time"]
        inside = [(t, c) for t, c in samples if t0 <= t <= t1]
        if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
            rate = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
    return {
        "rate": rate and round(rate, 4),
        "state": summary["state"],
        "root_cause": summary.get("root_cause"),
        "wall_s": round(wall, 2),
        "slow_worker_cpu_s": round(cg.cpu_seconds(), 3),
        "time_to_target_s": final.get("time_to_target_s"),
        "final_auc": final.get("final_auc"),
        "reached": bool(final.get("reached")),
        "steps": final.get("step"),
        "train_s": final.get("seconds"),
        "phases": final.get("phases"),  # train.py's: where the time to target went
        "curve": [(r["seconds"], r["metrics"]["auc"]) for r in rows if not r.get("final")],
    }


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def _phase(rs: list[dict[str, Any]], name: str) -> list[float]:
    return [r["phases"][name] for r in rs if (r.get("phases") or {}).get(name) is not None]


def spread(xs: list[float]) -> dict[str, float | None]:
    """min / median / max: three seeds on a shared machine differ by up to 3 x in the same
    cell, so the median alone hides whether a ratio is a difference or noise."""
    return {
        "min": round(min(xs), 3) if xs else None,
        "median": _median(xs),
        "max": round(max(xs), 3) if xs else None,
    }


def summarize(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per slow-down and mode: the median over seeds (``time_to_target_s``, the digits
    benchmark's shape) and its spread; runs that missed the target count in ``reached_runs``,
    not in the times."""
    table: dict[str, Any] = {}
    for factor, modes in runs.items():
        table[factor] = {}
        for mode, rs in modes.items():
            hit = [r["time_to_target_s"] for r in rs if r["reached"]]
            table[factor][mode] = {
                "time_to_target_s": _median(hit),
                "time_to_target_spread_s": spread(hit),
                "time_to_target_by_seed_s": [r["time_to_target_s"] if r["reached"] else None for r in rs],
                "final_auc": _median([r["final_auc"] for r in rs if r["final_auc"] is not None]),
                "reached": len(hit) == len(rs),
                "reached_runs": len(hit),
                "runs": len(rs),
                "train_s": _median([r["train_s"] for r in rs if r["train_s"] is not None]),
                # the first evaluation's time: mostly set-up (tracing, the first collective or ps call)
                "first_eval_s": _median([r["curve"][0][0] for r in rs if r.get("curve")]),
                # train.py's phases: set-up to the 10th update, then the mean update
                "first_10_updates_s": _median(_phase(rs, "first_10_updates_s")),
                "update_ms": _median(_phase(rs, "update_ms")),
            }
    return table


def ratios(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Each PS mode's time to target over MWMS's at the same slow-down: of the medians, and
    per seed (the two runs of a seed ran one after the other, so they saw about the same
    load). None where either missed the target."""
    out: dict[str, Any] = {}
    for factor, modes in runs.items():
        base = modes.get("mwms") or []
        for mode, rs in modes.items():
            if mode == "mwms" or not base:
                continue
            per_seed = []
            for m, r in zip(base, rs, strict=False):
                ok = m["reached"] and r["reached"] and m["time_to_target_s"]
                per_seed.append(round(r["time_to_target_s"] / m["time_to_target_s"], 3) if ok else None)
            mine = _median([r["time_to_target_s"] for r in rs if r["reached"]])
            theirs = _median([m["time_to_target_s"] for m in base if m["reached"]])
            out[f"{mode}/mwms {factor}"] = {
                "of_medians": round(mine / theirs, 3) if mine and theirs else None,
                "by_seed": per_seed,
            }
    return out


def plot(saved: dict[str, Any], path: Path) -> None:
    """AUC against training time, one panel per slow-down, one line per mode and seed
    (colour: mode; line style: seed); the target as a dashed line. Reads only what
    ``--out`` saves, so ``--plot-from`` redraws a finished run without training again."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = saved["runs"]
    factors = list(runs)
    colors = {"mwms": "tab:purple", "async": "tab:red", "sync": "tab:blue", "backup": "tab:green"}
    styles = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(1, len(factors), figsize=(5 * len(factors), 4.2), sharey=True, squeeze=False)
    for ax, factor in zip(axes[0], factors, strict=True):
        for mode, rs in runs[factor].items():
            for i, r in enumerate(rs):
                curve = r.get("curve") or []
                if not curve:
                    continue
                ax.plot(
                    [c[0] for c in curve],
                    [c[1] for c in curve],
                    color=colors.get(mode, "black"),
                    ls=styles[r.get("seed", i) % len(styles)],
                    marker=".",  # an evaluation: the curve starts at the first one, after set-up
                    lw=1.2,
                    alpha=0.8,
                )
        ax.axhline(saved["target_auc"], color="grey", lw=0.8, ls="--")
        ax.set_title(f"worker 1 slowed {factor} (CPU quota)")
        ax.set_xlabel("training time (s, evaluations included)")
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("held-out AUC")
    seeds = sorted({r.get("seed", 0) for modes in runs.values() for rs in modes.values() for r in rs})
    handles = [
        plt.Line2D([], [], color=c, label=m) for m, c in colors.items() if any(m in runs[f] for f in runs)
    ]
    handles += [
        plt.Line2D([], [], color="black", ls=styles[s % len(styles)], label=f"seed {s}") for s in seeds
    ]
    axes[0][0].legend(handles=handles, loc="lower right", fontsize=7)
    data = saved.get("data", {})
    fig.suptitle(
        f"examples/recsys: {data.get('rows', 0):,} rows, {data.get('total_vocab', 0):,} ids, "
        f"{saved.get('seeds')} seed(s), target AUC {saved['target_auc']} (dashed); "
        f"{saved.get('started', '')}, load {saved.get('load', {}).get('median_during')}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _fail(message: str) -> NoReturn:
    """Bad input: one line on stderr, exit 2, before anything has started."""
    print(f"tfdist: error: {message}", file=sys.stderr)
    sys.exit(2)


def _check_plotting(path: Path | None) -> None:
    """Before anything starts: matplotlib is there and the PNG's folder exists."""
    if path is None:
        return
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        _fail("--plot needs matplotlib: pip install 'tfdist[plot]'")
    if path.suffix.lower() != ".png" or not path.parent.is_dir():
        _fail(f"--plot {path}: give a .png file in an existing folder")


def redraw(args: argparse.Namespace) -> None:
    """``--plot-from``: the table, spread and ratios recomputed from the saved runs by this
    code (so an older result gains them), the PNG redrawn; no cgroups, no root."""
    saved = load_saved(args.plot_from)
    saved["table"], saved["ratios"] = summarize(saved["runs"]), ratios(saved["runs"])
    if args.plot:
        plot(saved, args.plot)
    report(saved, args.json)


def load_saved(path: Path) -> dict[str, Any]:
    """A result written by ``--out``: it must carry the raw runs, curves included."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        _fail(f"--plot-from {path}: cannot read it as JSON ({e})")
    if not isinstance(saved, dict) or not isinstance(saved.get("runs"), dict) or "target_auc" not in saved:
        _fail(f"--plot-from {path}: no 'runs' and 'target_auc': give a file written by --out")
    return saved


def sweep(args: argparse.Namespace, cg: Cgroups, mode: str) -> tuple[int, list[dict[str, Any]]]:
    """Double the table until a run fails under the per-task memory limit."""
    best, tried = 0, []
    for rows in args.sweep_rows:
        r = run(args, cg, mode, 0, table_rows=rows, memory_mb=args.memory_mb)
        ok = r["state"] == "succeeded" and (r["steps"] or 0) >= 20
        tried.append(
            {
                "rows": rows,
                "ok": ok,
                "state": r["state"],
                "root_cause": r.get("root_cause"),
                "wall_s": r["wall_s"],
            }
        )
        print(
            f"  memory {args.memory_mb} MiB, {mode}, {rows:,} rows: {'trained' if ok else r['state']}",
            file=sys.stderr,
            flush=True,
        )
        if not ok:
            break
        best = rows
    return best, tried


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="400,000 rows, 1 seed, a short budget: < 15 minutes")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON line at the end")
    p.add_argument("--data", type=Path, help="data directory (generated there if it has no manifest.json)")
    p.add_argument("--seeds", type=int, help="seeds per mode and slow-down (default 3, --quick 1)")
    p.add_argument("--factors", default="1,2,4", help="slow-downs of worker 1")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--target", type=float, default=0.9, help="fraction of the attainable AUC")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--max-steps", type=int, help="budget of updates per run")
    p.add_argument("--max-seconds", type=float, help="budget of training seconds per run")
    p.add_argument("--memory-mb", type=int, default=1024, help="per-task memory limit of the table sweep")
    p.add_argument("--sweep-rows", help="table sizes to try, comma-separated")
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument(
        "--out", type=Path, help="write the result and the raw runs (curves included) here, after every run"
    )
    p.add_argument("--plot", type=Path, help="draw AUC against training time per mode and seed into this PNG")
    p.add_argument(
        "--plot-from", type=Path, help="no runs: summarize and redraw (with --plot) a result written by --out"
    )
    args = p.parse_args()
    _check_plotting(args.plot)
    if args.plot_from:
        redraw(args)
        return
    if os.geteuid() != 0:
        sys.exit("tfdist: error: the benchmark needs root for cgroups (the CPU quota and the memory limits)")
    args.seeds = args.seeds or (1 if args.quick else 3)
    args.max_steps = args.max_steps or (600 if args.quick else 20000)
    args.max_seconds = args.max_seconds or (30 if args.quick else 900)
    args.run_timeout = args.max_seconds * 3 + 120
    factors = [int(f) for f in args.factors.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= set(MODES) or not factors or min(factors) < 1:
        sys.exit(f"tfdist: error: --modes from {', '.join(MODES)}; --factors positive integers")
    quick_rows = [2 << 20, 4 << 20, 8 << 20, 16 << 20]
    args.sweep_rows = [int(x) for x in args.sweep_rows.split(",")] if args.sweep_rows else quick_rows
    tmp = Path(tempfile.mkdtemp(prefix="tfdist-recsys-bench-"))
    args.data = args.data or tmp / "data"
    args.runs = tmp / "runs"
    args.started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    args.load_before = os.getloadavg()
    manifest = generate(args.data, args.quick)
    print(
        f"data: {manifest['rows']:,} rows, {manifest['total_vocab']:,} ids, attainable AUC "
        f"{manifest['attainable_auc']}, target {args.target * manifest['attainable_auc']:.4f}",
        file=sys.stderr,
    )
    cg = Cgroups()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {f"{f}x": {m: [] for m in modes} for f in factors}
    rates: dict[tuple[str, int], float] = {}
    loads = []
    largest: dict[str, Any] = {}
    try:
        for seed in range(args.seeds):
            for f in factors:
                for mode in modes:
                    cores = None
                    if f > 1:
                        if (mode, seed) not in rates:  # no 1x run of this mode and seed: measure one
                            rates[(mode, seed)] = run(args, cg, mode, seed)["rate"] or 0.5
                        cores = rates[(mode, seed)] / f
                    r = run(args, cg, mode, seed, cores=cores)
                    if f == 1:
                        rates[(mode, seed)] = r["rate"] or 0.5  # cores; 0.5 if the run gave no rate
                    r.update(seed=seed, factor=f, quota_cores=cores, load=os.getloadavg()[0])
                    loads.append(r["load"])
                    runs[f"{f}x"][mode].append(r)
                    if args.out:  # a run cut short still leaves the seeds done so far
                        partial = {**result(args, manifest, runs, largest, loads), "partial": True}
                        args.out.write_text(json.dumps({**partial, "runs": runs}, indent=1))
                    print(
                        f"seed {seed} {f}x {mode:6s}: {r['state']}, target {'reached in ' + str(r['time_to_target_s']) + ' s' if r['reached'] else 'not reached'}, "
                        f"AUC {r['final_auc']}, {r['steps']} steps, slowed worker quota {cores and round(cores, 3)} cores",
                        file=sys.stderr,
                        flush=True,
                    )
        if not args.no_sweep:
            for mode in ("mwms", "pss_loop"):
                best, tried = sweep(args, cg, mode)
                largest["mwms" if mode == "mwms" else "ps"] = best
                largest[f"tried_{'mwms' if mode == 'mwms' else 'ps'}"] = tried
    finally:
        cg.close()
    out = result(args, manifest, runs, largest, loads)
    if args.out:
        args.out.write_text(json.dumps({**out, "runs": runs}, indent=1))
    if args.plot:
        plot({**out, "runs": runs}, args.plot)
    report(out, args.json)


def result(
    args: argparse.Namespace,
    manifest: dict[str, Any],
    runs: dict[str, dict[str, list[dict[str, Any]]]],
    largest: dict[str, Any],
    loads: list[float],
) -> dict[str, Any]:
    return {
        "table": summarize(runs),
        "ratios": ratios(runs),
        "largest_rows": {k: largest.get(k) for k in ("mwms", "ps")},
        "memory_mb": args.memory_mb,
        "memory_limit": "cgroup v1 memory.limit_in_bytes per task, set by benchmarks/recsys_task.py",
        "sweep": {k: v for k, v in largest.items() if k.startswith("tried_")},
        "data": {k: manifest[k] for k in ("rows", "total_vocab", "attainable_auc")},
        "target_auc": round(args.target * manifest["attainable_auc"], 5),
        "seeds": args.seeds,
        "batch": args.batch,
        "lr": args.lr,
        "max_seconds": args.max_seconds,
        "started": args.started,
        "load": {"before": [round(x, 2) for x in args.load_before], "median_during": _median(loads)},
    }


def report(out: dict[str, Any], as_json: bool) -> None:
    """The table on stderr; with ``as_json`` the result as one JSON line, last (the
    ``--quick --json`` contract: the raw runs stay in ``--out``)."""
    for factor, row in out["table"].items():
        print(
            factor,
            "  ".join(
                f"{m} {v['time_to_target_s']} s [{v['time_to_target_spread_s']['min']}-"
                f"{v['time_to_target_spread_s']['max']}] ({v['reached_runs']}/{v['runs']}) AUC {v['final_auc']}"
                for m, v in row.items()
            ),
            file=sys.stderr,
        )
    if as_json:
        print(json.dumps({k: v for k, v in out.items() if k != "runs"}))


if __name__ == "__main__":
    main()
