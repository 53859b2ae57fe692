"""The settings a target run reads itself (``--target-setting NAME=VALUE``), typed and ranged
before a run folder exists: ``timeout`` (seconds per record, > 0), ``concurrent``, ``ainvoke``
and ``aquery`` (``true``/``false``), ``otel_port`` and ``otel_wait`` (an HTTP service's spans:
:mod:`~layerlab.harness.targets.otlp`). Other settings are the target's own (``req.settings``)."""

from __future__ import annotations

import math

from layerlab.harness.targets.spec import TargetError, TargetSpec

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def timeout_setting(spec: TargetSpec, default: float | None) -> float | None:
    """The per-record timeout in seconds: ``--target-setting timeout=S`` (a number > 0), else
    ``default`` (the run's ``--timeout``); :class:`TargetError` names a bad value."""
    opts = spec.options()
    if "timeout" not in opts:
        return default
    raw = opts["timeout"]
    try:
        value = float(raw) if not isinstance(raw, bool) else math.nan  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise TargetError(
            f"--target-setting timeout={raw!r}: expected seconds, a number greater than 0"
        )
    return value


def bool_setting(spec: TargetSpec, name: str) -> bool | None:
    """``--target-setting NAME=true|false`` (None when not given); :class:`TargetError` names
    another value."""
    opts = spec.options()
    if name not in opts:
        return None
    raw = opts[name]
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise TargetError(f"--target-setting {name}={raw!r}: expected true or false")


def check_settings(spec: TargetSpec) -> None:
    """Refuse settings of the wrong type or range (``timeout``, ``concurrent``, ``ainvoke``,
    ``aquery``)."""
    timeout_setting(spec, None)
    bool_setting(spec, "concurrent")
    bool_setting(spec, "ainvoke")
    bool_setting(spec, "aquery")
    from layerlab.harness.targets import otlp

    otlp.port_setting(spec.options())
    otlp.wait_setting(spec.options())
