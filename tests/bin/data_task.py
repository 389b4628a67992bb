"""A task that reports the data it got (tests/data): each input's files from its variable
and through tfdist.runtime (checked equal), whether they exist, and the content of each
output directory before it writes one file there (`<task>-<restart>.txt`). `fail-first`: chief-0
exits 3 on its first attempt (after writing, and once every task of the job reported: a slow
peer is not stopped before it could), so the job restarts; `fail-first-worker`: worker-0."""

import json
import os
import sys
import time
from pathlib import Path

from tfdist import runtime

task = os.environ["TFDIST_TASK"]
report = {"task": task, "restart": os.environ.get("TFDIST_RESTART_COUNT"),
          "plan_seen": "TFDIST_NODE_PLAN" in os.environ}
for key, value in sorted(os.environ.items()):
    if key.startswith("TFDIST_DATA_"):
        name = key[len("TFDIST_DATA_"):].lower()
        files = json.loads(value)
        assert files == runtime.input_files(name), (files, runtime.input_files(name))
        report.setdefault("inputs", {})[name] = files
        report.setdefault("exist", {})[name] = all(os.path.isfile(f) for f in files if "://" not in f)
    if key.startswith("TFDIST_OUTPUT_"):
        name = key[len("TFDIST_OUTPUT_"):].lower()
        assert value == str(runtime.output_dir(name))
        before = sorted(os.listdir(value))
        report.setdefault("outputs_before", {})[name] = before
        with open(os.path.join(value, f"{task}-{os.environ.get('TFDIST_RESTART_COUNT')}.txt"), "w") as f:
            f.write(task)
print("REPORT " + json.dumps(report), flush=True)
failing = {"fail-first": "chief-0", "fail-first-worker": "worker-0"}.get(sys.argv[1] if sys.argv[1:] else "")
if task == failing and os.environ.get("TFDIST_RESTART_COUNT") == "0":
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    peers = [f"{role}-{i}" for role, addresses in cluster.items() for i in range(len(addresses))]
    logs = [Path(os.environ["TFDIST_RUN_DIR"], "logs", f"{name}.log") for name in peers]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(p.exists() and "REPORT " in p.read_text() for p in logs):
        time.sleep(0.1)
    sys.exit(3)
