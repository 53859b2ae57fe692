"""What each arm of a run *is*, kept with its records: the manifest key ``mitigation_arms``.

A run's verdicts (Table 10, ``recompute``, ``compare --matrix``, ``gate --no-over-broad``) depend
on which layers an arm targets, and so on the arm's definition. That definition is written into
the run's manifest when the run is made (:func:`manifest_entry`: per arm its kinds, layers,
stages, whether it is a stack and a matrix row, and for a plug-in's kind the distribution and
version that provided it) and read back from there (:func:`book_of_manifests`; from run folders
by :func:`layerlab.archive.manifest.book_for`), never from whatever happens to be importable when
the archive is analysed: uninstalling a plug-in does not change a verdict. A manifest written
before the key existed (every committed archive) is read with the built-in arms of the shipped
mitigation spec (:func:`shipped`, built-in kinds only, no plug-in loaded). An arm known neither
way is bad input (:class:`UnknownArmError`, one line).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

KEY = "mitigation_arms"  # the manifest key


class UnknownArmError(ValueError):
    """An arm of the records that neither its manifest nor the shipped spec defines, or two
    manifests that define one arm differently."""


@dataclass(frozen=True)
class ArmDefinition:
    """An arm as the analysis needs it (no mitigation objects: nothing is imported)."""

    name: str
    kinds: tuple[str, ...]
    layers: tuple[str, ...]
    stages: tuple[str, ...]
    is_stack: bool
    matrix: bool
    plugins: tuple[tuple[str, str], ...] = ()  # (distribution, version) of plug-in kinds

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kinds": list(self.kinds),
            "layers": list(self.layers),
            "stages": list(self.stages),
            "stack": self.is_stack,
            "matrix": self.matrix,
        }
        if self.plugins:
            out["plugins"] = [{"distribution": d, "version": v} for d, v in self.plugins]
        return out

    @classmethod
    def from_json(cls, name: str, data: Any, source: str) -> ArmDefinition:
        where = f"{source}: manifest {KEY}.arms.{name}"
        if not isinstance(data, Mapping):
            raise UnknownArmError(f"{where}: expected a mapping, got {type(data).__name__}")

        def names(field: str) -> tuple[str, ...]:
            v = data.get(field)
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise UnknownArmError(f"{where}.{field}: expected a list of names")
            return tuple(v)

        flags = [data.get("stack"), data.get("matrix")]
        if not all(isinstance(f, bool) for f in flags):
            raise UnknownArmError(f"{where}: expected booleans 'stack' and 'matrix'")
        plugins = data.get("plugins") or []
        if not isinstance(plugins, list) or not all(
            isinstance(p, Mapping) and {"distribution", "version"} <= set(p) for p in plugins
        ):
            raise UnknownArmError(f"{where}.plugins: expected a list of {{distribution, version}}")
        return cls(
            name,
            names("kinds"),
            names("layers"),
            names("stages"),
            bool(flags[0]),
            bool(flags[1]),
            tuple((str(p["distribution"]), str(p["version"])) for p in plugins),
        )


@dataclass(frozen=True)
class ArmBook:
    """The definitions of a run's arms and its baseline (what :func:`specificity.matrix` reads:
    ``baseline``, ``arms``, ``matrix_arms``, ``arm``)."""

    baseline: str
    arms: Mapping[str, ArmDefinition]
    source: str

    def arm(self, name: str) -> ArmDefinition:
        try:
            return self.arms[name]
        except KeyError:
            raise UnknownArmError(
                f"{self.source}: arm {name!r} is defined neither by the manifest ({KEY}) nor by "
                "the shipped mitigation spec"
            ) from None

    @property
    def matrix_arms(self) -> tuple[str, ...]:
        return tuple(n for n, a in self.arms.items() if a.matrix and n != self.baseline)


def definition_of(arm: Any) -> ArmDefinition:
    """An :class:`~layerlab.mitigations.arms.Arm`'s definition, with the distribution and version
    of every kind a plug-in provides (a kind whose class lives outside ``layerlab``)."""
    from layerlab.mitigations.base import KINDS

    plugins = []
    for kind in arm.kinds:
        cls = KINDS.get(kind)
        dist = _distribution(cls.__module__) if cls is not None else None
        if dist is not None and dist not in plugins:
            plugins.append(dist)
    return ArmDefinition(
        arm.name,
        tuple(arm.kinds),
        tuple(arm.layers),
        tuple(arm.stages),
        bool(arm.is_stack),
        bool(arm.matrix),
        tuple(plugins),
    )


def _distribution(module: str) -> tuple[str, str] | None:
    """(distribution, version) providing the top-level package of ``module``; None for
    ``layerlab`` itself."""
    from importlib import metadata

    top = module.split(".", 1)[0]
    if top == "layerlab":
        return None
    dists = metadata.packages_distributions().get(top) or []
    if not dists:
        return (top, "unknown")
    return dists[0], metadata.version(dists[0])


def manifest_entry(spec: Any, names: Iterable[str]) -> dict[str, Any]:
    """The manifest's ``mitigation_arms``: the baseline's name and the definitions of the arms
    ``names`` of the :class:`~layerlab.mitigations.arms.MitigationSet` ``spec``."""
    return {
        "baseline": spec.baseline,
        "arms": {n: definition_of(spec.arm(n)).to_json() for n in dict.fromkeys(names)},
    }


@lru_cache(maxsize=1)
def shipped() -> ArmBook:
    """The shipped spec's arms built from the built-in kinds alone: how an archive whose manifest
    predates ``mitigation_arms`` is read (no plug-in is loaded)."""
    from layerlab import paths
    from layerlab.corpus.spec import load_yaml_as
    from layerlab.mitigations.arms import MitigationFile, build_arms
    from layerlab.mitigations.builtin import BUILTIN_KINDS

    f = load_yaml_as(paths.MITIGATION_SPEC, MitigationFile)
    spec = build_arms(f, str(paths.MITIGATION_SPEC), BUILTIN_KINDS)
    arms = {n: definition_of(a) for n, a in spec.arms.items()}
    return ArmBook(spec.baseline, arms, "the shipped mitigation spec")


def _book_of_manifest(m: Mapping[str, Any], source: str) -> ArmBook | None:
    entry = m.get(KEY)
    if entry is None:
        return None
    if not isinstance(entry, Mapping) or not isinstance(entry.get("baseline"), str):
        raise UnknownArmError(f"{source}: manifest {KEY}: expected {{baseline, arms}}")
    arms = entry.get("arms")
    if not isinstance(arms, Mapping):
        raise UnknownArmError(f"{source}: manifest {KEY}.arms: expected a mapping")
    return ArmBook(
        entry["baseline"],
        {n: ArmDefinition.from_json(n, d, source) for n, d in arms.items()},
        source,
    )


def combine(books: Sequence[ArmBook]) -> ArmBook:
    """One book from several manifests' books: an arm defined differently by two, or two
    baselines, is refused (:class:`UnknownArmError`)."""
    if not books:
        return shipped()
    first = books[0]
    arms: dict[str, ArmDefinition] = {}
    owner: dict[str, str] = {}
    for b in books:
        if b.baseline != first.baseline:
            raise UnknownArmError(
                f"{b.source}: baseline {b.baseline!r} differs from {first.source}'s "
                f"{first.baseline!r}"
            )
        for n, d in b.arms.items():
            if n in arms and arms[n] != d:
                raise UnknownArmError(
                    f"{b.source}: arm {n!r} is defined differently from {owner[n]} "
                    f"({KEY}: {d.to_json()} vs {arms[n].to_json()})"
                )
            arms.setdefault(n, d)
            owner.setdefault(n, b.source)
    return ArmBook(first.baseline, arms, " + ".join(dict.fromkeys(b.source for b in books)))


def book_of_manifests(
    manifests: Sequence[tuple[str, Mapping[str, Any]]], present: Iterable[str] = ()
) -> ArmBook:
    """The arms' definitions from ``(source, manifest)`` pairs: each manifest's own key, else the
    shipped spec for the arms it names; every arm of ``present`` (the records' arms) must be
    defined, or :class:`UnknownArmError` names it and where it was looked for."""
    books: list[ArmBook] = []
    for source, m in manifests:
        own = _book_of_manifest(m, source)
        if own is None:
            base = shipped()
            named = list(m.get("mitigations") or m.get("modes") or [])
            own = ArmBook(
                base.baseline,
                {n: base.arms[n] for n in named if n in base.arms},
                f"{source} (arms of the shipped spec)",
            )
        books.append(own)
    book = combine(books)
    if not manifests:  # a bare archive file: only the shipped spec can say
        book = ArmBook(book.baseline, shipped().arms, "the shipped mitigation spec")
    for name in dict.fromkeys(present):
        if name not in book.arms:
            fallback = shipped().arms.get(name)
            if fallback is not None and all(KEY not in m for _, m in manifests):
                book = ArmBook(book.baseline, {**book.arms, name: fallback}, book.source)
                continue
            raise UnknownArmError(
                f"{book.source}: records of arm {name!r}, which neither the manifest "
                f"({KEY}) nor the shipped mitigation spec defines"
            )
    return book
