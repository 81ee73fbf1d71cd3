"""``servediff verify``: is this endpoint serving the reference configuration? A sequential,
anytime-valid test whose null is the reference's own nondeterminism (its grammar in ``command``,
the requests within budget in ``procedure``, the file it writes in ``result``; the statistics are
``compare/verify.py`` and ``compare/stats/conformal.py``)."""
