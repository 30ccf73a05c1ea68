"""training/tts.py and training/enroll*.py: a phrase spoken by the TTS engines, the phrases they
cannot say, the examples' frame labels, and a tiny `rotkws enroll` whose ONNX file the runtime
loads and runs."""
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from rotkws.cli import COMMANDS
from app.spotter import NOT_KEYWORDS, OTHER, KeywordModel, KeywordSpotter
from conftest import REPO, data_root, require
from test_web import node, reference, run_node   # noqa: F401  (node: the fixture)
from rotkws import enroll_cli as command
from export import wake_threshold
from export.onnx import read_metadata
from model.logmel import PIXEL_SLOPE
from app import wake_rule
from training import enroll, tts
from training import enroll_examples as examples
from training import enroll_fit as fit
from training.kokoro import CACHE_ENV
from training.tts import PhraseError
from test_kokoro import require_kokoro


def require_espeak() -> None:
    if shutil.which("espeak-ng") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("espeak-ng is missing under CI (.ci/run installs it)")
        pytest.skip("espeak-ng not installed: apt-get install espeak-ng flite festival festvox-kallpc16k")


# -- the phrase -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, says", [
    ("", "empty"), ("   \t ", "empty"), ("?!...", "no letter or digit"), ("¿¡ — …", "no letter or digit"),
    ("a" * 200, "200 characters"), ("hey " * 50, "characters"),
])
def test_a_phrase_that_cannot_be_said_is_refused_with_the_reason(text, says):
    with pytest.raises(PhraseError, match=says):
        tts.check_text(text)


def test_a_phrase_whose_synthesis_is_silence_is_refused():
    with pytest.raises(PhraseError, match="say nothing"):
        tts.check_phrase("hello", say=lambda phrase: np.zeros(16_000, np.float32))
    with pytest.raises(PhraseError, match="say nothing"):
        tts.check_phrase("hello", say=lambda phrase: np.zeros(0, np.float32))


def test_a_phrase_too_long_to_say_is_refused():
    long = np.full(3 * tts.SAMPLE_RATE, 0.5, np.float32)
    with pytest.raises(PhraseError, match="takes 3.0 s"):
        tts.check_phrase("hello", say=lambda phrase: long)


def test_the_phrase_label_is_the_text_with_whitespace_collapsed():
    assert tts.check_text("  hey \n  jarvis ") == "hey jarvis"


@pytest.mark.parametrize("argv, says", [([""], "empty"), (["?!"], "no letter"), (["x" * 200], "200 characters")])
def test_enroll_command_exits_non_zero_with_one_line(argv, says, tmp_path, capsys):
    out = tmp_path / "m.onnx"
    assert command.main(argv + ["-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rotkws enroll: ") and says in err and err.count("\n") == 1
    assert not out.exists()


def test_enroll_command_refuses_a_phrase_spoken_as_silence(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tts, "probe", lambda phrase: np.zeros(16_000, np.float32))
    assert command.main(["hello", "-o", str(tmp_path / "m.onnx")]) == 1
    assert "say nothing for 'hello'" in capsys.readouterr().err


# -- pieces ---------------------------------------------------------------------------------------
def test_phrase_parts_are_its_syllable_pieces_never_the_phrase():
    assert tts.phrase_parts("snowboy") == ["snow", "boy"]
    assert set(tts.phrase_parts("computer")) == {"com", "puter", "compu", "ter"}
    assert {"hey", "jarvis"} <= set(tts.phrase_parts("hey jarvis"))
    assert tts.phrase_parts("go") == []


def test_other_never_fires_and_is_named_once():
    assert OTHER == "_other_" and OTHER in NOT_KEYWORDS
    js = (REPO / "app" / "web" / "rotkws.js").read_text()
    assert "'_other_'" in js.split("NOT_KEYWORDS = ", 1)[1].split(";", 1)[0]


def test_enroll_is_a_command():
    assert COMMANDS["enroll"][0] == "rotkws.enroll_cli"


def test_targets_mark_the_end_of_the_phrase_and_nothing_else():
    y = examples.targets(300, at=100, end=60)                 # the phrase ends at frame 160
    assert (y[:100] == examples.OTHER_CLASS).all()
    assert (y[100:155] == examples.IGNORE).all()
    assert (y[155:210] == examples.PHRASE_CLASS).all()
    assert (y[210:] == examples.IGNORE).all()
    assert (examples.targets(300, at=40, end=None) == examples.OTHER_CLASS).all()


def test_an_example_places_the_phrase_end_between_1_and_2_3_seconds():
    rng = np.random.default_rng(0)
    item = np.full((80, 40), 120.0, np.float32)
    noise = np.full((1000, 40), 30.0, np.float32)
    for _ in range(20):
        x, y = examples.example(item, 70, None, 300, noise, rng)
        first = int(np.flatnonzero(y == examples.PHRASE_CLASS)[0]) + 5
        assert 100 <= first <= 230 and x.shape == (300, 40) and x.max() <= 255


def test_a_warm_up_before_the_example_is_not_scored_and_the_phrase_follows_it():
    rng = np.random.default_rng(0)
    item, before = np.full((80, 40), 120.0, np.float32), np.full((150, 40), 90.0, np.float32)
    noise = np.full((1000, 40), 30.0, np.float32)
    for _ in range(20):
        x, y = examples.example(item, 70, None, 300, noise, rng, warm=200, before=before)
        first = int(np.flatnonzero(y == examples.PHRASE_CLASS)[0]) + 5
        assert x.shape == (500, 40) and (y[:200] == examples.IGNORE).all()
        assert 300 <= first <= 430 and x[:150].min() > x[150:200].max()   # the speech, then a pause


def test_every_example_is_made_quieter_by_a_gain_within_the_level_range():
    x = np.full((200, 30, 40), 200.0, np.float32)
    x[:, :10] = 0.0                                                          # silence below the floor
    out = examples.quieter(x.copy(), np.random.default_rng(0), batch=64)
    db = (out[:, 10:] - 200.0) / (PIXEL_SLOPE * np.log(10) / 10)     # pixels per decibel of power
    assert (out[:, :10] == 0).all() and np.allclose(db, db[:, :1, :1], atol=1e-3)   # one gain per example
    lo, hi = examples.LEVEL_DB
    assert lo - 1e-3 <= db.min() and db.max() <= hi + 1e-3
    assert db[:, 0, 0].max() - db[:, 0, 0].min() > 0.8 * (hi - lo)          # spread over the range


def test_the_peak_term_is_the_cross_entropy_where_each_example_comes_closest_to_firing():
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    logits = torch.randn(3, 40, 2, requires_grad=True)
    y = torch.full((3, 40), examples.OTHER_CLASS)
    y[0, 20:30] = examples.PHRASE_CLASS                      # a positive: its frames before the phrase count
    y[0, 30:] = examples.IGNORE
    y[2, :] = examples.IGNORE                                 # nothing scored: no peak
    base = fit.loss_fn(logits, y, 3.0)
    margin = logits[..., examples.PHRASE_CLASS] - logits[..., examples.OTHER_CLASS]
    peaks = [F.softplus(margin[0, :20].max()), F.softplus(margin[1].max())]
    torch.testing.assert_close(fit.loss_fn(logits, y, 3.0, 2.0), base + 2.0 * sum(peaks) / 2)
    (fit.loss_fn(logits, y, 3.0, 2.0) - base).backward()
    touched = (logits.grad.abs().sum(-1) > 0).sum(1)
    assert touched.tolist() == [1, 1, 0]                    # the peak term moves one frame an example


@pytest.mark.parametrize("trained", [1, 2, 4])
def test_the_frozen_blocks_then_the_trained_ones_are_the_network(trained):
    import torch
    from model.network import RotRNNClassifier, RotRNNConfig
    torch.manual_seed(0)
    net = RotRNNClassifier(RotRNNConfig(labels=("hey", OTHER), d_model=32, state=32, heads=4, layers=4,
                                        frontend="logmel", chunk=16)).eval()
    pixels = torch.rand(3, 150, 40) * 255
    with torch.no_grad():
        split = fit.frame_logits(net, fit.lower(net, pixels, trained), trained)
        whole, _ = net.frame_logits(pixels)
    torch.testing.assert_close(split, whole, atol=1e-5, rtol=1e-5)


def test_the_room_keeps_length_and_peak():
    rng = np.random.default_rng(0)
    dry = np.sin(np.arange(8000) / 5).astype(np.float32) * 0.5
    wet = examples.room(dry, rng)
    assert len(wet) >= len(dry) and np.isclose(np.abs(wet).max(), 0.5, atol=1e-6)
    assert not np.allclose(wet[: len(dry)], dry)


# -- the engines ----------------------------------------------------------------------------------
def test_synthesis_speaks_the_phrase_in_several_voices():
    require_espeak()
    s = tts.synthesize("computer", 8, np.random.default_rng(0))
    assert len(s.clips) == 8 and sum(s.engines.values()) == 8
    for clip in s.clips:
        assert clip.dtype == np.float32 and 0.2 < len(clip) / tts.SAMPLE_RATE < 2.5
        assert np.sqrt(np.mean(clip ** 2)) > 0.02 and np.abs(clip).max() <= 0.9 + 1e-6
    assert len({len(c) for c in s.clips}) > 4               # not one voice eight times
    assert tts.check_phrase("computer") == "computer"


# -- end to end -----------------------------------------------------------------------------------
TINY_PHRASE = "hey computer"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> KeywordModel:
    """`rotkws enroll "hey computer"` with a few dozen clips (Kokoro's among them) and three
    training steps."""
    require_espeak()
    require_kokoro()
    data = require(data_root())
    require(fit.DEFAULT_CHECKPOINT)
    out = tmp_path_factory.mktemp("enroll") / "hey computer.onnx"
    argv = [TINY_PHRASE, "-o", str(out), "--data", str(data), "--positives", "24", "--tts-negatives", "16",
            "--images", "0", "--wav-negatives", "8", "--noise-negatives", "4", "--speech-negatives", "12",
            "--tts-sentences", "3", "--kokoro-positives", "6", "--kokoro-negatives", "4",
            "--kokoro-sentences", "1", "--max-steps", "3", "--validation-hours", "0.05", "--no-verifier"]
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("kokoro_cache"))
    try:
        assert command.main(argv) == 0
    finally:
        os.environ.pop(CACHE_ENV, None)
    return KeywordModel(out)


@pytest.mark.slow
def test_a_tiny_enroll_writes_a_model_the_runtime_runs(tiny_model):
    model = tiny_model
    assert model.labels == (TINY_PHRASE, OTHER) and model.keywords == (TINY_PHRASE,)
    assert model.streaming and wake_rule.MIN_THRESHOLD <= model.meta["detection"]["threshold"] <= wake_rule.MAX_THRESHOLD
    stored = json.loads(read_metadata(model.path)["enroll"])
    sources = json.loads(read_metadata(model.path)["training_data"])
    assert sources["positives"]["kokoro"] == 6 and sum(sources["positives"].values()) >= 6 + 12   # every engine
    assert sources["backbone"] == fit.DEFAULT_CHECKPOINT.name              # --no-verifier: the kws12 network
    assert stored["threshold"] == model.meta["detection"]["threshold"]      # chosen on the stream
    assert model.meta["detection"] == {"threshold": stored["threshold"]} | wake_rule.WAKE_RULE   # and the rule
    assert 0.05 <= stored["validation_stream_hours"] < 0.06
    assert stored["validation_stream_false_accepts"] == 0 or stored["threshold"] == wake_rule.MAX_THRESHOLD
    scores = model.clip_scores(np.zeros(16_000, np.float32))
    assert scores.shape == (2,) and np.isclose(scores.sum(), 1, atol=1e-5)
    said = tts.synthesize(TINY_PHRASE, 1, np.random.default_rng(1)).clips[0]
    result = KeywordSpotter(model).process(np.pad(said, (8000, 8000)), 16_000)
    assert result.scores.shape[1] == 2 and np.isfinite(result.scores).all()
    assert all(d.keyword == TINY_PHRASE for d in result.detections)


@pytest.mark.slow
def test_calibrate_chooses_an_enrolled_threshold_again_as_enroll_chose_it(tiny_model, tmp_path, capsys):
    from export import calibrate
    stored = json.loads(read_metadata(tiny_model.path)["enroll"])
    data = str(require(data_root()))
    same, loose = tmp_path / "same.onnx", tmp_path / "loose.onnx"
    assert calibrate.main([str(tiny_model.path), "-o", str(same), "--data", data]) == 0
    again = KeywordModel(same)                       # enroll's budget, enroll's stream: the same threshold
    assert again.meta["detection"] == tiny_model.meta["detection"]
    record = json.loads(read_metadata(same)["enroll"])
    assert record["retuned_from"] == stored["threshold"] and record["fa_per_hour"] == wake_rule.VALIDATION_FA_PER_HOUR
    assert record["validation_stream_hours"] == stored["validation_stream_hours"]
    assert not set(wake_rule.HELD_OUT_RATES) & set(record)          # measured at the old threshold: dropped
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["threshold"] == record["threshold"] and out["validation"]["fa_per_hour_allowed"] == 0.5
    assert calibrate.main([str(tiny_model.path), "-o", str(loose), "--data", data, "--fa-per-hour", "1e6"]) == 0
    assert KeywordModel(loose).meta["detection"] == tiny_model.meta["detection"] | {"threshold": wake_rule.MIN_THRESHOLD}
    with pytest.raises(ValueError, match="not a file `rotkws enroll` wrote"):
        wake_threshold.retune(REPO / "app" / "models" / "kws12.onnx", tmp_path / "x.onnx", Path(data))


@pytest.mark.slow
def test_the_javascript_runtime_runs_an_enrolled_model_as_python_does(tiny_model, node, tmp_path):
    """app/web/rotkws.js in onnxruntime-node: the same keywords (not `_other_`), hops and scores."""
    ref = reference(tiny_model, {}, tmp_path)
    (tmp_path / "reference.json").write_text(json.dumps(ref))
    run_node(node, "tests/web/spotter.test.mjs", env={"ROTKWS_WEB_REFERENCE": str(tmp_path / "reference.json")})
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["hops"] == sum(len(c["times"]) for c in ref["cases"] if "wav" not in c)
    assert result["max_abs_diff"] <= ref["tolerance"]

def test_the_threshold_is_the_lowest_that_keeps_the_validation_stream_to_its_budget():
    counts = {0.5: 9, 0.6: 2, 0.7: 0, 0.8: 1, 0.9: 0, 0.95: 0}
    assert wake_threshold.stream_threshold(counts, hours=2.0, fa_per_hour=0.1) == 0.9    # 0.2 allowed: none
    assert wake_threshold.stream_threshold(counts, hours=20.0, fa_per_hour=0.1) == 0.6   # 2 allowed
    assert wake_threshold.stream_threshold(counts, hours=2.0, fa_per_hour=1.0) == 0.6    # 2 allowed
    assert wake_threshold.stream_threshold(counts, hours=1.0, fa_per_hour=1.0) == 0.7    # 1 allowed
    assert wake_threshold.stream_threshold(counts, hours=2 / wake_rule.VALIDATION_FA_PER_HOUR) == 0.6   # the default
    assert wake_threshold.stream_threshold({0.5: 3, 0.99: 1}, hours=0.5) == wake_rule.MAX_THRESHOLD   # none keeps it
    assert wake_threshold.stream_threshold({0.3: 0, 0.4: 0}, hours=1.0) == wake_rule.MIN_THRESHOLD


def test_the_validation_stream_is_one_audio_for_every_phrase_its_utterances_marked():
    """A phrase whose words are in validation transcripts ("the", "to", …) hears the same audio as
    one whose are not ("alexa"): those utterances are marked, their time not counted, and a
    detection in one or up to HIT_WINDOW_S after it is no false accept; one later is."""
    from evaluation import speech, streams
    data = require(data_root())
    noise = speech.noise_bed(data)
    plain = wake_threshold.Validation.of(data, noise, 0.05, np.random.default_rng(3), "alexa")
    marked = wake_threshold.Validation.of(data, noise, 0.05, np.random.default_rng(3), "the to i a you")
    np.testing.assert_array_equal(marked.audio, plain.audio)
    assert len(plain.marked) == 0 and len(marked.marked) > 0
    spans = (marked.marked[:, 1] - marked.marked[:, 0]).sum()
    assert marked.hours == pytest.approx(plain.hours - spans / 3600) and marked.hours > 0
    lone = [(a, b) for a, b in marked.marked if not ((marked.marked[:, 0] <= b + 0.5) & (marked.marked[:, 1] >= b + 0.5)).any()]
    start, end = lone[0]                                                   # a span no other one follows within 0.5 s
    assert end - streams.HIT_WINDOW_S > start                              # end: HIT_WINDOW_S past the utterance
    inside, after, later = (start + end) / 2, end - 0.5, end + 0.5
    assert marked.count([inside, after]) == 0 and marked.count([inside, after, later]) == 1
    assert plain.count([inside, after]) == 1                               # one utterance, one false accept
    assert plain.count([inside, after, later]) == 2


def test_a_false_accept_is_counted_once_per_thing_said():
    """VCC2016's voices reading one sentence fire as one false accept; two sentences, or two
    detections in the pauses, as two; a detection in a marked span as none."""
    said = ["vcc2016/vcc2016_100039.ogg", "vcc2016/vcc2016_100039.ogg", "WE SPEAK OUT"]
    stream = wake_threshold.Validation(np.zeros(16000), 0.01, marked=np.array([[20.0, 24.0]]),
                                       spoken=np.array([[0.0, 4.0], [6.0, 10.0], [12.0, 16.0]]), said=said)
    assert stream.count([]) == 0
    assert stream.count([1.0, 7.0]) == 1 and stream.count([1.0, 3.5, 9.9]) == 1        # two voices, one sentence
    assert stream.count([1.0, 13.0]) == 2 and stream.count([1.0, 7.0, 13.0]) == 2
    assert stream.count([5.0, 5.5]) == 2 and stream.count([5.0, 11.0, 17.0]) == 3     # in the pauses: each
    assert stream.count([21.0, 23.9]) == 0 and stream.count([21.0, 13.0]) == 1         # marked: none
    with pytest.raises(ValueError, match="what each of the 3 spoken spans said"):
        wake_threshold.Validation(np.zeros(16000), 0.01, spoken=np.zeros((3, 2)), said=["a"])
    with pytest.raises(ValueError, match="what each of the 0 spoken spans said"):
        wake_threshold.Validation(np.zeros(16000), 0.01, said=["a"])
    assert wake_threshold.Validation(np.zeros(16000), 0.01).count([1.0, 1.1, 7.0]) == 3   # nothing said known: each


def test_what_is_said_is_the_transcript_or_vccs_sentence_across_its_voices():
    from evaluation import speech
    found = speech.utterances(require(data_root()), "validation")
    vcc = [u for u in found if u.speaker.startswith(speech.VCC)]
    keys = {speech.said(u) for u in vcc}
    assert len({u.speaker for u in vcc}) == 10 and len(keys) * 10 == len(vcc)      # ten voices, each sentence
    told = [u for u in found if u.text]
    assert told and all(speech.said(u) == u.text for u in told)
    rest = [u for u in found if not u.text and not u.speaker.startswith(speech.VCC)]
    assert rest and len({speech.said(u) for u in rest}) == len(rest)               # each its own file


def test_a_speech_window_is_utterances_run_together_with_short_pauses():
    rng = np.random.default_rng(0)
    utterances = [np.full((n, 40), v, np.float32) for n, v in ((120, 50.0), (80, 90.0), (200, 130.0))]
    for _ in range(20):
        w = examples.speech_window(utterances, 300, rng)
        assert w.shape == (300, 40) and set(np.unique(w)) <= {0.0, 50.0, 90.0, 130.0}
        filled = w[:, 0] > 0
        assert filled[0]                                                     # it starts inside an utterance
        silent = np.flatnonzero(~filled)
        runs = np.split(silent, np.flatnonzero(np.diff(silent) > 1) + 1) if len(silent) else []
        assert all(len(r) <= examples.SPEECH_PAUSE_S[1] * examples.FRAME_RATE + 1 for r in runs)   # pauses are short


def test_mined_draws_favour_the_speech_the_model_nearly_fires_on(monkeypatch):
    import torch
    hard = np.array([False, True, True, False])
    best = np.array([[0.0] * 5 + [1.0] * 5, [0.0] * 10])                  # hops of the two speech examples
    monkeypatch.setattr(fit, "hop_scores", lambda net, h, **kw: best)
    net = torch.nn.Linear(1, 1)
    g = torch.Generator().manual_seed(0)
    first = fit.draws(net, torch.zeros(4, 3, 2), hard, 0, g)
    assert sorted(first.tolist()) == [0, 1, 2, 3]                          # before mining: a permutation
    counts = np.bincount(torch.cat([fit.draws(net, torch.zeros(4, 3, 2), hard, 1, g) for _ in range(2000)]), minlength=4)
    weights = np.array([1, 1 + fit.HARD_GAIN, 1, 1])
    assert np.allclose(counts / counts.sum(), weights / weights.sum(), atol=0.02)


def test_training_given_threads_changes_its_speed_not_its_losses():
    """enroll's wake file takes the core of the heads beside it once they are done (`threads`):
    the losses are those of one thread to float rounding, and torch's count is restored after."""
    import torch
    from model.network import RotRNNClassifier, RotRNNConfig
    net = RotRNNClassifier(RotRNNConfig(labels=("alexa", OTHER), d_model=16, state=8, heads=2, layers=1,
                                        frontend="logmel"))
    h = torch.randn(24, 40, 16).half()
    y = torch.zeros(24, 40, dtype=torch.long)
    y[::3, 30:] = examples.PHRASE_CLASS
    cfg = enroll.EnrollConfig(epochs=2, batch_size=8)
    start = {k: v.clone() for k, v in net.state_dict().items()}
    asked = []
    torch.set_num_threads(1)
    torch.manual_seed(0)                                                   # dropout's draws
    one = fit.train(net, h, y, cfg)
    net.load_state_dict(start)
    torch.manual_seed(0)
    two = fit.train(net, h, y, cfg, threads=lambda: asked.append(1) or (1 if len(asked) < 3 else 2))
    assert len(asked) > 3 and torch.get_num_threads() == 1
    np.testing.assert_allclose(two, one, rtol=1e-4)


def test_the_codec_keeps_a_clip_its_length_and_its_sound():
    t = np.arange(16_000) / 16_000
    clip = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    coded = examples.opus(clip)
    assert coded.dtype == np.float32 and len(coded) == len(clip)
    assert np.corrcoef(coded[2000:-2000], clip[2000:-2000])[0, 1] > 0.9 and not np.array_equal(coded, clip)


def test_hop_scores_are_smoothed_as_the_runtime_smooths_an_enrolled_file():
    from app.detection import moving_average
    raw = np.random.default_rng(0).random((3, 30))
    ours = wake_rule.smooth(raw)
    for row, mine in zip(raw, ours):
        runtime = moving_average(row[:, None], wake_rule.WAKE_SMOOTHING_HOPS, np.zeros((0, 1)))[:, 0]
        assert np.allclose(mine, runtime, atol=1e-12)                      # from the first hop
    assert wake_rule.smooth(np.zeros((0, 30))).shape == (0, 30)


def test_the_best_run_is_the_threshold_at_which_the_stored_rule_starts_to_fire():
    """Training's best_runs (hard-negative mining, the held-out rates) and the runtime's detector
    under the rule enroll stores agree: it fires just below the best run and not just above it."""
    from app.detection import detect
    rng = np.random.default_rng(1)
    for _ in range(20):
        phrase = rng.random(40) ** 3
        scores = np.stack([phrase, 1 - phrase], 1)
        best = wake_rule.best_runs(wake_rule.smooth(phrase[None]))[0]
        fire = lambda th: detect(np.arange(40) * 0.1, scores, ("p", OTHER), ("p",), threshold=th,
                                 refractory_s=0.0, **wake_rule.WAKE_RULE)
        assert fire(best - 1e-9) and not fire(best + 1e-9)


# -- the bundled wake word ------------------------------------------------------------------------
WAKE_HEARD_FLOOR = 3          # of the five held-out recordings under tests/data/wakeword/alexa, each alone
                              # after silence: the bundled file hears 3 (2026-12-04), a regression floor


def test_the_bundled_wake_word_is_an_enrolled_file_that_hears_real_recordings_it_never_trained_on():
    import soundfile as sf
    from app.spotter import WAKE_MODEL, detection_settings
    model = KeywordModel(WAKE_MODEL)
    settings = detection_settings(model, {})
    assert model.labels == ("alexa", OTHER) and model.keywords == ("alexa",) and model.streaming
    assert {k: settings[k] for k in wake_rule.WAKE_RULE} == wake_rule.WAKE_RULE
    assert wake_rule.MIN_THRESHOLD <= settings["threshold"] < wake_rule.MAX_THRESHOLD   # chosen on the stream
    heard = []
    for path in sorted((REPO / "tests" / "data" / "wakeword" / "alexa").glob("*.flac")):
        audio, rate = sf.read(path, dtype="float32")
        said = np.concatenate([np.zeros(rate // 2, np.float32), audio, np.zeros(rate, np.float32)])
        heard.append([d.keyword for d in KeywordSpotter(model).process(said, rate).detections])
    assert len(heard) == 5 and all(h in ([], ["alexa"]) for h in heard)
    assert sum(h == ["alexa"] for h in heard) >= WAKE_HEARD_FLOOR
    assert not KeywordSpotter(model).process(np.zeros(5 * 16_000, np.float32), 16_000).detections


def test_recordings_that_are_not_audio_are_left_out_and_named_and_none_readable_is_an_error(tmp_path):
    real = sorted((REPO / "tests" / "data" / "wakeword" / "alexa").glob("*.flac"))[:2]
    broken = tmp_path / "126.flac"
    broken.write_bytes(real[0].read_bytes()[:200] + b"\x00" * 4000)     # a header, then no stream
    audio, skipped = enroll.read_recordings([*real, broken])
    assert len(audio) == 2 and all(a.ndim == 1 and len(a) > 8000 for a in audio)
    assert len(skipped) == 1 and "126.flac" in skipped[0]
    with pytest.raises(enroll.ClipError, match="none of the 1 recordings"):
        enroll.read_recordings([broken])
    assert enroll.read_recordings([]) == ([], [])


def test_each_recording_of_the_phrase_weighs_as_many_synthetic_clips(monkeypatch):
    """`--recordings`: a user's takes stand RECORDING_COPIES times each among the positives (each
    copy varied later as every clip is), the synthetic clips once; the metadata counts them once."""
    data = require(data_root())
    takes = sorted((REPO / "tests" / "data" / "wakeword" / "alexa").glob("*.flac"))[:2]
    said = lambda texts, n, rng, progress=None: tts.Synthesis([np.full(8000, 0.5, np.float32)] * n, {"espeak-ng": n})
    cfg = enroll.EnrollConfig(positives=5, tts_negatives=2, images=0, speech_negatives=0, tts_sentences=0,
                              kokoro_positives=0, kokoro_negatives=0, kokoro_sentences=0, wav_negatives=0,
                              recordings=tuple(map(str, takes)))
    items = enroll.gather("alexa", data, cfg, np.random.default_rng(0), said)
    recorded, _ = enroll.read_recordings(takes)
    assert len(items.positives) == 5 + enroll.RECORDING_COPIES * len(takes)
    for take in recorded:
        assert sum(len(p) == len(take) and np.array_equal(p, take) for p in items.positives) == enroll.RECORDING_COPIES
    assert items.sources["positives"] == {"espeak-ng": 5, "recordings": 2}


def test_a_streams_embeddings_are_made_once_a_machine(tmp_path, monkeypatch):
    """The validation stream's speech embeddings are embedded on first use and read back from the
    cache by the next run (a new Validation of the same audio), the ears not asked again."""
    from corpus.folders import CACHE_ENV as ROOT_ENV
    monkeypatch.setenv(ROOT_ENV, str(tmp_path))

    class Ears:
        calls = 0

        def embed(self, audio):
            Ears.calls += 1
            return np.outer(audio[:5], np.arange(3)).astype(np.float32)

    audio = np.linspace(-1, 1, 1000, dtype=np.float32)
    first = wake_threshold.Validation(audio, 0.01).embeddings(Ears())
    again = wake_threshold.Validation(audio.copy(), 0.01).embeddings(Ears())
    np.testing.assert_array_equal(again, first)
    assert Ears.calls == 1 and len(list((tmp_path / "embeddings").glob("stream-*.npy"))) == 1
    wake_threshold.Validation(audio[::-1].copy(), 0.01).embeddings(Ears())
    assert Ears.calls == 2                                                 # other audio: embedded
