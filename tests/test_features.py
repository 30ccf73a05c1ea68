"""Examples in the feature domain (training/features.py) and their augmentation
(training/augment.py: augment_pixels): the image corpus read in place, WAVs through the same
front-end, speaker-disjoint splits, class shares, noise mixed as power."""
import io
import zipfile
from collections import Counter

import numpy as np
import pytest
import torch

from corpus.clips import SILENCE, UNKNOWN
from corpus.splits import speaker_split
from conftest import CLIPS, require
from model.logmel import CLIP_FRAMES, N_MELS, PIXEL_OFFSET, PIXEL_SLOPE, LogMelPixels
from training.augment import AugmentConfig, augment_pixels, gain_pixels, mix_pixels
from training.data import DataConfig, KWSDataModule
from training.features import FeatureDataset, audio_pixels, decode_zip, image_label, image_splits
from corpus.labels import KWS12_LABELS

TRAIN_ZIP = "speech_commands_v0.02_logmel/speech_commands_v0.02_logmel_train.zip"


def jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image
    out = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8), mode="L").save(out, format="JPEG", quality=95)
    return out.getvalue()


@pytest.fixture
def tiny_zip(tmp_path, monkeypatch):
    """A zip in the corpus's layout: 3 speakers × 3 words, noise slices, one broken member and
    one image of the wrong size."""
    monkeypatch.setenv("ROTKWS_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    path = tmp_path / "logmel.zip"
    with zipfile.ZipFile(path, "w") as z:
        for word in ("yes", "no", "marvin"):
            for speaker in ("0a7c2a8d", "1b4c9b89", "c1d39ce8"):
                z.writestr(f"{word}/{speaker}_nohash_0.jpg", jpeg(rng.integers(0, 255, (CLIP_FRAMES, N_MELS))))
        for n in range(4):
            z.writestr(f"_background_noise_/{n}.jpg", jpeg(rng.integers(0, 60, (CLIP_FRAMES, N_MELS))))
        z.writestr("yes/deadbeef_nohash_0.jpg", b"not a jpeg")
        z.writestr("no/deadbeef_nohash_1.jpg", jpeg(np.zeros((50, N_MELS))))
    return path


def test_image_zip_reads_in_place_with_labels_speakers_and_splits(tiny_zip):
    splits, corrupt = image_splits(tiny_zip, KWS12_LABELS)
    assert corrupt == 2
    every = [(l, s, split) for split, c in splits.items() for l, s in zip(c.labels, c.speakers)]
    assert Counter(l for l, _, _ in every) == {"yes": 3, "no": 3, UNKNOWN: 3, SILENCE: 4}
    for label, speaker, split in every:
        assert split == speaker_split(speaker)           # the WAV folders' salted speaker hash
    for c in splits.values():
        assert c.pixels.dtype == np.uint8 and c.pixels.shape[1:] == (CLIP_FRAMES, N_MELS)


def test_decoded_zip_is_cached_and_the_cache_gives_the_same(tiny_zip, tmp_path):
    first = decode_zip(tiny_zip)
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 1
    again = decode_zip(tiny_zip)
    assert np.array_equal(first[0], again[0]) and first[1] == again[1] and first[2] == again[2] == 2


def test_a_zip_without_images_and_a_missing_zip_are_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("ROTKWS_CACHE", str(tmp_path / "cache"))
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("readme.txt", "nothing")
    with pytest.raises(ValueError, match="no 98 × 40 log-mel images inside"):
        image_splits(empty, KWS12_LABELS)
    with pytest.raises(ValueError, match="does not exist"):
        image_splits(tmp_path / "missing.zip", KWS12_LABELS)
    (tmp_path / "bad.zip").write_bytes(b"PK nonsense")
    with pytest.raises(ValueError, match="not a readable zip"):
        image_splits(tmp_path / "bad.zip", KWS12_LABELS)


def test_image_labels_follow_the_wav_folders_rule():
    assert image_label("yes/0a_nohash_0.jpg", KWS12_LABELS) == "yes"
    assert image_label("sheila/0a_nohash_0.jpg", KWS12_LABELS) == UNKNOWN
    assert image_label("_background_noise_/51889.jpg", KWS12_LABELS) == SILENCE
    assert image_label("_background_noise_/51889.jpg", ("yes", "no")) is None


def test_the_real_corpus_splits_by_speaker(shared_data):
    splits, corrupt = image_splits(require(shared_data / TRAIN_ZIP), KWS12_LABELS)
    assert corrupt == 0
    assert sum(len(c) for c in splits.values()) == 47_435
    speakers = {s: set(c.speakers) for s, c in splits.items()}
    assert not speakers["training"] & speakers["validation"]
    assert not speakers["training"] & speakers["testing"]
    counts = Counter(splits["training"].labels)
    assert set(counts) == set(KWS12_LABELS) and counts[UNKNOWN] > counts["yes"]


def test_mix_pixels_adds_powers():
    x = torch.tensor([[[100.0, 0.0, 200.0]]])
    n = torch.tensor([[[100.0, 50.0, 0.0]]])
    mixed = mix_pixels(x, n, torch.tensor([1.0]))
    power = lambda p: np.exp((p - PIXEL_OFFSET) / PIXEL_SLOPE)
    # equal powers double: + a·ln 2; the silent pixel takes the noise's (and the floor's) power
    assert mixed[0, 0, 0].item() == pytest.approx(100 + PIXEL_SLOPE * np.log(2), abs=1e-4)
    assert mixed[0, 0, 1].item() == pytest.approx(PIXEL_SLOPE * np.log(power(0) + power(50)) + PIXEL_OFFSET, abs=1e-4)
    assert torch.equal(mix_pixels(x, n, torch.tensor([0.0])), x)


def test_gain_is_an_offset_that_leaves_silence_silent():
    x = torch.tensor([[[0.0, 100.0, 250.0]]])
    up = gain_pixels(x, torch.tensor([6.0]))
    assert up[0, 0, 0] == 0 and up[0, 0, 2] == 255
    assert up[0, 0, 1].item() == pytest.approx(100 + PIXEL_SLOPE * np.log(10 ** 0.6), abs=1e-4)


def test_pixel_augmentation_is_seeded_and_prerolls_the_whole_batch():
    x = torch.rand(8, CLIP_FRAMES, N_MELS) * 200
    noise = torch.rand(3_000, N_MELS) * 60
    cfg = AugmentConfig(preroll_prob=1.0)
    a = augment_pixels(x, noise, cfg, torch.Generator().manual_seed(4))
    b = augment_pixels(x, noise, cfg, torch.Generator().manual_seed(4))
    assert torch.equal(a, b)
    assert 20 <= a.shape[1] - CLIP_FRAMES <= 100 and a.shape[2] == N_MELS
    assert torch.isfinite(a).all() and a.min() >= 0 and a.max() <= 255
    off = augment_pixels(x, noise, AugmentConfig(enabled=False), torch.Generator().manual_seed(4))
    assert torch.equal(off, x)


def test_noise_at_high_snr_barely_moves_a_loud_clip():
    x = torch.full((4, CLIP_FRAMES, N_MELS), 150.0)
    noise = torch.full((1_000, N_MELS), 150.0)
    cfg = AugmentConfig(speed_min=1.0, speed_max=1.0, shift_seconds=0.0, gain_db=0.0,
                        noise_prob=1.0, snr_min_db=30.0, snr_max_db=30.0)
    out = augment_pixels(x, noise, cfg, torch.Generator().manual_seed(0))
    # +1/1000 of the power: a·ln(1.001) ≈ 0.0097 grey levels
    torch.testing.assert_close(out, x + PIXEL_SLOPE * np.log(1.001), rtol=0, atol=1e-3)


def test_class_weights_draw_the_configured_shares():
    labels = KWS12_LABELS
    targets = ["yes"] * 500 + ["no"] * 300 + [UNKNOWN] * 1000 + [SILENCE] * 20
    from training.features import FeatureClips
    clips = FeatureClips(np.zeros((len(targets), CLIP_FRAMES, N_MELS), np.uint8), targets, ["s"] * len(targets))
    ds = FeatureDataset(clips, labels)
    w = ds.class_weights(labels, {UNKNOWN: 0.1, SILENCE: 0.1})
    share = lambda l: float(w[ds.targets == labels.index(l)].sum() / w.sum())
    assert share(UNKNOWN) == pytest.approx(0.1) and share(SILENCE) == pytest.approx(0.1)
    assert share("yes") == pytest.approx(0.8 * 500 / 800) and share("no") == pytest.approx(0.8 * 300 / 800)


def test_wav_clips_become_the_front_ends_rounded_pixels():
    from corpus.clips import read_audio
    audio = [read_audio(p)[0] for p in sorted(CLIPS.glob("*/*.wav"))[:5]]
    pixels = audio_pixels(audio)
    expected = LogMelPixels()(torch.from_numpy(np.stack(audio))).round().to(torch.uint8).numpy()
    assert pixels.dtype == np.uint8 and np.array_equal(pixels, expected)


def test_wav_folders_become_pixels_in_the_features_datamodule(tmp_path, monkeypatch):
    monkeypatch.setenv("ROTKWS_CACHE", str(tmp_path / "cache"))
    dm = KWSDataModule(DataConfig(root=str(CLIPS.parent), sources=["clips"], noise=None), features=True)
    dm.setup()
    labels = Counter(KWS12_LABELS[int(t)] for d in dm.sets.values() for t in d.targets)
    assert labels == Counter(p.parent.name for p in CLIPS.glob("*/*.wav"))
    assert all(d.pixels.dtype == torch.uint8 and d.pixels.shape[1:] == (CLIP_FRAMES, N_MELS)
               for d in dm.sets.values())
    assert dm.noise is not None and dm.noise.shape[1] == N_MELS   # the _silence_ clips' frames


def test_image_sources_need_the_logmel_front_end(tiny_zip):
    dm = KWSDataModule(DataConfig(root=str(tiny_zip.parent), sources=[{"path": tiny_zip.name, "kind": "images"}],
                                  noise=None))
    with pytest.raises(ValueError, match="need a network with the logmel front-end"):
        dm.setup()


def test_continuous_speech_becomes_one_second_unknown_clips_without_the_labels_words(tmp_path, shared_data):
    """A speech source: the training speakers' utterances cut into 1-s `_unknown_` clips, an
    utterance whose transcript says a label's word left out, split by speaker."""
    import shutil
    from evaluation import speech
    real = speech.utterances(require(shared_data), "training")[:3]     # real recordings, real lengths
    folder = tmp_path / speech.SPEECH_FOLDER / speech.SPEECHOCEAN
    (folder / "train").mkdir(parents=True)
    texts = {"u1": "THE WEATHER IS FINE", "u2": "PLEASE GO HOME", "u3": "I LIKE TEA"}   # u2 says "go"
    for (utt, text), u, spk in zip(texts.items(), real, ("0001", "0002", "0003")):
        (folder / f"SPEAKER{spk}").mkdir()
        shutil.copy(u.path, folder / f"SPEAKER{spk}" / f"{utt}.ogg")
    (folder / "train" / "text").write_text("".join(f"{k} {v}\n" for k, v in texts.items()))
    (folder / "train" / "utt2spk").write_text("u1 0001\nu2 0002\nu3 0003\n")
    from training.features import speech_splits
    splits = speech_splits(tmp_path / speech.SPEECH_FOLDER, KWS12_LABELS)
    every = [c for v in splits.values() for c in zip(v.labels, v.speakers)]
    frames = {s: len(speech.read(u.path)) / 160 for s, u in zip(("0001", "0003"), (real[0], real[2]))}
    expected = sum(int(f // CLIP_FRAMES + (f % CLIP_FRAMES >= CLIP_FRAMES / 2)) for f in frames.values())
    assert abs(len(every) - expected) <= 2 and {l for l, _ in every} == {UNKNOWN}
    assert {s for _, s in every} == {"speechocean762_0001", "speechocean762_0003"}   # not u2's speaker
    for split, clips in splits.items():
        assert all(speaker_split(s) == split for s in clips.speakers)
        assert clips.pixels.shape[1:] == (CLIP_FRAMES, N_MELS) and clips.pixels.dtype == np.uint8


def test_the_speech_source_trains_only_on_enrolls_training_speakers_never_a_bench_one(shared_data):
    from evaluation import speech
    from training.features import speech_splits
    splits = speech_splits(require(shared_data / speech.SPEECH_FOLDER), KWS12_LABELS)
    names = lambda split: {speech.clip_speaker(u) for u in speech.utterances(shared_data, split)}
    trained = set(splits["training"].speakers)
    ocean = {s for s in names("training") if s.startswith(speech.SPEECHOCEAN)}
    assert len(trained) == 100 and trained == ocean            # enroll's speechocean762 training speakers
    checked = {s for c in (splits["validation"], splits["testing"]) for s in c.speakers}
    assert checked and checked <= names("validation")            # heard by enroll's threshold, never trained on
    assert not (trained | checked) & names("bench")
