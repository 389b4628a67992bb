"""The job's data section on the driver side: which files each input names (:mod:`.resolve`),
how they are split over the workers (:mod:`.shard`, pure) and what each task is told
(:mod:`.plan`). What runs where the task runs (staging, keeping outputs) is
:mod:`tfdist.node.staging` and :mod:`tfdist.node.outputs`; docs/data.md is the user's guide."""
