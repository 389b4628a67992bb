"""YARN: the ResourceManager REST client and what the Spark backend needs on YARN."""
