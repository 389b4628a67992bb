"""Run a traced function on a worker's own copies of the variables instead of the ps's (imports TF).

``loss_fn`` reads the model's variables, which live on the ps; reading each of them there at
every step would cost round trips (and split the worker's loop between two processes). So
the gradient function is traced with the variables' handles among its captured inputs and
called with the copies' handles in their place: the same code writes the parameters the
last round trip brought into the copies and reads them from there.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def call_on_copies(traced: Any, variables: list[Any], copies: list[Any], values: list[Any],
                   batch: Any) -> Any:
    """``traced(values, batch)`` (a ``tf.function``) with each of ``variables`` replaced by its
    copy (``copies``: their handles, on the worker, in the same order). Raises rather than
    let the call write the ps variables when the trace does not capture all of them."""
    fn = traced.get_concrete_function(values, batch)
    local = {id(v.handle): c for v, c in zip(variables, copies, strict=True)}
    captured = [local.get(id(t), t) for t in fn.captured_inputs]
    swapped = sum(id(t) in local for t in fn.captured_inputs)
    if swapped != len(local):  # never let it write the ps variables instead
        raise RuntimeError(f"tfdist.runtime.sync: {swapped} of {len(local)} variables found in the trace")
    flat = [*values, *tf.nest.flatten(batch, expand_composites=True)]
    return fn._call_flat(flat, captured)
