"""Fixtures shared by the harness tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def targets():
    """``tests/fixtures/conversation_targets`` imported with the fixtures folder on the path
    (as a team's module would be), the path restored after the module's tests."""
    sys.path.insert(0, str(FIXTURES))
    import conversation_targets

    yield conversation_targets
    sys.path.remove(str(FIXTURES))
