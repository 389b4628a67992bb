"""A task that reports what data it got (tests/data): each input's files from its variable
and through tfdist.runtime, checks they exist and writes one file into each output."""

import json
import os
import sys
import time

from tfdist import runtime

task = os.environ["TFDIST_TASK"]
report = {"task": task, "restart": os.environ.get("TFDIST_RESTART_COUNT")}
for key, value in sorted(os.environ.items()):
    if key.startswith("TFDIST_DATA_") and key != "TFDIST_DATA_PLAN":
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
if len(sys.argv) > 1 and sys.argv[1] == "fail-first" and os.environ.get("TFDIST_RESTART_COUNT") == "0":
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)
    sys.exit(3)
