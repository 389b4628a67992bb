"""What runs on a cluster node, shipped whole: the task process and its guardian
(:mod:`~tfdist.node.procs`, :mod:`~tfdist.node.guardian`), warm spares
(:mod:`~tfdist.node.spares`, :mod:`~tfdist.node.spare_program`), the agent that the Spark
and YARN backends both run (:mod:`~tfdist.node.agent`), the YARN container's bootstrap
(:mod:`~tfdist.node.yarn_container`) and the protobuf wire format it reads
(:mod:`~tfdist.node.protowire`).

The rule that lets it travel: these modules import the standard library, each other and
the two base modules every layer shares (:mod:`tfdist.contract`, :mod:`tfdist.states`),
nothing else (tests/test_structure.py checks it). A node needs a Python, not an installed
tfdist: YARN containers get this package as a zip (:mod:`tfdist.backends.agent.ship`), Ray
and Spark ship its modules by value.
"""
