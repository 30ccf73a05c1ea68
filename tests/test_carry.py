"""gpu/carry.py: the data packed for a borrowed GPU holds the same pixels and samples in
fewer bytes (real JPEGs of the image corpus re-coded by jpegtran, real noise as FLAC)."""
import os
import shutil
import zipfile

import numpy as np
import pytest
import soundfile as sf

from gpu import carry
from conftest import require
from corpus.folders import NOISE_FOLDER
from training.features import _decode

IMAGES = 40                                     # of the training zip, spread over its words


@pytest.fixture
def jpegtran():
    if shutil.which("jpegtran") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("jpegtran is missing under CI (.ci/run installs libjpeg-turbo-progs)")
        pytest.skip("jpegtran not found (Debian: libjpeg-turbo-progs)")


def test_the_image_zip_packs_smaller_with_every_pixel_the_same(shared_data, jpegtran, tmp_path):
    source = require(shared_data / carry.IMAGE_ZIPS[0])
    with zipfile.ZipFile(source) as z:
        names = z.namelist()[::len(z.namelist()) // IMAGES][:IMAGES]
        small = tmp_path / "small.zip"
        with zipfile.ZipFile(small, "w", zipfile.ZIP_STORED) as out:
            for name in names:
                out.writestr(name, z.read(name))
    before, after = carry.pack_zip(small, tmp_path / "packed" / "small.zip", workers=2)
    assert after < 0.95 * before
    with zipfile.ZipFile(small) as a, zipfile.ZipFile(tmp_path / "packed" / "small.zip") as b:
        assert b.namelist() == names
        for name in names:
            pixels = _decode(a.read(name))
            assert pixels is not None and np.array_equal(_decode(b.read(name)), pixels)


def test_a_broken_image_is_kept_as_it_is_and_missing_data_is_a_clear_error(jpegtran, tmp_path, capsys):
    blob = b"\xff\xd8 not a whole JPEG"
    assert carry.recode(blob) == blob
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as z:
        z.writestr("yes/x_nohash_0.jpg", blob)
    carry.pack_zip(tmp_path / "a.zip", tmp_path / "b.zip", workers=1)
    with zipfile.ZipFile(tmp_path / "b.zip") as z:
        assert z.read("yes/x_nohash_0.jpg") == blob
    assert carry.main(["--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_the_noise_packs_as_flac_with_every_sample_the_same(shared_data, tmp_path):
    folder = require(shared_data / NOISE_FOLDER)
    wav = sorted(folder.glob("*.wav"))[0]
    (tmp_path / "in").mkdir()
    x, rate = sf.read(wav, dtype="int16", frames=5 * 16000)       # five seconds of it
    sf.write(tmp_path / "in" / "noise.wav", x, rate, subtype="PCM_16")
    before, after = carry.pack_noise(tmp_path / "in", tmp_path / "out")
    assert after < before
    y, rate_y = sf.read(tmp_path / "out" / "noise.flac", dtype="int16")
    assert rate_y == rate and np.array_equal(y, x)
