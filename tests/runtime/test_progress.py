"""tfdist.runtime.progress: the one-line reports, read back as the launcher reads them
(backends.base.progress_data)."""

from __future__ import annotations

import io
import json

import numpy as np

from tfdist.backends.base import progress_data
from tfdist.contract import PROGRESS_PREFIX
from tfdist.runtime import progress


def test_report_writes_one_flushed_line():
    class Stream(io.StringIO):
        flushed = False

        def flush(self):
            self.flushed = True

    out = Stream()
    line = progress.report(out, epoch=2, epochs=3, metrics={"accuracy": 0.9}, final=False)
    assert out.flushed
    assert out.getvalue() == line + "\n"
    assert out.getvalue().count("\n") == 1
    assert line.startswith(PROGRESS_PREFIX)
    assert json.loads(line[len(PROGRESS_PREFIX) :]) == {
        "epoch": 2,
        "epochs": 3,
        "metrics": {"accuracy": 0.9},
        "final": False,
    }


def test_numpy_values_nan_and_none_become_json():
    line = progress.format_line(
        loss=np.float32(0.25), step=np.int64(7), metrics={"auc": float("nan")}, skipped=None
    )
    data = progress_data(line)  # as the launcher reads it
    assert data == {"loss": 0.25, "step": 7, "metrics": {"auc": None}}


def test_the_launcher_reads_reports_and_nothing_else():
    assert progress_data("Epoch 1/3") is None
    assert progress_data(PROGRESS_PREFIX + "{not json") is None
    assert progress_data(PROGRESS_PREFIX + "[1, 2]") is None
    assert progress_data(PROGRESS_PREFIX + '{"final": true}') == {"final": True}


def test_a_goodput_mark_is_one_report_line_with_its_kind():
    out = io.StringIO()
    line = progress.mark("checkpoint", step=30, seconds=0.25, stream=out)
    assert out.getvalue() == line + "\n"
    assert json.loads(line[len(PROGRESS_PREFIX):]) == {"mark": "checkpoint", "step": 30, "seconds": 0.25}
    assert json.loads(progress.mark("begin", stream=io.StringIO())[len(PROGRESS_PREFIX):]) == {"mark": "begin"}
