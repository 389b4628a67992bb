"""BackendOptions and the command line: what ``submit`` hands the detached supervisor as argv
(:meth:`BackendOptions.to_argv`) reads back through ``run``'s parser as the same options."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfdist.backends.base import BackendOptions
from tfdist.cli.parser import build_parser


@pytest.mark.parametrize(
    "options",
    [
        BackendOptions(),
        BackendOptions(runs_root=Path("some/runs")),
        BackendOptions(runs_root=Path("/abs/runs dir"), ray_address="ray://head:10001"),
        BackendOptions(runs_root=Path("r"), ray_address="auto", spark_master="local-cluster[2,1,1024]"),
        BackendOptions(runs_root=Path("-starts-with-a-dash"), spark_master="spark://h:7077"),
    ],
)
@pytest.mark.parametrize("command", ["run", "submit"])
def test_to_argv_round_trips_through_the_parser(options: BackendOptions, command: str) -> None:
    args = build_parser().parse_args([command, "job.yaml", *options.to_argv()])
    assert args.jobfile == "job.yaml"
    assert BackendOptions.from_args(args) == options


def test_from_args_reads_the_parsers_defaults() -> None:
    args = build_parser().parse_args(["run", "job.yaml"])
    assert BackendOptions.from_args(args) == BackendOptions()
