"""The warm-spare test of the agent backends (Spark, YARN): the same job and checks on each.

The job is one worker running spare_task.py ``--first hang --then hang`` with
``restart.warm_spares``. Once its agent says the spare is ready, the task is SIGKILLed; its
restart must be the spare (the spare's pid, TensorFlow already imported, the task's argv,
cwd and ``__main__``), and the restarted task's own next spare is made. Then tfdist is
SIGKILLed; the caller checks that nothing of the job is left."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from tests.conftest import TFDIST, running_pid, still_alive

TASK = Path(__file__).with_name("spare_task.py")
WARM = "restart={policy: on-failure, max_restarts: 1, backoff_seconds: 0, warm_spares: true}"
COMMAND = ["python", str(TASK), "--first", "hang", "--then", "hang"]


def ready(log: Path) -> list[int]:
    """The pids of worker-0's spares, in the order its log says they were ready."""
    text = log.read_text() if log.exists() else ""
    return [int(p) for p in re.findall(r"tfdist: warm spare for worker-0 ready \(pid (\d+)\)", text)]


def _until_ready(log: Path, count: int, cli: subprocess.Popen, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(ready(log)) < count and time.monotonic() < deadline and cli.poll() is None:
        time.sleep(0.2)
    assert len(ready(log)) >= count, log.read_text() if log.exists() else f"no log; tfdist: {cli.poll()}"
    return ready(log)


def kill_the_task_then_tfdist(args: list[str], runs: Path, name: str, cwd: Path) -> list[int]:
    """Run the job (``args``: the backend's), prove the warm restart, SIGKILL tfdist (and its
    process group: a Spark driver JVM); returns the pids of both spares, for the caller to
    check that none outlived tfdist."""
    cli = subprocess.Popen([*TFDIST, "run", "--quiet", "--json", *args, "--workers", "1", "--name", name,
                            "--set", WARM, "--", *COMMAND],
                           cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        pid = running_pid(cli, runs, name, "worker-0", timeout=300)
        log = next(runs.glob(f"{name}-*")) / "logs" / "worker-0.log"
        first = _until_ready(log, 1, cli, 240)[0]
        os.kill(pid, signal.SIGKILL)
        spares = _until_ready(log, 2, cli, 240)  # the restarted task's own next spare
        text = log.read_text()
        seen = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("SEEN ")]
        assert [s["restart_count"] for s in seen] == ["0", "1"], text
        cold, warm = seen
        assert warm["pid"] == first and warm["pre_imported"] and not cold["pre_imported"], text
        assert warm["argv"] == cold["argv"] and warm["cwd"] == cold["cwd"] and warm["name"] == "__main__"
        assert "no warm spare" not in text and "TFDIST_SPARE_READY" not in text
        assert still_alive(spares[1:], wait=0) == spares[1:], "the idle spare is not running"
        os.killpg(cli.pid, signal.SIGKILL)
        cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.communicate()
    return spares
