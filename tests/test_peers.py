"""benchmarks/engines.py: each engine of the wake-word bench on a real recording between real
speech (openWakeWord and microWakeWord as their own loops decide, PocketSphinx from text, a
rotkws model through the runtime's rule), the shared refractory rule, and a peer that cannot run
reported with the reason."""

import numpy as np
import pytest

from app.detection import detect
from benchmarks import engines
from conftest import REPO, data_root, require
from evaluation import speech
from app.sweep import score_track

RATE = engines.SAMPLE_RATE


@pytest.fixture(scope="module")
def stream():
    """1 s silence, a sentence (LJ Speech), 1 s, an `alexa` recording no training uses, 1 s:
    (audio, (start, end) of the sentence, (start, end) of the recording) in seconds."""
    data = require(data_root() / speech.SPEECH_FOLDER).parent
    sentence = speech.read(sorted((data / speech.SPEECH_FOLDER / speech.LJSPEECH).glob("*.ogg"))[0])
    alexa = speech.read(speech.wake_recordings(data, "alexa")[0])
    gap = np.zeros(RATE, np.float32)
    audio = np.concatenate([gap, sentence, gap, alexa, gap])
    s0 = 1.0
    a0 = s0 + len(sentence) / RATE + 1.0
    return audio, (s0, s0 + len(sentence) / RATE), (a0, a0 + len(alexa) / RATE)


def at_default(run: engines.Run) -> np.ndarray:
    return run.detections[float(run.default)]


def test_debounce_fires_above_the_threshold_once_a_refractory_time():
    t = np.arange(10) * 0.4
    s = np.array([0.1, 0.6, 0.7, 0.2, 0.8, 0.1, 0.1, 0.9, 0.5, 0.5])
    assert engines.debounce(t, s, 0.5).tolist() == pytest.approx([0.4, 1.6, 2.8])
    assert engines.debounce(t, s, 0.5, refractory_s=0.0).tolist() == pytest.approx([0.4, 0.8, 1.6, 2.8])
    assert len(engines.debounce(t, s, 0.9)) == 0                              # strictly above


@pytest.mark.parametrize("name", ["openwakeword", "microwakeword"])
def test_a_builtin_alexa_model_hears_the_recording_and_not_the_sentence(name, stream):
    audio, sentence, alexa = stream
    (engine,), missing = engines.engines_for(["alexa"], [], [name])
    assert not missing
    run = engine.run(audio)
    dets = at_default(run)
    assert len(dets) == 1 and alexa[0] <= dets[0] <= alexa[1] + 1.0
    assert run.cpu_s > 0 and run.audio_s == pytest.approx(len(audio) / RATE)
    assert np.all(np.diff(run.thresholds) > 0) and run.default in run.thresholds


def test_microwakeword_offline_rule_is_its_own(stream):
    from pymicro_wakeword import MicroWakeWord, MicroWakeWordFeatures, Model
    audio, _, _ = stream
    mww, features = MicroWakeWord.from_builtin(Model.ALEXA), MicroWakeWordFeatures()
    own = []
    for end, data in engines.chunks(audio):
        for f in features.process_streaming(data):
            if mww.process_streaming(f):
                own.append(end / RATE)
    engine = engines.MicroWakeWord("alexa")
    times, scores = engine.track(audio)
    assert own and np.allclose(own, times[scores > engine.default])
    assert np.allclose(engines.debounce(times, scores, engine.default, 0.0), own)


def test_pocketsphinx_spots_the_phrase_from_text_and_stricter_fires_less(stream):
    audio, _, alexa = stream
    engine = engines.PocketSphinx("alexa")
    run = engine.run(audio)
    dets = at_default(run)
    assert any(alexa[0] <= t <= alexa[1] + 1.0 for t in dets)
    counts = [len(run.detections[float(th)]) for th in run.thresholds]      # ascending: stricter
    assert counts == sorted(counts, reverse=True) and run.default == pytest.approx(np.log10(engines.KWS_DEFAULT))
    split = engines.merge([p.run(audio) for p in engine.split()])
    assert all(np.array_equal(split.detections[th], run.detections[th]) for th in run.detections)


def test_pocketsphinx_refuses_a_word_it_cannot_spell():
    with pytest.raises(ValueError, match="lacks \\['snowboy'\\]"):
        engines.PocketSphinx("snowboy")
    assert engines.PocketSphinx("snowboy", "snow boy").words == "snow boy"


def test_a_rotkws_model_is_run_by_the_runtimes_own_rule(stream):
    audio, _, _ = stream
    model = REPO / "app" / "models" / "kws12.onnx"
    with pytest.raises(ValueError, match="one keyword"):
        engines.Rotkws(model)                                               # a command model is no wake word
    engine = engines.Rotkws.__new__(engines.Rotkws)                        # … but its mechanics are the same:
    engine.path, engine.phrase, engine.engine = model, "yes", "rotkws"
    run = engine.run(audio)
    times, scores = score_track(engine.model, audio)
    want = detect(times, scores, engine.model.labels, engine.model.keywords, threshold=run.default)
    assert np.allclose(at_default(run), [d.time_s for d in want])


def test_a_peer_that_cannot_be_imported_is_reported_never_dropped(monkeypatch):
    monkeypatch.setitem(engines.PEER_MODULES, "microwakeword", "no_such_module_here")
    runnable, missing = engines.engines_for(["alexa"], [], ["microwakeword", "openwakeword"])
    assert [e.engine for e in runnable] == ["openWakeWord"]
    assert missing[0][0] == "microwakeword" and "no_such_module_here" in missing[0][1]
    with pytest.raises(ValueError, match="expected peers"):
        engines.engines_for(["alexa"], [], ["porcupine"])
