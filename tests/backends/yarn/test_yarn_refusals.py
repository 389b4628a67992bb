"""Spark on YARN refuses at once, in one line with exit 2, what cannot work: no cluster
configuration, or a ResourceManager that does not answer. No JVM starts, nothing is written."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.conftest import tfdist


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("case", ["no-conf-dir", "no-site-file", "rm-down"])
def test_no_cluster_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    env = {"HADOOP_CONF_DIR": "", "YARN_CONF_DIR": ""}
    if case != "no-conf-dir":
        conf = tmp_path / "conf"
        conf.mkdir()
        env["HADOOP_CONF_DIR"] = str(conf)
        if case == "rm-down":  # a port nothing listens on
            (conf / "yarn-site.xml").write_text(
                "<configuration><property><name>yarn.resourcemanager.webapp.address</name>"
                f"<value>127.0.0.1:{free_port()}</value></property></configuration>")
    began = time.monotonic()
    proc = tfdist("run", "--backend", "spark", "--spark-master", "yarn", "--runs-dir", str(tmp_path / "runs"),
                  "--workers", "2", "--", "python", "-c", "pass", cwd=tmp_path, env=env, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("tfdist: error: "), proc.stderr
    expected = {"no-conf-dir": "HADOOP_CONF_DIR is not set", "no-site-file": "cannot read",
                "rm-down": "does not answer"}[case]
    assert expected in lines[0]
    assert time.monotonic() - began < 30
    assert not (tmp_path / "runs").exists()
