"""How updates are applied: the update modes and their resolution against the job (pure).

``options.update`` of the job spec (:class:`tfdist.jobspec.UpdateSpec`) becomes an
:class:`UpdateConfig` once the number of workers is known. This module imports no
TensorFlow: the launcher side and the light paths of :mod:`tfdist.runtime` (which warn when
a synchronous mode would be ignored) read it cheaply.

Update modes:

``async``    ParameterServerStrategy as it is: each worker applies its own gradient.
``sync``     wait for all N gradients of a step (K = N), average them.
``backup``   apply once K of N arrived (default K = N-1); later ones are dropped, counted.
             K > N is allowed: fast workers contribute several gradients to one step.
``timeout``  apply what arrived once T seconds passed (at least ``min_replicas``), or
             as soon as K arrived.
``stale``    bounded-staleness async: apply whatever arrived (at least K, default 1) and
             drop a gradient computed on parameters more than ``max_staleness`` steps old.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfdist import contract

MODES = ("async", "sync", "backup", "timeout", "stale")


@dataclass(frozen=True)
class UpdateConfig:
    """How updates are applied, resolved against the number of workers.

    ``replicas_to_aggregate`` (K) is the number of gradients a step waits for;
    ``tokens`` is how many worker closures are kept in flight per step (max(N, K), like
    TF1's sync token queue); ``max_staleness`` (s) is how many steps old an accepted
    gradient's parameters may be (0 for the synchronous modes).
    """

    mode: str
    num_workers: int
    replicas_to_aggregate: int
    timeout_seconds: float | None = None
    min_replicas: int = 1
    max_staleness: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"update mode {self.mode!r}: use one of {', '.join(MODES)}")
        if self.num_workers < 1:
            raise ValueError("num_workers must be at least 1")
        if self.replicas_to_aggregate < 1:
            raise ValueError("replicas_to_aggregate must be at least 1")
        if self.mode == "timeout" and not self.timeout_seconds:
            raise ValueError("update mode timeout needs timeout_seconds")
        if self.min_replicas > self.replicas_to_aggregate:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) is larger than replicas_to_aggregate "
                f"({self.replicas_to_aggregate})"
            )

    @property
    def synchronous(self) -> bool:
        """True when updates go through the accumulators (every mode but async)."""
        return self.mode != "async"

    @property
    def tokens(self) -> int:
        """Worker closures kept in flight: every worker busy, K of them when K > N."""
        if self.mode in ("async", "stale"):
            return self.num_workers
        return max(self.num_workers, self.replicas_to_aggregate)

    @property
    def staleness(self) -> int:
        """Accepted staleness in steps (0: only gradients of the current step count)."""
        return self.max_staleness if self.mode == "stale" else 0


def resolve(update: Mapping[str, Any] | Any | None, num_workers: int) -> UpdateConfig:
    """An :class:`UpdateConfig` from ``options.update`` (a dict or an UpdateSpec).

    Defaults of K: sync N, backup N-1 (at least 1), timeout N, stale 1, async 1.
    """
    if update is None:
        data: dict[str, Any] = {}
    elif isinstance(update, Mapping):
        data = dict(update)
    else:
        data = dict(dataclasses.asdict(update))
    mode = data.get("mode") or "async"
    k = data.get("replicas_to_aggregate")
    if k is None:
        k = {
            "sync": num_workers,
            "backup": max(1, num_workers - 1),
            "timeout": num_workers,
        }.get(mode, 1)
    if mode == "sync" and k != num_workers:
        raise ValueError(
            f"update mode sync aggregates all {num_workers} workers; "
            f"use mode backup for replicas_to_aggregate={k}"
        )
    return UpdateConfig(
        mode=mode,
        num_workers=num_workers,
        replicas_to_aggregate=int(k),
        timeout_seconds=data.get("timeout_seconds"),
        min_replicas=int(data.get("min_replicas") or 1),
        max_staleness=int(data.get("max_staleness") or 0),
    )


def from_env(num_workers: int, environ: Mapping[str, str] | None = None) -> UpdateConfig:
    """The update config of this job, read from ``TFDIST_OPTIONS`` (async when absent)."""
    env = os.environ if environ is None else environ
    raw = env.get(contract.OPTIONS)
    options = json.loads(raw) if raw else {}
    return resolve(options.get("update"), num_workers)


def warn_if_update_ignored(options: Mapping[str, Any], where: str) -> None:
    """Print :func:`ignored_update_warning` to stderr, if there is one."""
    warning = ignored_update_warning(options, where)
    if warning:
        print(warning, file=sys.stderr, flush=True)


def ignored_update_warning(options: Mapping[str, Any], where: str) -> str | None:
    """The warning for a job that asks for a synchronous update mode while the script
    trains through ``where`` (model.fit callbacks, Loop), which updates asynchronously;
    None when nothing is ignored. Only :mod:`tfdist.runtime.sync.keras` ``fit`` and
    :class:`tfdist.runtime.sync.trainer.SyncTrainer` apply ``options.update``."""
    mode = ((options or {}).get("update") or {}).get("mode", "async")
    if mode == "async":
        return None
    return (
        f"tfdist: options.update.mode is '{mode}', but {where} updates asynchronously; "
        "use tfdist.runtime.sync.keras.fit or tfdist.runtime.sync.trainer.SyncTrainer to apply it"
    )
