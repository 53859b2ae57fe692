"""The arms a run compares: the entries and stacks of ``data/specs/mitigations.yaml`` (the YAML
models), validated against the registered kinds and built into :class:`Arm` values
(:class:`MitigationSet`, :func:`load_mitigations`).

An installed plug-in (:mod:`layerlab.registry`) adds arms with an arms file registered in
:data:`ARM_FILES`: the spec's ``mitigations`` and ``stacks`` (no ``baseline``), appended to every
spec :func:`load_mitigations` loads, in plug-in name order; its entries are matrix rows (Table 10)
unless marked ``matrix: false``.

An entry is a named kind with parameters, a stack a named list of entries. The strict contract is
the baseline arm (no mitigation); schema repair is a contract entry; every other entry runs on top
of the baseline's contract. A retry calls the (faulted) tool again with the next attempt number;
whether that can recover is a property of the fault, declared in the scenario DSL (``lasts``),
never of the mitigation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from layerlab import paths
from layerlab.corpus.spec import load_yaml_as
from layerlab.mitigations.base import KINDS, STAGES, Mitigation, Stage
from layerlab.mitigations.builtin import ContractCheck, EmptyContext
from layerlab.registry import Registry, did_you_mean
from layerlab.system.contract import ContractMode


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class EntrySpec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    kind: str
    params: dict[str, Any] = Field(default_factory=dict)
    description: str = ""
    matrix: bool = True  # a row of the specificity matrix


class StackSpec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    members: list[str] = Field(min_length=1)
    description: str = ""
    matrix: bool = True


class MitigationFile(_Strict):
    baseline: str
    mitigations: list[EntrySpec] = Field(min_length=1)
    stacks: list[StackSpec] = Field(default_factory=list)


class ArmsFile(_Strict):
    """A plug-in's arms: entries and stacks appended to a mitigations spec's."""

    mitigations: list[EntrySpec] = Field(default_factory=list)
    stacks: list[StackSpec] = Field(default_factory=list)


ALL = "all"  # ``--mitigation all``: the baseline and every matrix arm (a reserved name)
ARM_FILES: Registry[Path] = Registry("mitigation arms file")
"""Plug-ins' arms files (YAML as :class:`ArmsFile`) by plug-in name."""


@dataclass(frozen=True)
class Arm:
    """One arm of a run: a contract plus mitigation steps in stage order."""

    name: str
    contract: ContractMode
    steps: tuple[Mitigation, ...]
    layers: tuple[str, ...]
    stages: tuple[str, ...]
    actions: tuple[str, ...]
    kinds: tuple[str, ...]
    description: str
    is_stack: bool
    matrix: bool

    def at(self, *stages: Stage) -> tuple[Mitigation, ...]:
        return tuple(m for m in self.steps if m.stage in stages)

    def retriever(self, name: str) -> str:
        for m in self.at("index"):
            name = m.retriever(name)
        return name

    @property
    def empty_context_on_failure(self) -> bool:
        return any(isinstance(m, EmptyContext) for m in self.steps)


@dataclass(frozen=True)
class MitigationSet:
    """The arms named by a mitigations file, in file order (entries, then stacks). ``later``: the
    arms a live run resolves from a further spec (:func:`load_run_mitigations`), each with the
    file it came from; they are no matrix arms of this set (``--mitigation all`` is the first
    spec's)."""

    baseline: str
    arms: Mapping[str, Arm]
    source: str
    later: Mapping[str, str] = field(default_factory=dict)

    def arm(self, name: str) -> Arm:
        try:
            return self.arms[name]
        except KeyError:
            raise KeyError(
                f"unknown mitigation {name!r}{did_you_mean(name, self.arms)}; "
                f"known: {sorted(self.arms)} (from {self.source})"
            ) from None

    @property
    def contract_arms(self) -> tuple[str, ...]:
        """Arms that are a contract entry alone (the baseline first)."""
        names = [n for n, a in self.arms.items() if not a.is_stack and a.kinds == ("contract",)]
        return tuple(sorted(names, key=lambda n: n != self.baseline))

    @property
    def matrix_arms(self) -> tuple[str, ...]:
        return tuple(
            n for n, a in self.arms.items() if a.matrix and n != self.baseline and n not in self.later
        )

    def later_specs(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Of ``names``, the arms resolved from a further spec, each as what determines its
        records: the spec file's name, the contract and every step's kind and parameters (a
        run's identity: an edited arm is another run; arms of the first spec add nothing, so
        the ids of runs without such arms stay as they were)."""
        return {n: {"spec": Path(self.later[n]).name, **arm_identity(self.arms[n])}
                for n in dict.fromkeys(names) if n in self.later}  # fmt: skip

    def expand(self, names: Sequence[str] | None) -> tuple[str, ...]:
        """``--mitigation`` names with :data:`ALL` standing for the baseline and every matrix arm
        (spec order), each arm once, in the order given; unknown names are kept (``arm`` says)."""
        out: list[str] = []
        for n in names or ():
            out += [self.baseline, *self.matrix_arms] if n == ALL else [n]
        return tuple(dict.fromkeys(out))

    def frame(self) -> Any:
        """One row per arm: name, composition, layers, stages, actions, matrix row, description."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "mitigation": n + (" (baseline)" if n == self.baseline else ""),
                    "kind": ("stack: " + " + ".join(a.kinds)) if a.is_stack else a.kinds[0],
                    "layers": "+".join(a.layers) or "-",
                    "stage": "+".join(a.stages),
                    "actions": "/".join(a.actions),
                    "matrix": "yes" if a.matrix and n != self.baseline else "no",
                    "description": a.description,
                }
                for n, a in self.arms.items()
            ]
        )


def _check(f: MitigationFile) -> list[tuple[tuple[Any, ...], str]]:
    problems: list[tuple[tuple[Any, ...], str]] = []
    seen: dict[str, str] = {}
    names = [("mitigations", i, e.name) for i, e in enumerate(f.mitigations)]
    names += [("stacks", i, st.name) for i, st in enumerate(f.stacks)]
    for what, i, name in names:
        if name == ALL:
            problems.append(((what, i, "name"), f"{ALL!r} is reserved (--mitigation {ALL})"))
    for i, e in enumerate(f.mitigations):
        if e.name in seen:
            problems.append((("mitigations", i, "name"), f"duplicate name {e.name!r}"))
        seen[e.name] = e.kind
        cls = KINDS.get(e.kind)
        if cls is None:
            problems.append(
                (
                    ("mitigations", i, "kind"),
                    f"unknown mitigation kind {e.kind!r}; expected one of {sorted(KINDS)}",
                )
            )
            continue
        try:
            cls.Params.model_validate(e.params)
        except ValidationError as exc:
            for err in exc.errors():
                what = "unknown parameter" if err["type"] == "extra_forbidden" else err["msg"]
                problems.append(
                    ((("mitigations", i, "params", *err["loc"])), f"{what} (kind {e.kind!r})")
                )
    for i, st in enumerate(f.stacks):
        if st.name in seen:
            problems.append((("stacks", i, "name"), f"duplicate name {st.name!r}"))
        for j, m in enumerate(st.members):
            if m not in seen or seen[m] == "":
                problems.append(
                    (
                        ("stacks", i, "members", j),
                        f"unknown mitigation {m!r}; stacks list entries of 'mitigations'",
                    )
                )
        if sum(seen.get(m) == "contract" for m in st.members) > 1:
            problems.append((("stacks", i, "members"), "at most one contract entry per stack"))
        seen[st.name] = ""
    if seen.get(f.baseline) != "contract":
        problems.append((("baseline",), f"baseline {f.baseline!r} must name a contract entry"))
    return problems


def build_arms(
    f: MitigationFile, source: str, kinds: Mapping[str, type[Mitigation]] = KINDS
) -> MitigationSet:
    """The arms of a checked spec, their steps made from the kinds registered in ``kinds``
    (default every registered kind; :func:`layerlab.mitigations.book.shipped` passes the
    built-in kinds alone)."""
    entries = {e.name: e for e in f.mitigations}

    def make(e: EntrySpec) -> Mitigation:
        cls = kinds[e.kind]
        return cls(cls.Params.model_validate(e.params), e.name)

    made = {n: make(e) for n, e in entries.items()}
    base = made[f.baseline]
    assert isinstance(base, ContractCheck)

    def arm(name: str, members: Sequence[str], description: str, stack: bool, matrix: bool) -> Arm:
        ms = [made[m] for m in members]
        contracts = [m for m in ms if isinstance(m, ContractCheck)]
        contract = contracts[0].mode if contracts else base.mode
        steps = tuple(
            sorted(
                (m for m in ms if not isinstance(m, ContractCheck)),
                key=lambda m: STAGES.index(m.stage),
            )
        )
        layers = tuple(dict.fromkeys(layer for m in ms for layer in m.layers))
        return Arm(
            name=name,
            contract=contract,
            steps=steps,
            layers=layers,
            stages=tuple(dict.fromkeys(m.stage for m in ms)),
            actions=tuple(dict.fromkeys(a for m in ms for a in m.actions)),
            kinds=tuple(m.kind for m in ms),
            description=description,
            is_stack=stack,
            matrix=matrix,
        )

    arms: dict[str, Arm] = {}
    for e in f.mitigations:
        doc = e.description or " ".join(
            (kinds[e.kind].__doc__ or "").strip().split("\n\n")[0].split()
        )
        arms[e.name] = arm(e.name, [e.name], doc, False, e.matrix)
    for st in f.stacks:
        arms[st.name] = arm(
            st.name, st.members, st.description or " + ".join(st.members), True, st.matrix
        )
    return MitigationSet(f.baseline, arms, source)


def _appended(f: MitigationFile, added: ArmsFile) -> MitigationFile:
    return f.model_copy(
        update={
            "mitigations": [*f.mitigations, *added.mitigations],
            "stacks": [*f.stacks, *added.stacks],
        }
    )


def _check_added(f: MitigationFile, added: ArmsFile) -> list[tuple[tuple[Any, ...], str]]:
    """The problems of ``added`` appended to the (valid) spec ``f``, located in ``added``."""
    start = {"mitigations": len(f.mitigations), "stacks": len(f.stacks)}
    problems: list[tuple[tuple[Any, ...], str]] = []
    for loc, msg in _check(_appended(f, added)):
        if len(loc) > 1 and loc[1] >= start[loc[0]]:
            problems.append(((loc[0], loc[1] - start[loc[0]], *loc[2:]), msg))
        else:  # a name of the spec's own, now taken by the plug-in
            problems.append(((), f"{loc[0]}[{loc[1]}] of the spec: {msg}"))
    return problems


_CACHE: dict[tuple[Path, ...], tuple[tuple[float, ...], MitigationSet]] = {}


def load_mitigations(path: Path | str | None = None) -> MitigationSet:
    """Load and validate ``mitigations.yaml`` (default: the committed spec) and the installed
    plug-ins' arms files (:data:`ARM_FILES`); :class:`SpecError` lists every problem as
    ``file:line: field: expectation``."""
    files = (Path(path or paths.MITIGATION_SPEC), *(Path(ARM_FILES[n]) for n in sorted(ARM_FILES)))
    mtimes = tuple(p.stat().st_mtime if p.exists() else -1.0 for p in files)
    hit = _CACHE.get(files)
    if hit is not None and hit[0] == mtimes:
        return hit[1]
    spec = load_yaml_as(files[0], MitigationFile, check=_check)
    for p in files[1:]:
        added = load_yaml_as(p, ArmsFile, check=partial(_check_added, spec))
        spec = _appended(spec, added)
    out = build_arms(spec, " + ".join(map(str, files)))
    _CACHE[files] = (mtimes, out)
    return out


RUN_SPECS = (paths.MITIGATION_SPEC, paths.TRANSPORT_MITIGATION_SPEC)
"""The specs a live run's arm names resolve from, in order: the committed one (whose hash names
the paper's archives, so no arm is added to it), then the transport arms' own."""


def load_run_mitigations(specs: Sequence[Path | str] | None = None) -> MitigationSet:
    """The arms a live run (``run live --mitigation``, a run configuration's ``mitigations``)
    may name: those of the first spec (:func:`load_mitigations`, with the plug-ins' arms), then
    those of each further spec that the ones before do not name (the set's ``later``). The
    baseline and ``--mitigation all`` are the first spec's; an unknown name is one line naming
    every file."""
    specs = tuple(specs or RUN_SPECS)
    loaded = [load_mitigations(p) for p in specs]  # each checked and cached by its mtimes
    hit = _RUN_CACHE.get(specs)
    if hit is not None and all(a is b for a, b in zip(hit[0], loaded, strict=True)):
        return hit[1]
    arms, later = dict(loaded[0].arms), {}
    for p, spec in zip(specs[1:], loaded[1:], strict=True):
        for n, a in spec.arms.items():
            if n not in arms:
                arms[n], later[n] = a, str(p)
    source = ", then ".join(str(p) for p in specs)
    out = MitigationSet(loaded[0].baseline, arms, source, later)
    _RUN_CACHE[specs] = (tuple(loaded), out)
    return out


_RUN_CACHE: dict[tuple[Path | str, ...], tuple[tuple[MitigationSet, ...], MitigationSet]] = {}


def arm_identity(a: Arm) -> dict[str, Any]:
    """What an arm's records depend on: its contract and each step's kind and parameters."""
    return {
        "contract": asdict(a.contract),
        "steps": [{"kind": m.kind, "params": m.params.model_dump(mode="json")} for m in a.steps],
    }


def arm(name: str, path: Path | str | None = None) -> Arm:
    """The arm ``name`` of the committed (or given) mitigations file."""
    return load_mitigations(path).arm(name)


def contract_mode(name: str, path: Path | str | None = None) -> ContractMode:
    """The contract of the contract entry ``name`` (e.g. the baseline); ``KeyError`` otherwise."""
    a = arm(name, path)
    if a.is_stack or a.kinds != ("contract",):
        raise KeyError(
            f"{name!r} is not a contract entry; contract entries: {load_mitigations(path).contract_arms}"
        )
    return a.contract


def contract_pair(path: Path | str | None = None) -> tuple[str, str]:
    """(baseline, schema-repair treatment): the two contract arms the paper's Tables 2, 4, 5, 8
    and 9 compare, named by the spec rather than by literals in every module."""
    arms = load_mitigations(path).contract_arms
    if len(arms) < 2:
        raise KeyError(f"the mitigations spec needs two contract entries, has {list(arms)}")
    return arms[0], arms[1]


class _Layered(Protocol):
    @property
    def layers(self) -> tuple[str, ...]: ...


def targets(a: _Layered, scenario_layers: Mapping[str, str]) -> tuple[str, ...]:
    """Scenarios whose layer (``a+b`` for compound ones) the arm targets."""
    return tuple(s for s, layer in scenario_layers.items() if set(layer.split("+")) & set(a.layers))
