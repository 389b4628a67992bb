"""Property: any job file and any ``--set`` values give a valid job or one clean line.

Random and mutated job files (valid seeds cut, spliced and salted with YAML's sharp edges:
anchors, aliases, tags, merge keys, odd numbers, NUL and non-UTF-8 bytes) and random
``--set`` values go through the CLI's own parse path (``tfdist run FILE --set ...`` up to the
point where a backend would start). Each example must end as a valid JobSpec (which then
also renders to every Kubernetes form or is refused in one line) or as a one-line SpecError:
never another exception, never a hang (hypothesis' per-example deadline), never a file
written (the working directory stays empty). Run with ``-s`` to see the outcome counts.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="the property test needs hypothesis (dev extra)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.backends.k8s.test_k8s_tfjob import KUBEFLOW_STYLE  # noqa: E402
from tests.jobspec.test_model import GOOD  # noqa: E402
from tfdist.backends.k8s import manifests, names  # noqa: E402
from tfdist.cli.parser import build_parser  # noqa: E402
from tfdist.cli.run import load_job  # noqa: E402
from tfdist.errors import SpecError  # noqa: E402
from tfdist.jobspec.model import JobSpec  # noqa: E402

EXAMPLES = int(os.environ.get("TFDIST_FUZZ_EXAMPLES", "300"))  # more for a longer hunt

SEEDS = [
    GOOD,
    KUBEFLOW_STYLE,
    "name: q\ncommand: [python, t.py, --seed, 0123]\nroles: {worker: 2, ps: 1, chief: 1}\n"
    "strategy: parameter_server\nenv: {A: off}\nkubernetes: {image: x}\n",
    "name: b\ncommand: echo hi\nroles:\n  worker: {replicas: 1, env: {X: '1'}}\n"
    "deadline_seconds: 60\nrestart: {policy: on-failure}\n",
]
SHARP = [
    "&a ", "*a", "&b [*a, *a]", "!!python/object:os.system ", "!!int ", "!!binary ", "<<: *a", "<<: ",
    "0123", "0x1F", "0o17", "yes", "off", "~", "null", ".inf", "-.nan", "1e30", "1e400", "9" * 60,
    "\\0", '"\\0"', "\x00", "\t", "\r", "\ufeff", "\u2028", "\x85", "- ", ": ", "? ", "{", "}", "[", "]",
    ",", "'", '"', "#", "|", ">", "%YAML 1.1\n---\n", "---\n", "...\n", "\n", "\n  ", "replicas: ",
    "worker: ", "env: ", "command: ", "kind: TFJob\n", "name: x\n", "roles: {worker: 100000}\n",
]
KEYS = [
    "name", "command", "env.A", "env.", "roles.worker.replicas", "roles.ps", "roles.chief.command",
    "roles.evaluator.env.X", "strategy", "deadline_seconds", "drain_seconds", "restart.policy",
    "restart.backoff_seconds", "options.update.mode", "kubernetes.image", "roles.worker.kubernetes.args",
    "workdir", "legacy_keras", "x", "roles.worker.replicas.x", "name.x",
]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3, 6]))):
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "splice"]))
        piece = draw(st.one_of(st.sampled_from(SHARP), st.text(max_size=8)))
        if kind == "insert":
            text = text[:at] + piece + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 40)) :]
        elif kind == "replace":
            text = text[:at] + piece + text[at + len(piece) :]
        else:
            other = draw(st.sampled_from(SEEDS))
            cut = draw(st.integers(0, len(other)))
            text = text[:at] + other[cut : cut + draw(st.integers(1, 200))]
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.booleans()) and draw(st.booleans()):
        data += draw(st.binary(max_size=16))  # sometimes not UTF-8 at all
    return data


job_files = st.one_of(mutated(), mutated(), mutated(), st.binary(max_size=64), st.text(max_size=200).map(str.encode))
GOOD_SETS = ["roles.worker.replicas=3", "env.ID=010", "deadline_seconds=60", "command=[echo, 0123]",
             "kubernetes.image=i:2", "restart.policy=on-failure", "env.B=off"]
set_values = st.lists(
    st.one_of(
        st.sampled_from(GOOD_SETS),
        st.builds(
            lambda k, v: f"{k}={v}",
            st.sampled_from(KEYS),
            st.one_of(st.sampled_from(SHARP), st.text(max_size=20)),
        ),
    ),
    max_size=3,
)


def _check(data: bytes, overrides: list[str]) -> str:
    """One example; returns its outcome. Runs in an empty working directory."""
    with tempfile.TemporaryDirectory() as inputs, tempfile.TemporaryDirectory() as work:
        path = Path(inputs) / "job.yaml"
        path.write_bytes(data)
        before = os.getcwd()
        os.chdir(work)
        try:
            argv = ["run", str(path)]
            for item in overrides:
                argv += ["--set", item]
            try:
                args = build_parser().parse_args(argv)
                job = load_job(args, [])
            except SpecError as err:
                message = str(err)
                assert message and "\n" not in message, repr(message)
                outcome = "refused"
            else:
                assert isinstance(job, JobSpec)
                outcome = "valid"
                image = dataclasses.replace(job, kubernetes=dataclasses.replace(job.kubernetes, image="i:1"))
                for mode in names.MODES:
                    try:
                        manifests.to_yaml(manifests.render(image, mode))
                    except SpecError as err:
                        assert "\n" not in str(err), repr(str(err))
        finally:
            os.chdir(before)
        assert os.listdir(work) == [], "a file was written while only parsing"
        assert os.listdir(inputs) == ["job.yaml"]
    return outcome


@settings(
    max_examples=EXAMPLES,
    deadline=5000,  # per example, in ms: a hang or a blow-up fails here (a valid one takes ~10 ms)
    derandomize=True,
    database=None,  # nothing written, not even hypothesis' example database
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(job_files, set_values)
def test_any_job_file_is_a_job_or_one_line(data: bytes, overrides: list[str]) -> None:
    _check(data, overrides)


def test_the_generator_reaches_both_outcomes() -> None:
    """The property test would pass on a generator that only ever made broken files (or only
    valid ones): its own inputs, drawn here again (the same derandomized examples, fewer of
    them), reach both outcomes. Standalone: it counts what it ran itself. Run with ``-s`` to
    see the counts."""
    outcomes: collections.Counter[str] = collections.Counter()

    @settings(max_examples=min(EXAMPLES, 150), deadline=5000, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(job_files, set_values)
    def count(data: bytes, overrides: list[str]) -> None:
        outcomes[_check(data, overrides)] += 1

    count()
    print(f"\njob-file fuzz: {sum(outcomes.values())} inputs, {dict(outcomes)}")
    assert outcomes["valid"] > 0 and outcomes["refused"] > 0, dict(outcomes)
