"""A job's progress reports as a table (CSV, JSON) and a PNG plot.

Rows come from the job store (:meth:`tfdist.store.Store.progress`): one per
``TFDIST_PROGRESS`` report, with ``time``, ``task``, ``attempt`` and the report's fields.
Nested ``metrics`` are flattened into columns of their own. matplotlib is imported only
when a plot is drawn, with the Agg backend (no display needed).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tfdist.contract import MARK

COLUMNS = ["time", "elapsed", "task", "attempt", "epoch", "epochs", "step", "loss",
           "examples_per_sec", "steps_per_sec", "final"]


def flatten(rows: Iterable[dict[str, Any]], start: float | None = None) -> list[dict[str, Any]]:
    """One flat dict per report: the known columns, then each metric by name."""
    rows = list(rows)
    t0 = start if start is not None else min((r["time"] for r in rows), default=0.0)
    flat = []
    for r in rows:
        if MARK in r:  # a goodput mark (a save's cost, training's start) is not progress
            continue
        out = {k: r.get(k) for k in COLUMNS}
        out["elapsed"] = round(r["time"] - t0, 3)
        for k, v in (r.get("metrics") or {}).items():
            if k not in COLUMNS:
                out[k] = v
        flat.append(out)
    return flat


def to_csv(rows: Iterable[dict[str, Any]], start: float | None = None) -> str:
    flat = flatten(rows, start)
    extra = sorted({k for r in flat for k in r} - set(COLUMNS))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS + extra, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in flat:
        writer.writerow({k: "" if v is None else v for k, v in r.items()})
    return buf.getvalue()


def _series(flat: list[dict[str, Any]], key: str) -> dict[str, tuple[list[float], list[float]]]:
    series: dict[str, tuple[list[float], list[float]]] = {}
    for r in flat:
        value = r.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            xs, ys = series.setdefault(r["task"], ([], []))
            xs.append(r["elapsed"])
            ys.append(float(value))
    return series


def plot(rows: Iterable[dict[str, Any]], out: str | Path, *, title: str = "",
         start: float | None = None) -> Path:
    """Write a PNG: loss per task over time (top), throughput per task (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    flat = flatten(rows, start)
    rate_key = "examples_per_sec"
    if not _series(flat, rate_key):
        rate_key = "steps_per_sec"
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    try:
        for ax, key, label in ((top, "loss", "loss"),
                               (bottom, rate_key, rate_key.replace("_per_sec", "/s"))):
            series = _series(flat, key)
            for task, (xs, ys) in sorted(series.items()):
                ax.plot(xs, ys, marker="o", markersize=3, label=task)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            if series:
                ax.legend(loc="best", fontsize="small")
            else:
                ax.text(0.5, 0.5, f"no {label} reported", ha="center", va="center",
                        transform=ax.transAxes)
        bottom.set_xlabel("seconds since the job started")
        if title:
            top.set_title(title)
        fig.tight_layout()
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)
    return path
