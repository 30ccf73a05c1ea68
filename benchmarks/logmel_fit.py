"""How closely the fixed log-mel front-end (model/logmel.py) reproduces the image corpus: every
image of speech_commands_v0.02_logmel_test_dev.zip whose WAV is in speech_commands_v0.02_test_dev,
the formula's pixels against the image's. Also the per-clip least-squares slope and offset of
pixel = a·ln(power) + b (the README's constants are a = 9.7, b = 145.2).

    .venv/bin/python -m benchmarks.logmel_fit [--data DIR] [--no-write]
"""
import argparse
import io
import zipfile
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from benchmarks.report import write_section
from model.logmel import PIXEL_MAX, PIXEL_OFFSET, PIXEL_SLOPE, LogMelPixels
from training.paths import default_data_root

ZIP = "speech_commands_v0.02_logmel/speech_commands_v0.02_logmel_test_dev.zip"
WAVS = "speech_commands_v0.02_test_dev"


def pairs(data: Path):
    """(image pixels (98, 40), its clip's audio (16,000,)) for every image with a WAV."""
    from PIL import Image
    archive = zipfile.ZipFile(data / ZIP)
    for name in sorted(n for n in archive.namelist() if n.endswith(".jpg")):
        word, filename = name.split("/")
        wav = filename.replace(".jpg", ".wav")
        for path in (data / WAVS / word / wav, data / WAVS / "_unknown_" / f"{word}_{wav}"):
            if path.is_file():
                audio, _ = sf.read(path, dtype="float32")
                audio = np.pad(audio, (0, max(0, 16_000 - len(audio))))[:16_000]
                yield np.asarray(Image.open(io.BytesIO(archive.read(name))), dtype=np.float64), audio
                break


def measure(data: Path) -> dict:
    extractor, corr, resid, slopes, offsets = LogMelPixels(), [], [], [], []
    for image, audio in pairs(data):
        ours = extractor(torch.from_numpy(audio)[None])[0].double().numpy()
        corr.append(np.corrcoef(ours.ravel(), image.ravel())[0, 1])
        resid.append(np.median(np.abs(ours - image)))
        inside = (image > 0) & (image < PIXEL_MAX) & (ours > 0) & (ours < PIXEL_MAX)   # unclipped
        log_power = (ours[inside] - PIXEL_OFFSET) / PIXEL_SLOPE
        if inside.sum() > 100:
            a, b = np.polyfit(log_power, image[inside], 1)
            slopes.append(a)
            offsets.append(b)
    return {"corr": np.array(corr), "resid": np.array(resid), "slope": np.array(slopes), "offset": np.array(offsets)}


def report(m: dict) -> str:
    q = (5, 10, 25, 50, 75, 90)
    row = lambda name, v, fmt: f"| {name} | " + " | ".join(format(x, fmt) for x in np.percentile(v, q)) + " |"
    return (f"{len(m['corr'])} paired clips (every image of `{ZIP}` whose WAV is in `{WAVS}`); the formula's "
            f"pixels (unrounded) against the JPEG's.\n\n"
            f"| per clip | {' | '.join(f'{p}th' for p in q)} |\n| --- |{' ---: |' * len(q)}\n"
            + row("correlation", m["corr"], ".3f") + "\n"
            + row("median abs. difference (grey levels)", m["resid"], ".1f") + "\n"
            + row(f"least-squares slope a (ours {PIXEL_SLOPE})", m["slope"], ".2f") + "\n"
            + row(f"least-squares offset b (ours {PIXEL_OFFSET})", m["offset"], ".1f") + "\n\n"
            f"Clips with correlation ≥ 0.98: {np.mean(m['corr'] >= 0.98):.1%}; below 0.9 (time-shifted or "
            f"unmatched images, as the data README says): {np.mean(m['corr'] < 0.9):.1%}.")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=default_data_root())
    p.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = p.parse_args(argv)
    body = report(measure(args.data))
    print(body)
    if not args.no_write:
        write_section("logmel_fit", "The log-mel front-end against the image corpus", body)


if __name__ == "__main__":
    main()
