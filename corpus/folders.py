"""The data root and the folders in it (../shared/data/README.md says what each holds): the one
place that names them."""
import os
from pathlib import Path

DATA_ENV = "ROTKWS_DATA"   # environment variable that overrides the default data root
CACHE_ENV = "ROTKWS_CACHE"  # … and the folder of what is computed once per machine (default ~/.cache/rotkws)
KEYWORD_FOLDER = "speech_commands_v0.02_test_dev"   # Speech Commands WAVs by speaker (split by a salted hash)
SAMPLE_FOLDER = "speech_commands_v0.01_sample"      # Speech Commands v0.01 WAVs, official lists
IMAGE_FOLDER = "speech_commands_v0.02_logmel"       # the log-mel image corpus (zips of PNGs)
IMAGE_TRAIN_ZIP = f"{IMAGE_FOLDER}/speech_commands_v0.02_logmel_train.zip"
NOISE_FOLDER = "speech_commands_background_noise"   # long background-noise recordings
WAKEWORD_FOLDER = "wakeword_benchmark_dev"          # <phrase>/<n>.flac|wav: real recordings of wake phrases
SPEECH_FOLDER = "english_speech_dev"                # continuous read English speech, by corpus


def cache_root() -> Path:
    """$ROTKWS_CACHE, else ~/.cache/rotkws: Kokoro's model and clips, the speech embeddings. Read
    when asked, so a variable set later is honoured."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "rotkws")


def default_data_root() -> Path:
    """$ROTKWS_DATA, else the shared data folder beside the repository."""
    return Path(os.environ.get(DATA_ENV, Path(__file__).resolve().parents[2] / "shared" / "data")).resolve()
