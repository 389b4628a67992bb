"""The data section through the real CLI on the local backend, with a tiny non-TF task
(tests/bin/data_task.py) that reports what it got."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import BIN, tfdist

pytestmark = pytest.mark.integration


def reports(run_dir: str) -> list[dict]:
    found = []
    for log in sorted((Path(run_dir) / "logs").glob("*.log")):
        for line in log.read_text().splitlines():
            if "REPORT " in line:
                found.append(json.loads(line.split("REPORT ", 1)[1]))
    return found


def log_of(run_dir: str, task: str) -> str:
    return (Path(run_dir) / "logs" / f"{task}.log").read_text()


def write_job(tmp_path: Path, *args: str, restarts: int = 1) -> Path:
    data = tmp_path / "clicks"
    data.mkdir()
    for i in range(7):
        (data / f"part-{i}").write_bytes(b"r" * (1000 * (i + 1)))
    (tmp_path / "vocab.txt").write_text("a\nb\n")
    job = tmp_path / "job.yaml"
    command = json.dumps(["python", str(BIN / "data_task.py"), *args])
    job.write_text(f"""
name: data-job
command: {command}
roles: {{chief: 1, worker: 2}}
restart: {{policy: on-failure, max_restarts: {restarts}, backoff_seconds: 0}}
data:
  train: {{uris: ["clicks/part-*"], shard: file, mode: stage}}
  vocab: {{uris: [vocab.txt], shard: none}}
  raw: {{uris: [clicks], shard: file, mode: stream}}
outputs:
  model_dir: {tmp_path / "models" / "ctr"}
""")
    return job


def run(tmp_path: Path, job: Path) -> dict:
    proc = tfdist("run", "--quiet", "--json", "--runs-dir", str(tmp_path / "runs"), str(job), timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_each_worker_stages_its_own_files_and_a_restart_copies_nothing(tmp_path: Path) -> None:
    job = write_job(tmp_path, "fail-first")
    result = run(tmp_path, job)
    run_dir = result["run_dir"]
    got = reports(run_dir)
    first = {r["task"]: r for r in got if r["restart"] == "0"}
    assert set(first) == {"chief-0", "worker-0", "worker-1"}
    shares = {t: [Path(p).name for p in r["inputs"]["train"]] for t, r in first.items()}
    dealt = sorted(sum(shares.values(), []))
    assert dealt == [f"part-{i}" for i in range(7)]  # each file once: no task sees another's
    for task, r in first.items():
        assert r["exist"] == {"raw": True, "train": True, "vocab": True} and not r["plan_seen"]
        assert all(f"/data/{task}/inputs/train/" in p for p in r["inputs"]["train"])  # its own copy
        streamed = [Path(p).name for p in r["inputs"]["raw"]]
        assert streamed == sorted(shares[task])  # the same shares for every input sharded by file
        assert all(p.startswith(str(tmp_path / "clicks")) for p in r["inputs"]["raw"])  # URIs, not copies
    # the restart: the same files, from the cache
    again = {r["task"]: r for r in got if r["restart"] == "1"}
    assert {t: r["inputs"] for t, r in again.items()} == {t: r["inputs"] for t, r in first.items()}
    for task in first:
        log = log_of(run_dir, task)
        assert f"staged train: {len(shares[task])} files" in log
        assert f"(copied {len(shares[task])}, cached 0" in log
        assert f"(copied 0, cached {len(shares[task])})" in log
    plan = json.loads((Path(run_dir) / "data.json").read_text())
    assert sorted(sum((plan["tasks"][t]["train"] for t in first), [])) == sorted(
        str(tmp_path / "clicks" / f"part-{i}") for i in range(7))
    # the summary shows each task's files and its last staging (from the cache)
    assert result["data"]["tasks"] == plan["tasks"]
    assert {t: s["copied"] for t, s in result["data"]["staging"].items()} == {t: 0 for t in first}
    # the chief's outputs, from both attempts, are at the URI; a worker's never
    assert sorted(p.name for p in (tmp_path / "models" / "ctr").iterdir()) == ["chief-0-0.txt", "chief-0-1.txt"]


def test_a_new_run_starts_from_the_outputs_copy(tmp_path: Path) -> None:
    job = write_job(tmp_path)
    run(tmp_path, job)
    result = run(tmp_path, job)
    second = {r["task"]: r for r in reports(result["run_dir"])}
    # a fresh run directory: what the chief finds was filled from the URI
    assert second["chief-0"]["outputs_before"]["model_dir"] == ["chief-0-0.txt"]
    assert "restored from" in log_of(result["run_dir"], "chief-0")


def test_refusals_start_nothing(tmp_path: Path) -> None:
    job = write_job(tmp_path)
    for setting, message in [
        ("data.train.uris=[nothing-*]", "data.train.uris.0: 'nothing-*' matches no file"),
        ("roles.worker.replicas=7", "data.train: 7 files for 8 workers"),
        ("data.train.uris=[s3://bucket/x]", "no store handles s3://"),
    ]:
        proc = tfdist("run", "--runs-dir", str(tmp_path / "refused"), "--set", setting, str(job), timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().startswith("tfdist: error:") and message in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())


def test_a_tensorflow_job_trains_on_its_shares_and_its_model_lands_at_the_uri(tmp_path: Path) -> None:
    data = tmp_path / "shards"
    data.mkdir()
    for i in range(4):
        (data / f"part-{i}.csv").write_text("".join(f"{i},{j},1,2,{i + j}\n" for j in range(20)))
    job = tmp_path / "job.yaml"
    job.write_text(f"""
name: tf-data
command: {json.dumps(["python", str(BIN / "train_files.py")])}
roles: {{worker: 2}}
data:
  train: {{uris: ["{data}/*.csv"]}}
outputs:
  model_dir: {tmp_path / "models"}
""")
    result = run(tmp_path, job)
    run_dir = result["run_dir"]
    seen = {}
    for task in ("worker-0", "worker-1"):
        line = next(x for x in log_of(run_dir, task).splitlines() if "FILES " in x)
        seen[task] = [Path(p).name for p in json.loads(line.split("FILES ", 1)[1])]
    assert sorted(seen["worker-0"] + seen["worker-1"]) == [f"part-{i}.csv" for i in range(4)]
    assert len(seen["worker-0"]) == len(seen["worker-1"]) == 2
    # runtime.save_model wrote the model under the output's local directory; it is at the URI
    assert (tmp_path / "models" / "model" / "saved_model.pb").is_file()
    assert any((tmp_path / "models" / "model" / "variables").iterdir())


def test_status_the_summary_and_the_page_show_each_task_s_files_and_staging(tmp_path: Path) -> None:
    """A real local job with a small data section of real files, one of them named with
    markup, a terminal escape and a newline: the summary at its end and ``tfdist status``
    (from the job store) name each worker's files (count, bytes, first names) and its
    staging, the name shown escaped on one line; the store holds it bounded."""
    from tfdist.jobs.inputs import job_data
    from tfdist.jobs.store import Store

    data = tmp_path / "clicks"
    data.mkdir()
    hostile = "<img src=x onerror=alert(1)>\x1b[31m\nred"
    for i, name in enumerate(["part-0", "part-1", "part-2", hostile]):
        (data / name).write_bytes(b"r" * (1000 * (i + 1)))
    job = tmp_path / "job.yaml"
    job.write_text(f"""
name: shown-data
command: {json.dumps(["python", str(BIN / "data_task.py")])}
roles: {{worker: 2}}
data:
  train: {{uris: ["clicks/*"], shard: file, mode: stage}}
""")
    proc = tfdist("run", "--quiet", "--runs-dir", str(tmp_path / "runs"), str(job), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # balanced by bytes: worker-0 the 4,000 B file and the 1,000 B one; worker-1 the others
    shown = "<img src=x onerror=alert(1)>\\x1b[31m\\nred"
    w0 = f"  worker-0: train 2 files, 5.0 KB: {shown}, part-0; staged in "
    w1 = "  worker-1: train 2 files, 5.0 KB: part-1, part-2; staged in "
    for out in (proc.stdout, ):
        lines = out.splitlines()
        assert "input train: 4 files, 10.0 KB, stage" in lines, out
        assert any(x.startswith(w0) and x.endswith("(copied 2 of 2 files)") for x in lines), out
        assert any(x.startswith(w1) for x in lines), out
        assert "\x1b" not in out and "\nred" not in out
    job_id = json.loads(tfdist("list", "--json").stdout)[0]["id"]
    status = tfdist("status", job_id)
    assert status.returncode == 0, status.stderr
    assert any(x.startswith(w0) for x in status.stdout.splitlines()), status.stdout
    assert any(x.startswith(w1) for x in status.stdout.splitlines()), status.stdout
    assert "\x1b" not in status.stdout and "\nred" not in status.stdout
    store = Store()
    stored = job_data(store, job_id, ["worker-0", "worker-1"])
    store.close()
    assert stored is not None and stored["tasks_total"] == 2
    assert stored["tasks"]["worker-0"]["train"]["first"] == [str(data / hostile), str(data / "part-0")]
    assert stored["tasks"]["worker-1"]["train"]["bytes"] == 5000
    described = json.loads(tfdist("status", job_id, "--json").stdout)
    assert {t: s["copied"] for t, s in described["data"]["staging"].items()} == {"worker-0": 2, "worker-1": 2}
    # the dashboard's job page, from the same store: the same, as text
    from starlette.testclient import TestClient

    from tfdist.jobs.location import location
    from tfdist.ui.app import create_app

    with TestClient(create_app(location(), "tok", stop=lambda store, job: None),
                    base_url="http://127.0.0.1:8470") as client:
        page = client.get(f"/jobs/{job_id}", headers={"Authorization": "token tok"}).text
    section = page.split('<section id="data">')[1].split("</section>")[0]
    assert ("<b>train</b> 2 files, 5.0 KB: &lt;img src=x onerror=alert(1)&gt;\\x1b[31m\\nred, part-0"
            in section), section
    assert "<b>train</b> 2 files, 5.0 KB: part-1, part-2" in section
    assert section.count("staged in ") == 2 and "<img" not in page and "\x1b" not in page
