"""Fixtures of the runtime tests: ``fail_at`` builds a handler registry that injects a fault."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # plans.py, faults.py (also for spawned workers)


@pytest.fixture
def fail_at():
    """``fail_at(rank, action, how)`` → handlers for ``launch(..., handlers=...)`` (see faults.py)."""
    from faults import failing_handlers
    return failing_handlers
