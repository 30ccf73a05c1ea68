"""Where the data lives by default: the one place that knows about ../shared/data."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA_ENV = "ROTKWS_DATA"   # environment variable that overrides the default data root


def default_data_root() -> Path:
    """$ROTKWS_DATA, else the shared data folder beside the repository."""
    return Path(os.environ.get(DATA_ENV, REPO.parent / "shared" / "data")).resolve()
