"""``servediff verify``: is this endpoint serving the reference configuration? A sequential,
anytime-valid test whose null is the reference's own nondeterminism (its grammar in ``command``,
the reference, the plan and the requests within budget in ``procedure``, the verdict in
``verdict``; the statistics are ``compare/verify.py`` and ``compare/stats/conformal.py``, the
file it writes ``compare/verify_result.py``)."""
