"""A full disk under the run directory must not kill a healthy job: output lines are dropped
and counted, the summary (whose room is reserved at start) says what was lost, the job store
has the result. The disk is a 256 KiB tmpfs in a private mount namespace (``unshare``), so no
mount is left behind; unprivileged users get one through a user namespace."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BIN, TFDIST, tfdist

pytestmark = pytest.mark.integration


def _unshare() -> list[str]:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) to mount a small tmpfs privately")
    cmd = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    probe = subprocess.run([*cmd, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null || "
                            "mount -t tmpfs -o size=64k tmpfs /tmp"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("this machine allows no private tmpfs mount (no root, no user namespaces)")
    return cmd


def test_a_full_disk_drops_log_lines_but_the_job_succeeds(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    job = tmp_path / "flood.yaml"
    job.write_text(f"name: flood\ncommand: [{sys.executable}, {BIN / 'flood.py'}, '2000']\n"
                   "roles: {worker: 1}\n")
    tfdist_cmd = " ".join(shlex.quote(a) for a in [*TFDIST, "run", "-q", "--json", "--runs-dir", str(small),
                                                   str(job)])
    script = (f"mount -t tmpfs -o size=256k tmpfs {shlex.quote(str(small))} || exit 99\n"
              f"{tfdist_cmd} > {tmp_path / 'out.json'} 2> {tmp_path / 'err.txt'}\n"
              f"echo $? > {tmp_path / 'rc'}\n"
              f"cat {shlex.quote(str(small))}/flood-*/summary.json > {tmp_path / 'summary.json'}\n")
    subprocess.run([*_unshare(), "sh", "-c", script], timeout=120, check=True)
    err = (tmp_path / "err.txt").read_text()
    assert (tmp_path / "rc").read_text().strip() == "0", err
    assert "Traceback" not in err
    assert err.count("cannot write worker-0.log") == 1, err  # warned once
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["state"] == "succeeded"
    assert summary["lines_lost"]["logs/worker-0.log"] > 100
    assert json.loads((tmp_path / "out.json").read_text())["lines_lost"] == summary["lines_lost"]
    listed = json.loads(tfdist("list", "--json").stdout)
    assert [j["state"] for j in listed if j["name"] == "flood"] == ["succeeded"]
