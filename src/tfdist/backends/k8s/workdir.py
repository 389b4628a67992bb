"""The job's working directory shipped to pods (``kubernetes.ship_workdir``).

A pod starts from its image: a script that lives only in the job's ``workdir`` is not
there. So, unless the job names a directory of the image (``kubernetes.working_dir``) or
says ``ship_workdir: false``, tfdist packs the workdir into one ``.tar.gz`` (deterministic:
sorted names, no times, owners or modes beyond the executable bit, so the same files make
the same bytes and the rendered manifests are reproducible), stores it in a ConfigMap of
the run (``binaryData``), mounts it read-only in every pod and, before the task's command,
unpacks it with Python into an ``emptyDir`` that is the container's working directory.
No ``tar`` is assumed in the image, only the Python that runs the task: the unpacker is the
command's own interpreter when the command starts with ``python...``, else ``python3``.

A ConfigMap holds at most 1 MiB, so a workdir whose archive is larger is refused in one
line (SpecError, exit 2) before anything is created: bake the files into the image, or put
them on a volume, and set ``kubernetes.ship_workdir: false``. Per-job Python environments
are not shipped (:func:`tfdist.pyenv.plan.refuse_on_image`): the image holds the packages.
"""

from __future__ import annotations

import base64
import gzip
import io
import itertools
import stat
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

from tfdist.backends.agent.workdir import MAX_WORKDIR_FILES, shipped
from tfdist.errors import SpecError
from tfdist.jobspec.model import JobSpec
from tfdist.jobspec.tfjob import (
    WORKDIR_ARCHIVE_DIR,
    WORKDIR_KEY,
    WORKDIR_MOUNT,
    WORKDIR_UNPACK,
    WORKDIR_VOLUMES,
)
from tfdist.node import leave_program

#: What one ConfigMap may hold (data and binaryData together; the API server refuses more).
#: The ConfigMap's key, the mount points, the volumes' names and the unpacker are
#: jobspec.tfjob's WORKDIR_* (the TFJob reader gives back the job's own command with them).
LIMIT = 1 << 20
#: At most MAX_WORKDIR_FILES files (the Spark and YARN packer's cap), and this many bytes
#: before compression, are packed (a workdir of $HOME is refused, not read to its end).
MAX_RAW = 64 << 20

def ships(job: JobSpec) -> bool:
    """Whether the job's workdir goes to its pods: ``kubernetes.ship_workdir``, by default
    unless ``kubernetes.working_dir`` names the image's own directory (or a role runs the
    image's entrypoint, a TFJob's container without ``command``, which knows its own)."""
    setting = job.kubernetes.ship_workdir
    if setting is not None:
        return setting
    roles = [role for role in job.roles if job.replicas(role) > 0]
    return job.kubernetes.working_dir is None and all(job.command_for(role) for role in roles)


def check(job: JobSpec, roles: list[str]) -> None:
    """One line for a shipping job that cannot ship (SpecError)."""
    if not ships(job):
        return
    if job.kubernetes.working_dir is not None:
        raise SpecError(
            "kubernetes.ship_workdir: true unpacks the workdir into a directory of its own; drop "
            "kubernetes.working_dir, or set kubernetes.ship_workdir: false to start in the image's"
        )
    for role in roles:
        if not job.command_for(role):
            raise SpecError(
                f"kubernetes.ship_workdir: role {role} runs the image's entrypoint, which cannot unpack "
                "the workdir first; give its command, or set kubernetes.ship_workdir: false"
            )
    if not Path(job.workdir).is_dir():
        raise SpecError(f"workdir: {job.workdir} is not a directory (it is shipped to the pods from here); "
                        "give the job's directory, or set kubernetes.ship_workdir: false")


def _files(root: Path) -> list[Path]:
    """The files shipped, sorted (the archive's bytes do not depend on the walk's order);
    stops after MAX_WORKDIR_FILES + 1."""
    return sorted(itertools.islice(shipped(root, []), MAX_WORKDIR_FILES + 1))


def _too_big(job: JobSpec, what: str) -> SpecError:
    return SpecError(
        f"kubernetes.ship_workdir: the workdir {Path(job.workdir).resolve()} {what}, over the 1 MiB "
        "a Kubernetes ConfigMap holds; set kubernetes.ship_workdir: false and bake the files into "
        "kubernetes.image (or mount a volume with them and set kubernetes.working_dir)"
    )


def pack(job: JobSpec, limit: int = LIMIT) -> bytes:
    """The workdir as a deterministic ``.tar.gz``; SpecError when it exceeds ``limit``."""
    root = Path(job.workdir).resolve()
    files = _files(root)
    if len(files) > MAX_WORKDIR_FILES:
        raise _too_big(job, f"has more than {MAX_WORKDIR_FILES} files")
    out = io.BytesIO()
    raw = 0
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            try:
                info = path.stat()  # a symlink ships what it points to
                regular = stat.S_ISREG(info.st_mode) and info.st_size <= MAX_RAW
                data = path.read_bytes() if regular else None
            except OSError:
                continue  # a broken link or a file gone meanwhile
            if data is None:
                continue  # a FIFO, socket or device
            raw += len(data)
            if raw > MAX_RAW:
                raise _too_big(job, f"has more than {MAX_RAW >> 20} MiB of files")
            member = tarfile.TarInfo(PurePosixPath(path.relative_to(root).as_posix()).as_posix())
            member.size = len(data)
            member.mode = 0o755 if info.st_mode & stat.S_IXUSR else 0o644
            member.mtime = 0
            tar.addfile(member, io.BytesIO(data))
            if out.tell() > limit:
                raise _too_big(job, f"packs into more than {limit} bytes (tar.gz)")
    archive = out.getvalue()
    if len(archive) + len(WORKDIR_KEY) > limit:
        raise _too_big(job, f"packs into {len(archive)} bytes (tar.gz)")
    return archive


def config_map(job: JobSpec, name: str, archive: bytes, meta: dict[str, Any]) -> dict[str, Any]:
    """The ConfigMap holding ``archive``."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": name},
            "binaryData": {WORKDIR_KEY: base64.b64encode(archive).decode()}}


def command(job_command: list[str]) -> list[str]:
    """``job_command`` run after the unpacker."""
    first = PurePosixPath(job_command[0]).name if job_command else ""
    python = job_command[0] if leave_program.PYTHON.fullmatch(first) else "python3"
    return [python, "-c", WORKDIR_UNPACK, *job_command]


def volumes(name: str) -> list[dict[str, Any]]:
    """The pod's volumes: the ConfigMap ``name`` and the emptyDir the archive is unpacked into."""
    archive, unpacked = WORKDIR_VOLUMES
    return [{"name": archive, "configMap": {"name": name}}, {"name": unpacked, "emptyDir": {}}]


def mounts() -> list[dict[str, Any]]:
    archive, unpacked = WORKDIR_VOLUMES
    return [{"name": archive, "mountPath": WORKDIR_ARCHIVE_DIR, "readOnly": True},
            {"name": unpacked, "mountPath": WORKDIR_MOUNT}]
