"""Shared fixtures: where the real audio is, and how tests behave without it.

The data root comes from ROTKWS_DATA (default: ../shared/data beside the repository). Without
it, tests that need it skip with the reason; under CI (CI=true) they fail instead.
"""
import os
from pathlib import Path

import pytest

from corpus.folders import default_data_root

REPO = Path(__file__).resolve().parents[1]
CLIPS = REPO / "tests" / "data" / "clips"          # a few real clips shipped with the tests


def data_root() -> Path:
    return default_data_root()


def require(path: Path) -> Path:
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is missing under CI (set ROTKWS_DATA to the shared data)")
        pytest.skip(f"{path} not found: set ROTKWS_DATA to the shared data folder")
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared real-audio folder (../shared/data or $ROTKWS_DATA)."""
    return require(data_root())
