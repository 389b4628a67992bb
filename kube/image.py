"""Write the test node's images as one docker-archive tar (no registry, no image builder).

    python kube/image.py OUT_DIR     # writes OUT_DIR/tfdist-images.tar

Run with the Python whose environment the pods should use (the venv that holds TensorFlow
and tfdist). Two images, one tiny layer (a few directories, /etc/passwd, symlinks into /usr):

- ``localhost/tfdist:dev``: the tasks' image. It holds no Python and no TensorFlow: its
  /etc/tfdist-host-mounts names the host's /usr, this Python's prefix and base prefix, and
  this checkout, which the test node's runtime (kube/runc-host-mounts) bind-mounts read-only
  at the same paths. PATH starts with this Python's bin, PYTHONPATH is the checkout's src.
- ``localhost/tfdist-pause:dev``: the pod sandbox (containerd's "pause"): the same layer,
  running the host's ``sleep infinity``.

kube/node.sh imports the tar with ``ctr -n k8s.io images import``; pods use
``imagePullPolicy: Never``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TASKS = "localhost/tfdist:dev"
PAUSE = "localhost/tfdist-pause:dev"


def host_mounts() -> list[str]:
    paths = ["/usr", sys.base_prefix, sys.prefix, str(REPO)]
    found: list[str] = []
    for path in paths:
        real = os.path.realpath(path)
        if real not in found and not any(real.startswith(p + "/") for p in found if p != "/usr"):
            found.append(real)
    return found


def layer(mounts: list[str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, *, mode: int = 0o755, data: bytes | None = None, link: str | None = None) -> None:
            info = tarfile.TarInfo(name)
            info.mtime = 0
            info.mode = mode
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            elif data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

        for name in ("usr", "etc", "proc", "sys", "dev", "root", "run", "var"):
            add(name)
        add("tmp", mode=0o1777)
        add("var/tmp", mode=0o1777)
        for name in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{name}") or not os.path.exists(f"/{name}"):
                add(name, link=f"usr/{name}")
        passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
        add("etc/passwd", mode=0o644, data=passwd)
        add("etc/group", mode=0o644, data=b"root:x:0:\nnogroup:x:65534:\n")
        add("etc/nsswitch.conf", mode=0o644, data=b"hosts: files dns\n")
        add("etc/tfdist-host-mounts", mode=0o644, data="".join(m + "\n" for m in mounts).encode())
    return buf.getvalue()


def config(diff_id: str, cmd: list[str], env: list[str], description: str) -> bytes:
    return json.dumps({
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Env": env, "Cmd": cmd, "WorkingDir": "/",
                   "Labels": {"org.opencontainers.image.description": description}},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "kube/image.py"}],
    }, sort_keys=True).encode()


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python kube/image.py OUT_DIR")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    mounts = host_mounts()
    data = layer(mounts)
    digest = hashlib.sha256(data).hexdigest()
    path = f"{sys.prefix}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
    env = [f"PATH={path}", "HOME=/tmp", f"PYTHONPATH={REPO / 'src'}"]
    configs = {
        TASKS: config(f"sha256:{digest}", ["python", "-c", "import tfdist"], env,
                      "no files of its own: the host's /usr, Python environment and tfdist checkout, "
                      "bind-mounted read-only by the test node's runtime (kube/runc-host-mounts)"),
        PAUSE: config(f"sha256:{digest}", ["/usr/bin/sleep", "infinity"], env,
                      "the test node's pod sandbox: the host's sleep"),
    }
    manifest = []
    with tarfile.open(out / "tfdist-images.tar", "w") as tar:

        def add(name: str, blob: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(blob), 0, 0o644
            tar.addfile(info, io.BytesIO(blob))

        add(f"{digest}/layer.tar", data)
        for tag, blob in configs.items():
            name = hashlib.sha256(blob).hexdigest() + ".json"
            add(name, blob)
            manifest.append({"Config": name, "RepoTags": [tag], "Layers": [f"{digest}/layer.tar"]})
        add("manifest.json", json.dumps(manifest).encode())
    print(f"wrote {out / 'tfdist-images.tar'}: {TASKS}, {PAUSE}; host mounts {' '.join(mounts)}")


if __name__ == "__main__":
    main()
