"""Code that runs on cluster nodes (the Spark agent, the Ray actor, procs.py) is shipped by
value: it must unpickle in an interpreter where tfdist is not installed. (A cached helper in
procs.py once went by reference and broke every Spark executor without tfdist.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CHECK = """
import pickle, sys
class NoTfdist(pickle.Unpickler):
    def find_class(self, module, name):
        if module.split(".")[0] == "tfdist":
            raise AssertionError(f"pickled by reference: {module}.{name}")
        return super().find_class(module, name)
NoTfdist(open(sys.argv[1], "rb")).load()
print("ok")
"""


def _loads_without_tfdist(blob: bytes, tmp_path: Path, extra_path: list[str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "blob.pkl").write_bytes(blob)
    (tmp_path / "check.py").write_text(CHECK)
    code = f"import sys; sys.path[:0] = {extra_path!r}; sys.argv = ['check', {str(tmp_path / 'blob.pkl')!r}]; " \
           f"exec(open({str(tmp_path / 'check.py')!r}).read())"
    # -I: no PYTHONPATH, no user site; -S: no site-packages, so tfdist cannot be found
    return subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)


def test_the_spark_agent_unpickles_without_tfdist(tmp_path: Path) -> None:
    pyspark = pytest.importorskip("pyspark", reason="pyspark is the [spark] extra")
    from pyspark import cloudpickle

    from tfdist.backends.spark import driver, stage  # noqa: F401 - driver registers the by-value modules

    main = stage.barrier_main(("127.0.0.1", 1), "secret", "token",
                              [{"name": "worker-0", "command": ["true"], "cwd": "/", "python": None}], None)
    zips = sorted(str(p) for p in (Path(pyspark.__file__).parent / "python" / "lib").glob("*.zip"))
    proc = _loads_without_tfdist(cloudpickle.dumps(main), tmp_path, zips)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_the_ray_actor_class_unpickles_without_tfdist(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray", reason="ray is the [ray] extra")
    from tfdist.backends.ray import actor as ray_actor
    from tfdist.backends.ray import driver  # noqa: F401 - registers by value

    blob = ray.cloudpickle.dumps(ray_actor.TaskRunner)
    site = [p for p in sys.path if p.endswith("site-packages")]
    (tmp_path / "fake").mkdir()
    # ray.cloudpickle needs ray importable: give the site-packages but hide tfdist from it
    (tmp_path / "fake" / "tfdist.py").write_text("raise ImportError('tfdist is not installed here')\n")
    proc = _loads_without_tfdist(blob, tmp_path, [str(tmp_path / "fake"), *site])
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
