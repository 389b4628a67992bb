"""The driver's side of the agent protocol, which the Spark and YARN backends share: the
authenticated channel to the agents (:mod:`~tfdist.backends.agent.channel`), the job's
working directory as it travels (:mod:`~tfdist.backends.agent.workdir`), the shared job
flow (:mod:`~tfdist.backends.agent.backend`) and the node package as shipped to a
container (:mod:`~tfdist.backends.agent.ship`). The agent itself is node code:
:mod:`tfdist.node.agent`."""
