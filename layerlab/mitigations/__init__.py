"""Mitigations: registered steps that each repair one reliability layer, and the arms built from them.

The public face (``from layerlab import mitigations``): the base (:mod:`.base`: :class:`Call`,
:class:`Act`, :class:`Mitigation`, the stages and the registry of kinds, :data:`KINDS` /
:func:`register`), the built-in kinds (:mod:`.builtin`) and the arms of the mitigations YAML
(:mod:`.arms`: :class:`Arm`, :class:`MitigationSet`, :func:`load_mitigations`,
:func:`load_run_mitigations` (a live run's arms: the committed spec's, then the transport
arms') and :data:`ARM_FILES`, where a plug-in registers its arms), and the session mitigations
of conversations (:mod:`.session`, :func:`load_session_mitigations`).
"""

from layerlab.mitigations import builtin  # noqa: F401  (registers the built-in kinds)
from layerlab.mitigations.arms import (
    ARM_FILES,
    Arm,
    MitigationSet,
    arm,
    contract_mode,
    contract_pair,
    load_mitigations,
    load_run_mitigations,
    targets,
)
from layerlab.mitigations.base import (
    KINDS,
    MAX_ATTEMPTS,
    PASS,
    STAGES,
    Act,
    Action,
    Call,
    Mitigation,
    MitigationParams,
    Stage,
    register,
)
from layerlab.mitigations.session import load_session_mitigations

__all__ = [
    "ARM_FILES",
    "KINDS",
    "MAX_ATTEMPTS",
    "PASS",
    "STAGES",
    "Act",
    "Action",
    "Arm",
    "Call",
    "Mitigation",
    "MitigationParams",
    "MitigationSet",
    "Stage",
    "arm",
    "contract_mode",
    "contract_pair",
    "load_mitigations",
    "load_run_mitigations",
    "load_session_mitigations",
    "register",
    "targets",
]
