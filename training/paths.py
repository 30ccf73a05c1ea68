"""The repository's root, and the data root (named in corpus/folders.py) for training's importers."""
from pathlib import Path

from corpus.folders import DATA_ENV, default_data_root   # noqa: F401  (named there, used from here)

REPO = Path(__file__).resolve().parents[1]
