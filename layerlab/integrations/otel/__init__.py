"""OpenTelemetry: a finished run's records as traces (the ``otel`` extra).

traces (one record as GenAI-convention spans with its fault, arm and scores, as plain data),
export (a run folder sent to an OTLP/HTTP endpoint: ``layerlab export otel``, ``run live
--otel-endpoint``). The other way — the team's own spans collected per record during a target
run — is the harness's (:mod:`layerlab.harness.targets.spans`).
"""

__all__ = ["export", "traces"]
