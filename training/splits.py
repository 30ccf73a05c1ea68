"""Speaker-disjoint splits for folders that come without split lists.

Speech Commands' own rule (its README's `which_set`): a stable hash of the speaker id decides
the split, so a speaker's clips always land together, whatever else is in the folder. The shared
folders are themselves one official split (all of the v0.02 test-set speakers hash to "testing"
under the official rule), so the hash here is salted to spread their speakers afresh.
"""
import hashlib

from app.clips import speaker_of  # noqa: F401  (the file-name rule lives with the folder layout)

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
