"""Scenario roles: which scenarios each analysis compares, declared in ``data/specs/roles.yaml``.

The contract treatment's target (the specificity margin of the paired analysis), the fault-free
negative control, the retriever audit's conditions and the explorer's representative cases
(Table 6), per reliability layer what a team reads about a system failing it (``findings``:
what it did, what it does not check, the mitigation entry that guards the layer), and layerlab's
deliberately over-broad control arms (``over_broad_controls``); and the same findings for a
conversational run (``conversation_findings``, by layer of ``scenarios_conversation.yaml``, each
guarded by a session mitigation of ``mitigations_conversation.yaml``). Every name must
be a scenario (a layer of a scenario, a guard an entry of the mitigations spec); an unknown one is
a :class:`SpecError` naming the file, line and field. The transport faults are not among the
paper's scenarios but have findings of their own: a finding's layer may also be one of
``scenarios_transport.yaml`` and its guard an arm of ``mitigations_transport.yaml`` (the arms a
live run resolves, :func:`layerlab.mitigations.load_run_mitigations`). Roles change no record, so they are not part
of any archive's provenance (the scenario and mitigation specs' hashes are).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from layerlab import paths
from layerlab.corpus.spec import SpecError, load_yaml_as
from layerlab.faults.scenario import load_scenarios

# what makes a task eligible for an explorer case, judged on the treatment arm's records
Rule = Literal["repaired", "grounded_false_positive", "denied", "completeness"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ExplorerCase(_Strict):
    """One row of Table 6: ``case`` may name the arm as ``{arm}``."""

    case: str = Field(min_length=1)
    scenario: str
    arm: Literal["baseline", "treatment"]  # the contract arm shown
    rule: Rule


class LayerFinding(_Strict):
    """What a system failing one layer did (``did``, then "in K of N <scenario> questions"), what
    it does not check (``lacks``) and the mitigation entry guarding the layer (``guard``)."""

    did: str = Field(min_length=1)
    lacks: str = Field(min_length=1)
    guard: str = Field(min_length=1)
    # the diagnostics (layers) of the answered failures ``did`` describes; empty: every answered
    # failure (a wrong answer diagnosed otherwise is then "answered wrongly otherwise")
    diagnosed: list[str] = Field(default_factory=list)


class Roles(_Strict):
    """The scenario roles of ``roles.yaml``."""

    contract_target: str
    negative_control: str
    audit: list[str] = Field(min_length=1)
    explorer: list[ExplorerCase] = Field(min_length=1)
    findings: dict[str, LayerFinding] = Field(default_factory=dict)  # by layer
    # a conversational run's findings, by layer of the conversational scenarios (guards: session
    # mitigations)
    conversation_findings: dict[str, LayerFinding] = Field(default_factory=dict)
    # layerlab's deliberately over-broad control arms (entries of the mitigations spec): Table 10
    # must flag them, so ``gate --no-over-broad`` leaves them out when a run holds every arm
    over_broad_controls: list[str] = Field(default_factory=list)
    # the specificity verdict's equivalence margin per layer (``default`` for the rest)
    equivalence_margin: dict[str, float] = Field(default_factory=lambda: {"default": 0.10})

    def margin(self, layer: str) -> float:
        """The equivalence margin δ of an off-target cell of ``layer``."""
        m = self.equivalence_margin
        return float(m.get(layer, m.get("default", 0.10)))

    def named(self) -> Iterator[tuple[tuple[Any, ...], str]]:
        """Every scenario a role names, with its field."""
        yield ("contract_target",), self.contract_target
        yield ("negative_control",), self.negative_control
        for i, name in enumerate(self.audit):
            yield ("audit", i), name
        for i, c in enumerate(self.explorer):
            yield ("explorer", i, "scenario"), c.scenario


_CACHE: dict[tuple[Path, Path], tuple[tuple[float, ...], Roles]] = {}


def _mtime(p: Path) -> float:
    return p.stat().st_mtime if p.exists() else -1.0


def load_roles(path: Path | str | None = None, scenarios_path: Path | str | None = None) -> Roles:
    """Load and validate ``roles.yaml`` (default: the committed spec) against the scenario DSL
    (default: the committed ``scenarios.yaml``; a finding's layer may also be a transport
    fault's, of ``scenarios_transport.yaml``); :class:`SpecError` lists every problem as
    ``file:line: field: expectation``."""
    p = Path(path or paths.ROLE_SPEC)
    sp = Path(scenarios_path or paths.SCENARIO_SPEC)
    tp = paths.TRANSPORT_SCENARIO_SPEC
    stamp = (_mtime(p), _mtime(sp), _mtime(tp))
    hit = _CACHE.get((p, sp))
    if hit is not None and hit[0] == stamp:
        return hit[1]
    scenarios = load_scenarios(sp)
    known = list(scenarios)
    with_transport = [*scenarios.values(), *load_scenarios(tp).values()]
    layers = sorted({part for s in with_transport for part in s.spec.layer.split("+")})
    sp_text = f"{sp} and {tp}"

    def check(roles: Roles) -> list[tuple[tuple[Any, ...], str]]:
        from layerlab.mitigations import load_run_mitigations

        book = load_run_mitigations()  # mitigations.yaml, then mitigations_transport.yaml
        arms, arms_text = book.arms, f"an entry of {book.source}"
        problems = [
            (loc, f"unknown scenario {name!r}; expected one of {known} (from {sp})")
            for loc, name in roles.named()
            if name not in known
        ]
        for layer, f in roles.findings.items():
            if layer not in layers:
                problems.append(
                    (("findings", layer), f"unknown layer {layer!r}; expected one of {layers} (from {sp_text})")
                )
            problems += [
                (("findings", layer, "diagnosed", i), f"unknown layer {d!r}; expected one of {layers} (from {sp_text})")
                for i, d in enumerate(f.diagnosed)
                if d not in layers
            ]  # fmt: skip
            if f.guard not in arms:
                problems.append(
                    (
                        ("findings", layer, "guard"),
                        f"unknown mitigation {f.guard!r}; expected {arms_text}",
                    )
                )
        problems += _conversation_problems(roles)
        problems += [
            (("over_broad_controls", i), f"unknown mitigation {name!r}; expected {arms_text}")
            for i, name in enumerate(roles.over_broad_controls)
            if name not in arms
        ]  # fmt: skip
        for layer, d in roles.equivalence_margin.items():
            if layer != "default" and layer not in layers:
                problems.append(
                    (("equivalence_margin", layer),
                     f"unknown layer {layer!r}; expected 'default' or one of {layers} "
                     f"(from {sp_text})")
                )  # fmt: skip
            if not 0 < d < 1:
                problems.append(
                    (("equivalence_margin", layer), f"{d!r} is not a margin; expected a share between 0 and 1 (0.10 = 10 pp)")
                )  # fmt: skip
        return problems

    roles = load_yaml_as(p, Roles, check=check)
    _CACHE[(p, sp)] = (stamp, roles)
    return roles


def _conversation_problems(roles: Roles) -> list[tuple[tuple[Any, ...], str]]:
    """``conversation_findings``: each layer one of the conversational scenarios', each
    diagnosis one of theirs too, each guard a session mitigation (not the baseline)."""
    if not roles.conversation_findings:
        return []
    from layerlab.faults.scenario import conversation_scenarios
    from layerlab.mitigations import load_session_mitigations

    src = paths.CONVERSATION_SCENARIO_SPEC
    layers = sorted({p for s in conversation_scenarios().values() for p in s.spec.layer.split("+")
                     if p != "none"})  # fmt: skip
    spec = load_session_mitigations()
    guards = [n for n in spec.arms if n != spec.baseline]
    problems: list[tuple[tuple[Any, ...], str]] = []
    for layer, f in roles.conversation_findings.items():
        loc = ("conversation_findings", layer)
        if layer not in layers:
            problems.append((loc, f"unknown layer {layer!r}; expected one of {layers} (from {src})"))
        problems += [((*loc, "diagnosed", i), f"unknown layer {d!r}; expected one of {layers} "
                      f"(from {src})") for i, d in enumerate(f.diagnosed) if d not in layers]  # fmt: skip
        if f.guard not in guards:
            problems.append(((*loc, "guard"), f"unknown session mitigation {f.guard!r}; expected "
                             f"one of {guards} (from {spec.source})"))  # fmt: skip
    return problems


__all__ = ["ExplorerCase", "LayerFinding", "Roles", "SpecError", "load_roles"]
