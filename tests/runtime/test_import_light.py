"""Importing tfdist and tfdist.runtime must not import TensorFlow, Ray or Kubernetes."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("tensorflow", "tf_keras", "keras", "ray", "kubernetes")


def test_import_tfdist_runtime_stays_light():
    code = (
        "import sys, json, tfdist, tfdist.runtime\n"
        "from tfdist.runtime import strategy, callbacks, save_model, run_sidecar_evaluator, Loop\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert "tfdist" in loaded  # the probe really imported the package
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_context_works_without_tensorflow():
    code = (
        "import sys, tfdist.runtime as r\n"
        "ctx = r.context()\n"
        "print(ctx.task, ctx.is_chief, 'tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["worker-0", "True", "False"]
