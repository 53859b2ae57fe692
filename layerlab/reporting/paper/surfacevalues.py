"""The macros of the paper's section on a real model's reliability surface (a part of
:mod:`layerlab.reporting.paper.papervalues`, which writes them with the rest): the run's size and
provenance from the committed archive's manifest (the model file's hash, the runtime and its
build), what a point of that size can decide, and each faulted layer's values from the generated
table ``surface_models`` (safe resolution per λ, pass^k at the smallest and largest λ, the
tolerance of the table's threshold)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from layerlab import paths
from layerlab.reporting.paper.texvalues import ValuesError, camel, tex, word

DOSES = {0.0: "Zero", 0.1: "Tenth", 0.25: "Quarter", 0.5: "Half", 1.0: "One"}
"""Each tested intensity's word in a macro name (``\\vSurfaceSafeStaleIndexQuarter``)."""
_K = {2: "Two", 4: "Four", 8: "Eight"}


def values(table: pd.DataFrame, folder: Path | None = None) -> dict[str, str]:
    """The section's macros (name without ``\\v`` → LaTeX text) from the table ``surface_models``
    (as its CSV reads, strings) and the archive ``folder`` (default: the one committed real-model
    surface). A value the prose needs that is missing: ``ValuesError``."""
    from layerlab import archive
    from layerlab.analysis import surface
    from layerlab.reporting.paper.tables.surface import THRESHOLD

    if folder is None:
        found = paths.archives_in(paths.LOCAL_MODEL_SURFACE)
        if len(found) != 1:
            raise ValuesError(f"{paths.LOCAL_MODEL_SURFACE}: expected one real-model surface, found {len(found)}")
        folder = found[0]
    man = archive.read_manifest(folder)
    (model,) = man["local_models"].values()
    n = int(table["records per λ"].iloc[0])
    out = {
        "SurfaceTasks": word(int(man["n_tasks"])), "SurfaceEpochs": word(int(man["replicates"])),
        "SurfaceRecords": f"{int(man['records']):,}".replace(",", "{,}"), "SurfaceCell": str(n),
        "SurfaceTemperature": f"{man['sampling']['temperature']:g}",
        "SurfaceThreshold": f"{THRESHOLD:g}", "SurfaceLayers": word(len(table)),
        "SurfacePassStep": f"{1 / int(man['n_tasks']):g}",
        "SurfaceNeed": str(surface.least_to_decide(n, THRESHOLD)),
        "SurfaceFile": tex(model["file"]), "SurfaceSha": model["file_sha256"][:16],
        "SurfaceRuntime": tex(model["runtime"]), "SurfaceCpu": tex(model["runtime_build"]["cpu"]),
        "SurfaceBuild": "native" if "GGML_NATIVE=ON" in model["runtime_build"]["cmake_args"] else "portable",
    }  # fmt: skip
    doses = sorted({float(c.rsplit("= ", 1)[1]) for c in table.columns if c.startswith("safe, λ")})
    ks = sorted({int(k) for k in re.findall(r"pass\^(\d+),", " ".join(table.columns))})
    if not doses or not ks:
        raise ValuesError("surface_models.csv: expected safe, λ = ... and pass^k, λ = ... columns")
    *most, last = [f"{d:g}" for d in doses]
    out |= {"SurfaceDoses": f"{', '.join(most)} and {last}", "SurfaceDoseMin": f"{doses[0]:g}",
            "SurfaceDoseMax": last, "SurfaceKMin": str(ks[0]), "SurfaceKMax": str(ks[-1])}  # fmt: skip
    keeps = next(c for c in table.columns if c.startswith("keeps "))
    out["SurfaceBelow"] = word(int(table[keeps].str.startswith("below").sum()))
    for col in table.columns:
        m = re.fullmatch(r"(safe|pass\^(\d+)), λ = ([0-9.]+)", col)
        if m is None:
            continue
        dose = DOSES.get(float(m[3]))
        if dose is None or (m[2] and int(m[2]) not in _K):
            raise ValuesError(f"surface_models.csv: column {col!r} has no macro name")
        cells = table[col].astype(str)
        what = "Safe" if m[2] is None else f"Pass{_K[int(m[2])]}"
        if dose == "Zero":  # λ = 0 strikes nothing: every layer's point is the clean one
            if cells.nunique() != 1:
                raise ValuesError(f"surface_models.csv: {col!r} differs between layers at λ = 0")
            r = re.fullmatch(r"([0-9.]+)(?: \[([0-9.]+), ([0-9.]+)\])?", cells.iloc[0])
            if r is None:
                raise ValuesError(f"surface_models.csv: {col!r}: expected a rate, got {cells.iloc[0]!r}")
            out[f"Surface{what}Zero"] = r[1]
            if r[2]:
                out[f"Surface{what}ZeroLow"], out[f"Surface{what}ZeroHigh"] = r[2], r[3]
                out[f"Surface{what}ZeroWidth"] = f"{float(r[3]) - float(r[2]):.3f}"
            continue
        for scen, cell in zip(table["layer"], cells, strict=True):
            key = camel(scen.rsplit("(", 1)[-1].rstrip(")"))
            out[f"Surface{what}{key}{dose}"] = cell.split(" [")[0]
        if m[2] and dose == "One":
            out[f"Surface{what}OneMax"] = max(cells, key=float)
    return out
