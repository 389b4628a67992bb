"""The Spark backend: :mod:`.plan` (master, slots, what travels; no pyspark), :mod:`.driver`
(``SparkBackend``, in the tfdist process), :mod:`.channel` (the driver's authenticated server
for the agents) and :mod:`.agent` (runs one task in a barrier task; stdlib only, shipped by
value).

Nothing is imported here: ``import tfdist.backends.spark.plan`` must not import pyspark.
"""
