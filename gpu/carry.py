"""Pack the shared data the converge runs read into a folder small enough to travel with the
checkout to a borrowed GPU machine (whose whole carry is 64 MiB), without changing a pixel or a
sample of it:

    python -m gpu.carry [--data DIR] [--out .devdata]

- the log-mel image zips: every JPEG re-coded by `jpegtran -optimize -copy none` (lossless: the
  same DCT coefficients, Huffman tables fitted to each image, metadata dropped; 14 % smaller on the
  training zip), stored under the same names; every image's decoded pixels checked equal;
- the background-noise WAVs as FLAC, every sample checked equal.

The Speech Commands WAV folders (the test folder: 100 MB) do not fit; the test folder's clips are in
the test-dev image zip as well (the same clips through the image pipeline), which is what
SOURCES names in their place. The converge runs that use this folder say so in their state
(`--set data.sources=…`), and their report is scored here, where the test folder's WAVs are.
Needs `jpegtran` (Debian: libjpeg-turbo-progs).
"""
import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import soundfile as sf

from corpus.clips import ClipError
from corpus.folders import NOISE_FOLDER, default_data_root
from training.features import _decode

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / ".devdata"                      # git-ignored (.git/info/exclude): carried, never committed
IMAGE_ZIPS = ("speech_commands_v0.02_logmel/speech_commands_v0.02_logmel_train.zip",
              "speech_commands_v0.02_logmel/speech_commands_v0.02_logmel_test_dev.zip")
SOURCES = "[" + ", ".join(f"{{path: {z}, kind: images}}" for z in IMAGE_ZIPS) + "]"   # --set data.sources=


def recode(data: bytes) -> bytes:
    """One JPEG re-coded losslessly by jpegtran; the same bytes back where that is not smaller or
    jpegtran refuses them (a broken image, which the loader skips as it skipped the original)."""
    done = subprocess.run(["jpegtran", "-optimize", "-copy", "none"], input=data, capture_output=True)
    return done.stdout if done.returncode == 0 and 0 < len(done.stdout) < len(data) else data


def pack_zip(source: Path, target: Path, workers: int) -> tuple[int, int]:
    """Re-code every JPEG of `source` into `target` (stored, same names and order); every image's
    pixels checked equal. (bytes before, bytes after)."""
    with zipfile.ZipFile(source) as z:
        names = z.namelist()
        blobs = [z.read(n) for n in names]
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:      # jpegtran runs outside the GIL
        coded = list(pool.map(recode, blobs, chunksize=256))
    for name, a, b in zip(names, blobs, coded):
        if a is not b and not np.array_equal(_decode(a), _decode(b)):
            raise ClipError(f"{source}:{name}: jpegtran changed the decoded pixels")
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as z:
        for name, b in zip(names, coded):
            z.writestr(name, b)
    return source.stat().st_size, target.stat().st_size


def pack_noise(source: Path, target: Path) -> tuple[int, int]:
    """Every WAV of the noise folder as FLAC of the same samples (16-bit)."""
    target.mkdir(parents=True, exist_ok=True)
    before = after = 0
    for wav in sorted(source.glob("*.wav")):
        x, rate = sf.read(wav, dtype="int16")
        flac = target / f"{wav.stem}.flac"
        sf.write(flac, x, rate, subtype="PCM_16")
        if not np.array_equal(sf.read(flac, dtype="int16")[0], x):
            raise ClipError(f"{wav}: its FLAC does not hold the same samples")
        before, after = before + wav.stat().st_size, after + flac.stat().st_size
    return before, after


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpu.carry", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(default_data_root()), help="the shared data folder")
    p.add_argument("--out", default=str(OUT), help=f"where to pack (default {OUT})")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    data, out = Path(args.data), Path(args.out)
    if shutil.which("jpegtran") is None:
        print("gpu.carry: jpegtran not found (Debian: apt-get install libjpeg-turbo-progs)",
              file=sys.stderr)
        return 2
    try:
        sizes = {z: pack_zip(data / z, out / z, args.workers) for z in IMAGE_ZIPS}
        sizes[NOISE_FOLDER] = pack_noise(data / NOISE_FOLDER, out / NOISE_FOLDER)
    except (ClipError, OSError, zipfile.BadZipFile) as e:
        print(f"gpu.carry: {e}", file=sys.stderr)
        return 2
    for name, (a, b) in sizes.items():
        print(f"{name}: {a / 2**20:.1f} MiB → {b / 2**20:.1f} MiB")
    total = sum(b for _, b in sizes.values())
    print(f"{out}: {total / 2**20:.1f} MiB; train there with --data {out} --set data.sources='{SOURCES}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
