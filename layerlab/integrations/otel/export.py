"""A run's records as traces, sent to an OTLP/HTTP endpoint: ``layerlab export otel RUN
--endpoint URL`` and ``run live --otel-endpoint URL`` (the ``otel`` extra).

The run folder is read as every reader of runs reads it (:func:`layerlab.archive.check_path`);
a partial run's records so far are sent (the resource says ``layerlab.run.partial``). Each
record becomes one trace (:mod:`~layerlab.integrations.otel.traces`) sent with OpenTelemetry's
own OTLP/HTTP exporter (protobuf) to ``URL`` (a collector's base address gets ``/v1/traces``),
under the resource ``service.name=layerlab`` and ``openinference.project.name`` (``--project``,
default the run id: Phoenix files the traces under that project). Only what the archive
allowlist permits is sent — the record's keys and labels, the fault as the scenario spec
defines it, the run's public tool-call table — unless the private sample log is given
(``--sample-log PATH``): then the question, the reply, the evidence ids, the scorer's reasons
and the team's own spans of each record go too (send those only to a collector you control).
The answer key is not read (the private log's ``expected`` is what the run wrote).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerlab import archive
from layerlab._secrets import credentials_in
from layerlab.archive.schema import KEYS, Record
from layerlab.integrations.otel.traces import PlanSpan, fault_of, record_spans

EXPECTED = "a layerlab run folder (manifest.json and records.parquet, as `layerlab run` writes)"
BATCH = 512  # spans per export request


class ExportError(ValueError):
    """A run or endpoint that cannot be exported to (one line: what, and what was expected)."""


@dataclass(frozen=True)
class Sent:
    """What an export sent: records (= traces), spans, the project and whether it was private."""

    records: int
    spans: int
    project: str
    private: bool


def endpoint_url(url: str) -> str:
    """The OTLP/HTTP traces URL of ``url`` (``/v1/traces`` added to a bare base address);
    :class:`ExportError` for a URL that is not http(s) or carries credentials."""
    u = urllib.parse.urlsplit(url.strip())
    if u.scheme not in ("http", "https") or not u.netloc:
        raise ExportError(f"--endpoint {url}: expected an OTLP/HTTP address, "
                          "http(s)://host:port[/v1/traces]")  # fmt: skip
    cred = credentials_in(url)
    if cred is not None:
        raise ExportError(f"--endpoint: the URL carries a credential ({cred}); give headers "
                          "through OTEL_EXPORTER_OTLP_HEADERS instead")  # fmt: skip
    if u.path in ("", "/"):
        return urllib.parse.urlunsplit((u.scheme, u.netloc, "/v1/traces", u.query, ""))
    return url.strip()


def load_run(run: Path) -> tuple[dict[str, Any], list[Record], bool]:
    """The run folder's manifest, records and whether it is partial; :class:`ExportError`."""
    run = Path(run)
    if not (run / archive.MANIFEST).is_file():
        what = "does not exist" if not run.exists() else f"has no {archive.MANIFEST}"
        raise ExportError(f"{run}: {what}; expected {EXPECTED}")
    try:
        report = archive.check_path(run)
        manifest = archive.read_manifest(run)
    except archive.ArchiveError as exc:
        raise ExportError(f"{exc}; expected {EXPECTED}") from None
    if manifest.get("kind") == "langchain_study" or report.get("archive") is None:
        raise ExportError(f"{run}: no records to export ({report.get('note') or 'a study run'}); "
                          f"expected {EXPECTED}")  # fmt: skip
    return manifest, archive.read_records(Path(report["archive"])), bool(report["partial"])


def public_calls(run: Path, manifest: Mapping[str, Any]) -> dict[tuple[Any, ...], list[Any]]:
    """The run's public tool calls by record key (a target's or agent run's table), else {}."""
    from layerlab.harness.live.agentlog import read_table

    for kind in ("target", "agent"):
        if isinstance(manifest.get(kind), dict) and manifest[kind].get("table_sha256"):
            rows = read_table(Path(run), target=kind == "target")
            return {tuple(r[k] for k in KEYS): list(r["calls"]) for r in rows}
    return {}


def private_entries(path: Path | None, run_id: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The private sample log's entries of the run by record key (none: {})."""
    if path is None:
        return {}
    from layerlab.archive import samplelog

    try:
        entries = samplelog.read(Path(path))
    except samplelog.SampleLogError as exc:
        raise ExportError(str(exc)) from None
    mine = {tuple(e[k] for k in KEYS): e for e in entries if e.get("run_id") == run_id}
    if entries and not mine:
        raise ExportError(f"--sample-log {path}: holds no record of run {run_id} (expected the "
                          "log the run wrote with --sample-log)")  # fmt: skip
    return mine


def plan(
    run: Path, sample_log: Path | None = None, start_ns: int | None = None
) -> tuple[dict[str, Any], bool, list[tuple[int, list[PlanSpan]]]]:
    """The run's manifest, whether it is partial, and each record's (trace id, spans)."""
    from layerlab.faults.scenario import load_scenarios

    manifest, records, partial = load_run(run)
    scenarios = load_scenarios()
    calls = public_calls(run, manifest)
    entries = private_entries(sample_log, str(manifest["run_id"]))
    t0 = time.time_ns() if start_ns is None else start_ns
    out = []
    for i, rec in enumerate(sorted(records, key=archive.sort_key)):
        key = tuple(getattr(rec, k) for k in KEYS)
        out.append(record_spans(rec, fault_of(rec.scenario, scenarios), t0 + i * 1_000_000_000,
                                calls.get(key, ()), entries.get(key)))  # fmt: skip
    return manifest, partial, out


def _attr(value: Any) -> Any:
    """A value OpenTelemetry accepts: str, bool, int, float or a list of one of them."""
    if isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    ):
        return list(value)
    return json.dumps(value, sort_keys=True, default=str)


def _attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _attr(v) for k, v in attrs.items() if v is not None}


def readable(trace_id: int, spans: Sequence[PlanSpan], resource: Any, scope: Any) -> list[Any]:
    """The spans as the SDK's ``ReadableSpan`` objects (what an exporter sends)."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    flags = TraceFlags(TraceFlags.SAMPLED)
    out = []
    for s in spans:
        ctx = SpanContext(trace_id, s.span_id, is_remote=False, trace_flags=flags)
        parent = None if s.parent_id is None else SpanContext(
            trace_id, s.parent_id, is_remote=False, trace_flags=flags)  # fmt: skip
        status = Status(StatusCode.ERROR, s.error) if s.error else Status(StatusCode.OK)
        kind = getattr(SpanKind, s.kind.upper(), SpanKind.INTERNAL)
        out.append(ReadableSpan(
            name=s.name, context=ctx, parent=parent, resource=resource, kind=kind,
            attributes=_attrs(s.attributes), status=status, start_time=s.start_ns,
            end_time=s.end_ns, instrumentation_scope=scope,
            events=[Event(n, _attrs(a), t) for n, t, a in s.events],
        ))  # fmt: skip
    return out


def send(
    run: Path,
    endpoint: str,
    sample_log: Path | None = None,
    project: str | None = None,
    timeout: float = 30.0,
) -> Sent:
    """Send the run's records as traces to ``endpoint`` (see the module); :class:`ExportError`
    when the run cannot be read or the endpoint refuses them."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import SpanExportResult
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    except ImportError:
        from layerlab.extras import install_hint

        raise ExportError(f"exporting traces needs OpenTelemetry: {install_hint('opentelemetry')}"
                          ) from None  # fmt: skip
    from layerlab import __version__

    url = endpoint_url(endpoint)
    manifest, partial, traces = plan(run, sample_log)
    name = project or str(manifest["run_id"])
    resource = Resource.create({
        "service.name": "layerlab", "service.version": __version__,
        "openinference.project.name": name, "layerlab.run_id": str(manifest["run_id"]),
        "layerlab.run.partial": partial, "layerlab.private": sample_log is not None,
    })  # fmt: skip
    scope = InstrumentationScope("layerlab", __version__)
    spans = [s for tid, plan_ in traces for s in readable(tid, plan_, resource, scope)]
    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout)
    try:
        for i in range(0, len(spans), BATCH):
            if exporter.export(spans[i : i + BATCH]) is not SpanExportResult.SUCCESS:
                raise ExportError(f"--endpoint {url}: the collector did not accept the spans "
                                  f"(batch {i // BATCH + 1}; is an OTLP/HTTP receiver there?)")  # fmt: skip
    finally:
        exporter.shutdown()
    return Sent(len(traces), len(spans), name, sample_log is not None)
