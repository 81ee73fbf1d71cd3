"""``servediff audit``: does an engine keep its determinism promise under load?

Workloads (``workload.py``) are pure plans of requests; ``conduct.py`` sends them to a running or
launched server into ordinary run records; ``compare.audit`` decides from the records alone;
``promises.py`` knows how each engine spells its promise.
"""
