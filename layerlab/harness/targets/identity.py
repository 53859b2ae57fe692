"""The target's code in the run's identity (issue 31, item 4): a fingerprint of what answered.

A Python or LangChain target: the SHA-256 of the module file ``module:attr`` names and of its
top-level package (every ``.py`` file under it, by relative path), so an edited target is
another run and ``--resume`` across the edit is refused like any other changed setting. An HTTP
target: the version the service reports, from ``GET /version`` at its origin (a JSON
``{"version": ...}``, a short text, or an ``X-Service-Version`` header); a service that reports
none gets a warning that its code is not recorded (the run id then covers only its URL, name,
``--target-version`` and settings). Code is never stored: only hashes and the reported version.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from layerlab._code import NOT_RECORDED, module_code
from layerlab.harness.targets.spec import TargetSpec

VERSION_HEADER = "X-Service-Version"


def code_of_module(spec: TargetSpec) -> dict[str, str]:
    """``module``, ``module_sha256`` and (in a package) ``package``, ``package_sha256``."""
    from layerlab.harness.targets.python import load_attr

    load_attr(spec)  # imports the module (the current folder on the path), or one clear line
    return module_code(spec.ref.partition(":")[0])


def service_version(url: str, timeout: float = 5.0) -> str | None:
    """The version the service at ``url`` reports at ``GET /version`` of its origin, or None."""
    import urllib.error
    import urllib.parse
    import urllib.request

    u = urllib.parse.urlsplit(url)
    try:
        with urllib.request.urlopen(f"{u.scheme}://{u.netloc}/version", timeout=timeout) as r:
            header = r.headers.get(VERSION_HEADER)
            body = r.read(4097).decode("utf-8", "replace").strip()
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if header:
        return header.strip()[:200]
    try:
        data = json.loads(body)
    except ValueError:
        data = body
    if isinstance(data, dict):
        data = data.get("version")
    if isinstance(data, (str, int, float)) and 0 < len(str(data)) <= 200 and "\n" not in str(data):
        return str(data)
    return None


def fingerprint(spec: TargetSpec) -> dict[str, str]:
    """What the run id and manifest keep of the target's code (see the module docstring)."""
    if spec.kind == "http":
        v = service_version(spec.ref)
        return {"service_version": v} if v is not None else {"code": NOT_RECORDED}
    return code_of_module(spec)


def with_code(spec: TargetSpec, say: Callable[[str], None] = lambda _m: None) -> TargetSpec:
    """``spec`` carrying its code's fingerprint; warns through ``say`` when it has none."""
    code = fingerprint(spec)
    if code.get("code") == NOT_RECORDED:
        say(
            f"warning: {spec.name}: the service reports no version (GET /version or a "
            f"{VERSION_HEADER} header), so its code is not recorded in the run id: a changed "
            "service resumes as the same run unless --target-version changes"
        )
    return replace(spec, code=tuple(sorted(code.items())))
