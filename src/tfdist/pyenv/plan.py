"""What a job's environment is, decided without side effects: its requirement lines, its
cache key, the layering ``.pth`` text, and the one line worth showing from a failed build.

The key hashes what was *asked* (requirement lines, the requirements file's content, the
index) plus what the environment is layered over (interpreter, tfdist's site-packages). It
does not resolve first: resolving needs the index on every start, and reuse must cost
milliseconds. So an unpinned requirement is resolved once and stays as built until
``tfdist env clean``; pin versions for reproducible jobs (``requirements.lock`` in the
environment shows what was installed).
"""

from __future__ import annotations

import json
import site
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tfdist.errors import SpecError
from tfdist.regular_file import NotRegularFile, read_head

if TYPE_CHECKING:
    from tfdist.jobspec.model import JobSpec, PythonSpec

#: Largest requirements file read (one with every hash of a large project is a few hundred KiB).
MAX_FILE_BYTES = 16 << 20
#: Bumped when the layout of an environment changes (old ones are then simply not reused).
FORMAT = 1
#: The layering file; its name sorts after every other ``.pth`` so the job's own paths
#: (editable installs included) stay ahead of tfdist's.
LAYER_PTH = "zzzz_tfdist_base.pth"


@dataclass(frozen=True)
class Plan:
    """One job environment, as asked."""

    key: str
    requirements: tuple[str, ...]
    requirements_file: Path | None
    index_url: str | None
    base_dirs: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.requirements) + (1 if self.requirements_file else 0)


def base_dirs() -> list[str]:
    """Where the running tfdist's packages live: its site-packages, and first the directory
    holding the ``tfdist`` package itself when it is not among them (a source checkout)."""
    dirs = [d for d in site.getsitepackages() if Path(d).is_dir()]
    import tfdist

    root = str(Path(tfdist.__file__).resolve().parent.parent)
    return dirs if root in dirs else [root, *dirs]  # the running tfdist before an installed one


def _lines(text: str) -> list[str]:
    out = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def read_file(spec: PythonSpec, workdir: str | Path) -> tuple[Path | None, list[str]]:
    """The requirements file (relative to the workdir) and its requirement lines. Only a
    regular file of UTF-8 text is read, at most :data:`MAX_FILE_BYTES`, opened non-blocking:
    a FIFO, a device (``/dev/zero``) or a huge file is refused, never waited on or read whole."""
    if not spec.requirements_file:
        return None, []
    name = spec.requirements_file
    path = (Path(workdir) / name).resolve()
    try:
        data = read_head(path, MAX_FILE_BYTES)
    except NotRegularFile:
        raise SpecError(f"python.requirements_file: {name} is not a regular file (a directory, FIFO "
                        "or device); give a requirements file") from None
    except OSError as err:
        raise SpecError(
            f"python.requirements_file: cannot read {name} "
            f"({err.strerror}); give a path relative to the workdir {workdir}"
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(f"python.requirements_file: {name} is larger than {MAX_FILE_BYTES >> 20} MiB; "
                        "give a requirements file")
    try:
        return path, _lines(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise SpecError(f"python.requirements_file: {name} is not UTF-8 text (byte 0x{data[err.start]:02x} "
                        f"at offset {err.start}); give a requirements file") from None


def plan_for(spec: PythonSpec, workdir: str | Path, bases: list[str] | None = None) -> Plan:
    """The plan of ``spec``; a missing requirements file is bad input (SpecError)."""
    req_file, file_lines = read_file(spec, workdir)
    reqs = tuple(line.strip() for line in spec.requirements if line.strip())
    bases = base_dirs() if bases is None else bases
    import hashlib  # here: a job without its own environment never computes a key
    import platform

    content = {
        "format": FORMAT,
        "requirements": sorted(reqs),
        "file": file_lines,
        "index_url": spec.index_url,
        "python": [platform.python_implementation(), sys.version, platform.machine()],
        "base": [sys.prefix, *bases],
    }
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
    return Plan(digest[:16], reqs, req_file, spec.index_url, tuple(bases))


def layer_pth(bases: tuple[str, ...] | list[str]) -> str:
    """The ``.pth`` text that appends tfdist's environment after the job's site-packages.

    ``site.addsitedir`` (not a bare path line) so the ``.pth`` files there are processed too:
    an editable install of tfdist is found the same way as in tfdist's own environment."""
    return "".join(f"import site; site.addsitedir({d!r})\n" for d in bases)


def install_args(plan: Plan) -> list[str]:
    """The requirement arguments of ``uv pip install`` / ``pip install``."""
    args = list(plan.requirements)
    if plan.requirements_file:
        args += ["-r", str(plan.requirements_file)]
    if plan.index_url:
        args += ["--index-url", plan.index_url]
    return args


def error_line(output: list[str]) -> str:
    """The line that matters in a failed uv or pip run. uv: its ``error:`` and the last
    ``cause:`` under it ("No solution found ...: Because ... unsatisfiable", "Request failed
    ...: Connection refused"); pip: its last ``ERROR:`` ("No matching distribution ...")."""
    lines = [ln.strip() for ln in output if ln.strip()]
    uv = [i for i, ln in enumerate(lines) if ln.startswith("error:")]
    pip = [i for i, ln in enumerate(lines) if ln.startswith("ERROR:")]
    if not uv and not pip:
        return (lines[-1] if lines else "the build tool failed without a message")[:300]
    at = uv[0] if uv else pip[-1]
    head = lines[at][6:].strip()
    causes = [ln[6:].strip() for ln in lines[at + 1 :] if ln.startswith("cause:")]
    return (f"{head}: {causes[-1]}" if causes else head)[:300]


def ray_packages(job: JobSpec) -> list[str]:
    """The pip list of the job's Ray runtime_env: ``ray.pip``, then ``python``'s requirements
    and the requirements file's lines (Ray writes them to a requirements file, so an
    ``--index-url`` line is honoured too), each once, in order."""
    _, file_lines = read_file(job.python, job.workdir)
    found = [*job.ray.pip, *job.python.requirements, *file_lines]
    if found and job.python.index_url:
        found.insert(0, f"--index-url {job.python.index_url}")
    return list(dict.fromkeys(found))


def refuse_on_image(job: JobSpec) -> None:
    """On Kubernetes the image provides the environment: a job asking for requirements is
    refused in one line rather than run without them."""
    if job.python.wanted:
        field = "python.requirements" if job.python.requirements else "python.requirements_file"
        raise SpecError(
            f"{field}: on Kubernetes the image provides the Python environment (no per-job "
            "environment is built in a pod), so the image must hold the packages: install them "
            f"into kubernetes.image, or drop {field}"
        )
