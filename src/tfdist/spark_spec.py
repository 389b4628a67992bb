"""The job file's ``spark:`` section (see :mod:`tfdist.backends.spark`), kept apart from
:mod:`tfdist.spec` only for size; :class:`tfdist.spec.JobSpec` holds it as ``spark``."""


from dataclasses import dataclass, field
from typing import Any

from tfdist.schema import Record, rules


def _conf_strings(value: Any) -> Any:
    """Spark settings are text; ``true`` in YAML means Spark's ``true``."""
    if isinstance(value, dict):
        return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    return value


@dataclass(frozen=True, kw_only=True)
class SparkSpec(Record):
    """Where and how the job runs on a Spark cluster (ignored by other backends)."""

    #: ``local[N]``, ``local-cluster[W,C,M]``, ``spark://HOST:PORT``, ``k8s://...``, ``yarn``.
    master: str | None = None
    #: The standalone master's web UI (``http://HOST:8080``): its JSON status tells tfdist the
    #: cluster's cores, so a gang that can never fit is refused before a session starts.
    master_ui: str | None = None
    #: Ship the job's workdir as a Spark archive; tasks start in the unpacked copy.
    ship_workdir: bool = True
    #: Extra Spark settings for the session (``spark.archives``, ``spark.pyspark.python``, ...).
    conf: dict[str, str] = field(default_factory=dict, metadata=rules(before=_conf_strings))
    #: How long a busy cluster is waited for (enough free task slots) before giving up.
    placement_timeout_seconds: float = field(default=60.0, metadata=rules(gt=0))
