"""Synchronous parameter-server training with backup workers and bounded staleness.

TensorFlow 2's ParameterServerStrategy only updates asynchronously; this package brings
back what TF1's ``SyncReplicasOptimizer`` did, on top of ``ClusterCoordinator``: a step
waits for K fresh gradients (not for the slowest worker), averages them on the ps and
drops, counting them, gradients computed on parameters that are no longer current.

Modules, from the bottom up:

* :mod:`~tfdist.runtime.sync.config` — the update modes and ``options.update`` resolved
  against the job (pure; no TensorFlow);
* :mod:`~tfdist.runtime.sync.ps` — the queues on the ps tasks and the graph code that
  collects exactly K fresh gradients there (TensorFlow);
* :mod:`~tfdist.runtime.sync.trainer` — ``SyncTrainer``, the custom loop (TensorFlow);
* :mod:`~tfdist.runtime.sync.keras` — ``fit``, the same loop over a compiled tf_keras model.

Importing this package imports none of them, so ``import tfdist.runtime`` stays light.
"""
