"""tfdist.runtime.progress: the one-line reports the launcher parses."""

from __future__ import annotations

import io
import json

import numpy as np

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
    data = progress.parse_line(line)
    assert data == {"loss": 0.25, "step": 7, "metrics": {"auc": None}}


def test_parse_line_ignores_other_output():
    assert progress.parse_line("Epoch 1/3") is None
    assert progress.parse_line(PROGRESS_PREFIX + "{not json") is None
    assert progress.parse_line(PROGRESS_PREFIX + "[1, 2]") is None
    assert progress.parse_line(PROGRESS_PREFIX + '{"final": true}') == {"final": True}
