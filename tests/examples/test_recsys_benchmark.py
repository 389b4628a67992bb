"""benchmarks/recsys.py's summary and PNG, from a saved result (no training, no root).

``--plot-from`` recomputes the table from the raw runs that ``--out`` saved, so these
checks exercise the same code that summarizes a real run: the spread over seeds, the
per-seed ratios against MWMS, the PNG, the ``--json`` last line, and bad input.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "recsys.py"


def _run(factor: str, seed: int, reached: bool, t: float) -> dict:
    curve = [[t / 2, 0.70], [t, 0.79 if reached else 0.75]]
    return {
        "seed": seed,
        "factor": int(factor[0]),
        "state": "succeeded",
        "reached": reached,
        "time_to_target_s": t if reached else None,
        "final_auc": curve[-1][1],
        "train_s": t,
        "steps": 100,
        "curve": curve,
    }


def _saved(tmp_path: Path) -> Path:
    times = {"mwms": [10.0, 14.0, 12.0], "sync": [12.0, 21.0, 15.0], "backup": [30.0, 9.0, 6.0]}
    runs = {
        "1x": {m: [_run("1x", s, True, t) for s, t in enumerate(ts)] for m, ts in times.items()},
        "4x": {
            "mwms": [_run("4x", s, True, 40.0) for s in range(3)],
            "backup": [_run("4x", 0, False, 60.0), _run("4x", 1, True, 20.0), _run("4x", 2, True, 28.0)],
        },
    }
    saved = {
        "table": {},
        "data": {"rows": 1000, "total_vocab": 50, "attainable_auc": 0.87},
        "target_auc": 0.78,
        "seeds": 3,
        "started": "2026-12-05 05:00:00 UTC",
        "load": {"before": [9.0, 8.0, 7.0], "median_during": 10.0},
        "largest_rows": {"mwms": 2, "ps": 4},
        "runs": runs,
    }
    path = tmp_path / "result.json"
    path.write_text(json.dumps(saved))
    return path


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=120)


def test_plot_from_summarizes_the_spread_over_seeds_and_draws_the_png(tmp_path):
    png = tmp_path / "auc.png"
    done = _bench("--plot-from", str(_saved(tmp_path)), "--plot", str(png), "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    sync = out["table"]["1x"]["sync"]
    assert sync["time_to_target_s"] == 15.0
    assert sync["time_to_target_spread_s"] == {"min": 12.0, "median": 15.0, "max": 21.0}
    assert sync["time_to_target_by_seed_s"] == [12.0, 21.0, 15.0]
    backup4 = out["table"]["4x"]["backup"]  # the seed that missed counts in reached_runs, not in the times
    assert backup4["reached_runs"] == 2 and backup4["runs"] == 3 and backup4["reached"] is False
    assert backup4["time_to_target_spread_s"] == {"min": 20.0, "median": 24.0, "max": 28.0}
    assert out["ratios"]["sync/mwms 1x"] == {"of_medians": 1.25, "by_seed": [1.2, 1.5, 1.25]}
    assert out["ratios"]["backup/mwms 4x"]["by_seed"] == [None, 0.5, 0.7]
    assert "runs" not in out and out["largest_rows"] == {"mwms": 2, "ps": 4}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "sync 15.0 s [12.0-21.0] (3/3)" in done.stderr


def test_plot_from_refuses_a_file_without_runs_in_one_line_exit_2(tmp_path):
    summary_only = tmp_path / "summary.json"
    summary_only.write_text(json.dumps({"table": {}, "target_auc": 0.78}))
    png = tmp_path / "auc.png"
    done = _bench("--plot-from", str(summary_only), "--plot", str(png))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "'runs'" in done.stderr and "--out" in done.stderr
    assert not png.exists()
    bad = _bench("--plot-from", str(_saved(tmp_path)), "--plot", str(tmp_path / "no-such-dir" / "auc.png"))
    assert bad.returncode == 2 and "--plot" in bad.stderr and "existing folder" in bad.stderr
