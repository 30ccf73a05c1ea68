"""Speaker-disjoint splits for folders that come without split lists.

Speech Commands' own rule (its README's `which_set`): a stable hash of the speaker id decides
the split, so a speaker's clips always land together, whatever else is in the folder. The shared
folders are themselves one official split (all of the v0.02 test-set speakers hash to "testing"
under the official rule), so the hash here is salted to spread their speakers afresh.
"""
import hashlib
from pathlib import Path

from .clips import Clip, list_clips

SPLITS = ("training", "validation", "testing")
SPLIT_LISTS = {"validation": "validation_list.txt", "testing": "testing_list.txt"}

MAX_NUM_WAVS_PER_CLASS = 2**27 - 1   # the constant in Speech Commands' which_set
VALIDATION_PERCENT = 10.0            # of speakers, for model selection
TESTING_PERCENT = 10.0               # of speakers, held out for the reported figures
SALT = "rotkws/"                      # re-splits folders that are one official split already


def speaker_split(speaker: str, validation_percent: float = VALIDATION_PERCENT,
                  testing_percent: float = TESTING_PERCENT) -> str:
    """'training', 'validation' or 'testing' for a speaker id, deterministically."""
    h = int(hashlib.sha1((SALT + speaker).encode()).hexdigest(), 16)
    percent = (h % (MAX_NUM_WAVS_PER_CLASS + 1)) * (100.0 / MAX_NUM_WAVS_PER_CLASS)
    if percent < validation_percent:
        return "validation"
    if percent < validation_percent + testing_percent:
        return "testing"
    return "training"


def read_split_lists(folder: Path) -> dict[str, set[str]] | None:
    """{'validation': {...}, 'testing': {...}} from the folder's lists, or None without lists."""
    lists = {s: folder / f for s, f in SPLIT_LISTS.items()}
    if not any(p.is_file() for p in lists.values()):
        return None
    return {s: set(p.read_text().split()) if p.is_file() else set() for s, p in lists.items()}


def split_of(clip: Clip, lists: dict[str, set[str]] | None) -> str:
    """Official lists when the folder has them; else the salted speaker hash."""
    if lists is None:
        return speaker_split(clip.speaker)
    for split, names in lists.items():
        if clip.name in names:
            return split
    return "training"


def folder_splits(folder: Path, labels) -> dict[str, list[Clip]]:
    lists = read_split_lists(folder)
    out = {s: [] for s in SPLITS}
    for clip in list_clips(folder, labels):
        out[split_of(clip, lists)].append(clip)
    return out
