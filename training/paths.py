"""Where the data lives by default: the one place that knows about ../shared/data."""
from pathlib import Path

from corpus.folders import DATA_ENV, default_data_root   # noqa: F401  (named there, used from here)

REPO = Path(__file__).resolve().parents[1]
