"""Doors from neighbouring tools into layerlab: each lets another tool's users reach the fault
matrix from that tool's own side. ``inspect`` (a subpackage, the ``inspect`` extra: Inspect AI's
task, scorer and log export), ``otel`` (a subpackage, the ``otel`` extra: a run's records as
OpenTelemetry traces, sent to any OTLP/HTTP collector), ``pytest`` (the pytest plugin, entry point ``pytest11: layerlab``:
fixtures that run a target once per session, options, failing assertions that show the layer's
finding) and ``checks`` (what a finished run answers a test: its rates, verdicts and findings as
values to assert on, usable without pytest). Each is a thin door: the runs are
:func:`layerlab.harness.live.run_live`'s, the rates ``results.json``'s, the verdicts Table 10's
(as ``layerlab gate`` reads them).

Imported on their own, each needing its tool installed (``checks``: nothing beyond layerlab);
``pytest`` and ``checks`` import neither pandas nor the harness until a run is asked for, so
installing layerlab costs a test suite nothing until it uses the plugin."""

__all__ = ["checks", "inspect", "otel", "pytest"]
