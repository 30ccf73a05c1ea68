"""The repository's root (the data root is corpus/folders.py's)."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
