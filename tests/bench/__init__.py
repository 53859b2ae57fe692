"""Benchmarks (``make bench``), outside the library: medians of repeated runs and ratios, never timed unit tests.

Run with ``python -m tests.bench [--repeat N] [--only NAME] [--skip NAME] [--json]``;
``--profile`` instead shows where the live harness's CPU goes per call, by owner. Every
benchmark returns a dict with at least ``benchmark``, ``measured`` (a number), ``unit``,
``goal`` (text, e.g. ``<= 1 s``) and ``ok`` (the goal met), plus its details. The default
output is one table — the goals of issue 15 and the others, each with a pass/fail mark — framed
by the machine's load average at start and end (timings on a loaded machine are not the quiet
machine's: read them with the load). ``--json`` prints one JSON object per benchmark instead.

Modules: ``report`` (the result shape, :func:`~.report.verdict`, and the printed table), ``suite``
(the harness, CLI, bootstrap and coverage benchmarks), ``target`` (a user's system that answers
in 1 s, at concurrency 16), ``local_model`` (the harness against a
llama.cpp server driven directly), ``runtimes`` (llama-cpp-python's server against
llama-server: calls/s and identical greedy replies per server layout), ``cpu_profile`` (``--profile``) and ``run`` (the registry of
benchmarks and :func:`~.run.main`).
"""
