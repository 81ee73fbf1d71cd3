"""The rows a report's tables show, made from the analysis: the verdict line of each configuration,
the run table, the speed table and the factor table.

    servediff compare runs/*.jsonl      # the Verdicts, Runs, Speed and Factors tables

Each module turns what ``compare/`` measured into typed rows; the sections lay them out.
"""
