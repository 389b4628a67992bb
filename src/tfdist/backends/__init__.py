"""Backends: where tasks run. Imported lazily so `import tfdist` stays light."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tfdist.errors import SpecError

if TYPE_CHECKING:
    from tfdist.backends.base import Backend, BackendOptions
    from tfdist.jobspec.model import JobSpec

#: name -> (module, class)
REGISTRY = {
    "local": ("tfdist.backends.local", "LocalBackend"),
    "kubernetes": ("tfdist.backends.k8s.backend", "KubernetesBackend"),
    "ray": ("tfdist.backends.ray.driver", "RayBackend"),
    "spark": ("tfdist.backends.spark.driver", "SparkBackend"),
    "yarn": ("tfdist.backends.yarn.driver", "YarnBackend"),
}


def create(name: str, job: JobSpec, options: BackendOptions | None = None) -> Backend:
    """Build the backend called ``name`` (importing its module only now)."""
    if name not in REGISTRY:
        raise SpecError(f"--backend: unknown backend '{name}'; choose one of {', '.join(REGISTRY)}")
    module_name, class_name = REGISTRY[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise SpecError(
            f"--backend {name}: needs an optional package ({err.name}); "
            f"install it with: pip install 'tfdist[{name}]'"
        ) from None
    cls = getattr(module, class_name)
    backend: Backend = cls(job, options)
    return backend
