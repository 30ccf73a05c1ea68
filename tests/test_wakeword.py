"""evaluation/speech.py and evaluation/streams.py, the wake-word bench's stream: items where
the events say, the SNR as defined, no phrase in the background, speakers disjoint between
training, validation and bench; and benchmarks/wakeword.py's scoring of detections."""
import numpy as np
import pytest

from corpus.clips import ClipError
from corpus.splits import speaker_split
from conftest import data_root, require
from evaluation import speech, streams
from evaluation.streams import PHRASE, SPEECH, Event, Item

RATE = streams.SAMPLE_RATE


def tone(seconds: float, freq: float, level: float = 0.1) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (level * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def items() -> list[Item]:
    return [Item(tone(1.5, 440), PHRASE, "alexa"), Item(tone(2.0, 300), SPEECH, "a/1"),
            Item(tone(0.7, 500), PHRASE, "snowboy"), Item(tone(3.1, 200, 0.3), SPEECH, "b/2")]


def test_peak_energy_is_the_loudest_frame_of_squared_samples():
    x = np.zeros(4 * streams.ENERGY_WINDOW, np.float32)
    x[streams.ENERGY_WINDOW * 2 + 3] = 2.0
    x[5] = 1.0
    assert streams.peak_energy(x) == pytest.approx(4.0)
    assert streams.peak_energy(np.full(10, 0.5)) == pytest.approx(2.5)   # shorter than a frame


def test_each_item_is_where_its_event_says_and_the_pauses_are_the_protocols():
    pool = items()
    stream, events = streams.build(pool, np.zeros(RATE * 20, np.float32), 60, np.random.default_rng(0))
    assert len(stream) >= 60 * RATE and len(events) >= 12
    by_label = {it.label: it for it in pool}
    end = 0.0
    for e in events:
        pause = e.start_s - end
        assert streams.PAUSE_S[0] - 1e-9 <= pause <= streams.PAUSE_S[1] + 1e-9
        a, b = round(e.start_s * RATE), round(e.end_s * RATE)
        assert np.array_equal(stream[a:b], by_label[e.label].audio)        # no noise: the item itself
        assert not stream[round(end * RATE):a].any()                        # silence before it
        end = e.end_s
    assert len(stream) == round(events[-1].end_s * RATE)
    counts = [sum(e.label == it.label for e in events) for it in pool]
    assert max(counts) - min(counts) <= 1                                  # every item once per pass


def test_every_item_is_heard_at_the_snr_by_peak_frame_energy():
    rng = np.random.default_rng(1)
    noise = rng.standard_normal(RATE * 30).astype(np.float32) * 0.05
    pool = items()
    stream, events = streams.build(pool, noise, 40, np.random.default_rng(2))
    by_label = {it.label: it.audio for it in pool}
    for e in events:
        a, b = round(e.start_s * RATE), round(e.end_s * RATE)
        under = stream[a:b] - by_label[e.label]
        snr = 10 * np.log10(streams.peak_energy(by_label[e.label]) / streams.peak_energy(under))
        assert snr == pytest.approx(streams.SNR_DB, abs=1e-3)
        assert np.abs(stream[a - RATE // 2:a]).max() > 0                   # the pause has noise too


def test_a_loud_piece_is_scaled_down_whole_keeping_its_snr():
    loud = [Item(tone(1.0, 440, 0.99), SPEECH, "x")]
    noise = np.random.default_rng(3).standard_normal(RATE * 10).astype(np.float32) * 0.5
    stream, (e, *_) = streams.build(loud, noise, 1, np.random.default_rng(4))
    assert np.abs(stream).max() <= 1.0
    a, b = round(e.start_s * RATE), round(e.end_s * RATE)
    scale = np.dot(stream[a:b], loud[0].audio) / np.dot(loud[0].audio, loud[0].audio)   # the item's share
    under = stream[a:b] - scale * loud[0].audio
    snr = 10 * np.log10(streams.peak_energy(scale * loud[0].audio) / streams.peak_energy(under))
    assert scale < 1 and snr == pytest.approx(streams.SNR_DB, abs=0.05)


def test_too_short_a_noise_bed_or_no_items_is_refused():
    with pytest.raises(ValueError, match="noise bed longer"):
        streams.build(items(), np.zeros(100, np.float32), 10, np.random.default_rng(0))
    with pytest.raises(ValueError, match="got none"):
        streams.build([], np.zeros(RATE * 10, np.float32), 10, np.random.default_rng(0))


def test_detections_are_hits_or_false_accepts_where_they_fell():
    events = [Event("s", 1.0, 4.0, SPEECH), Event("alexa", 6.0, 8.0, PHRASE),
              Event("snowboy", 11.0, 13.0, PHRASE), Event("alexa", 16.0, 18.0, PHRASE)]
    times = [2.0,        # in speech
             7.5, 8.2,   # a hit, then its phrase again
             12.0,       # another phrase
             14.5,       # the pause: noise only
             4.9]        # within HIT_WINDOW_S after speech: still speech
    n, missed, places = streams.match(times, events, "alexa")
    assert (n, missed) == (2, 1)
    assert places == {"speech": 2, "other phrase": 1, "its phrase again": 1, "noise": 1}
    n, missed, places = streams.match([18.9], events, "alexa")           # just inside the window
    assert (n, missed, sum(places.values())) == (2, 1, 0)
    n, missed, places = streams.match([12.5], events, "snowboy")
    assert (n, missed, sum(places.values())) == (1, 0, 0)


@pytest.mark.parametrize("text, phrase, holds", [
    ("WE CALL IT BEAR", "bear", True), ("THE BEARS", "bear", False), ("HEY YOU", "hey jarvis", True),
    ("I KNOW THAT MY DEAR BOY", "snowboy", False), (None, "alexa", False), ("IT'S ALEXA", "Alexa", True),
])
def test_a_transcript_holds_the_phrase_when_it_says_one_of_its_words(text, phrase, holds):
    assert speech.holds_phrase(text, phrase) is holds


@pytest.mark.parametrize("split", ["training", "validation"])
def test_a_speech_folder_without_speechoceans_transcripts_is_a_clear_error(tmp_path, split):
    (tmp_path / speech.SPEECH_FOLDER / speech.SPEECHOCEAN / "train").mkdir(parents=True)
    (tmp_path / speech.SPEECH_FOLDER / speech.SPEECHOCEAN / "train" / "text").write_text("u1 HELLO\n")
    with pytest.raises(ClipError, match="no speechocean762 'train' transcripts .* utt2spk"):
        speech.utterances(tmp_path, split)


# -- on the real corpus ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def data():
    return require(data_root() / speech.SPEECH_FOLDER).parent


def test_the_speech_splits_have_no_speaker_in_common(data):
    found = {split: speech.utterances(data, split) for split in speech.SPEECH_SPLITS}
    speakers = {split: {u.speaker for u in us} for split, us in found.items()}
    corpus = lambda split, name: {s for s in speakers[split] if s.startswith(name + "/")}
    assert len(corpus("training", speech.SPEECHOCEAN)) == 100 and len(corpus("validation", speech.SPEECHOCEAN)) == 25
    assert len(corpus("validation", speech.VCC)) == 10
    assert len(corpus("bench", speech.SPEECHOCEAN)) == 125 and len(corpus("bench", speech.LJSPEECH)) == 1
    libri = {split: corpus(split, speech.LIBRISPEECH) for split in speech.SPEECH_SPLITS}
    assert len(libri["training"]) + len(libri["validation"]) == 223 and len(libri["bench"]) == 10   # read by
    assert len(libri["validation"]) >= 30                  # native readers, in the threshold's stream too
    assert any(u.speaker.startswith(speech.S2I) for u in found["training"])
    assert not speakers["training"] & speakers["bench"]
    assert not speakers["validation"] & (speakers["training"] | speakers["bench"])
    hashed = lambda split: [u for u in found[split] if u.speaker.startswith((speech.SPEECHOCEAN, speech.LIBRISPEECH))]
    assert all(u.text for u in found["training"] if u.speaker.startswith(speech.SPEECHOCEAN))   # screened
    held = [u for u in found["validation"] if u.speaker.startswith(speech.SPEECHOCEAN)]
    assert held and all(u.text for u in held)
    # the validation's hashed speakers are the ones the backbone's hash never trains on
    assert {speaker_split(speech.clip_speaker(u)) for u in hashed("validation")} == {"validation", "testing"}
    assert {speaker_split(speech.clip_speaker(u)) for u in hashed("training")} == {"training"}


@pytest.mark.parametrize("split", ["training", "validation"])
def test_an_utterance_saying_a_word_of_the_phrase_is_left_out(data, split):
    every = speech.utterances(data, split)
    kept = speech.utterances(data, split, "call me")
    said = [u for u in every if u.text and {"call", "me"} & set(speech.words(u.text))]
    assert said and len(kept) == len(every) - len(said)
    assert not any(speech.holds_phrase(u.text, "call me") for u in kept)


def test_only_odd_numbered_recordings_are_benched_and_enroll_trains_on_none_of_them(data):
    from training import enroll
    bench = speech.wake_recordings(data, "alexa")
    assert bench and all(int(p.stem) % 2 == 1 for p in bench)
    trained = [p for p in (data / speech.WAKEWORD_FOLDER / "alexa").glob("*") if enroll.wakeword_training(p)]
    assert trained and not set(trained) & set(bench)


def test_the_bench_stream_holds_its_recordings_and_speech_and_no_phrase_in_the_background(data, monkeypatch):
    from benchmarks import wakeword
    audio, events, counts = wakeword.bench_stream(data, hours=0.05, seed=0)
    assert len(audio) / RATE >= 0.05 * 3600 and {e.kind for e in events} == {PHRASE, SPEECH}
    said = [e for e in events if e.kind == SPEECH]
    for phrase in speech.BENCH_PHRASES:                    # counts of what the stream holds
        assert 0 < counts[phrase] == sum(e.kind == PHRASE and e.label == phrase for e in events)
    assert counts["utterances"] == len(said) and counts["speakers"] == len({e.label for e in said})
    assert abs(counts["speech_hours"] - sum(e.end_s - e.start_s for e in said) / 3600) < 1e-9
    real = speech.utterances(data, "bench")
    saying = speech.Utterance(real[0].path, "x/1", "ALEXA PLAY SOME MUSIC")   # a phrase in the background
    monkeypatch.setattr(speech, "utterances", lambda data, split: [saying] + real[:5])
    got, counts = wakeword.bench_items(data)
    assert counts["utterances"] == 5 and sum(i.kind == SPEECH for i in got) == 5
    assert "x/1" not in {i.label for i in got}


def test_athena_is_the_benchs_alone(data):
    """Every recording of `athena` (a phrase no recipe was tuned on) is the bench's; no enroll hears one."""
    from training import enroll
    folder = data / speech.SPEECH_FOLDER / speech.HELD_OUT_WAKEWORDS["athena"]
    assert speech.wake_recordings(data, "athena") == sorted(folder.glob("*.ogg")) != []
    assert "athena" not in enroll.OTHER_WAKEWORD_NAMES


def test_rows_of_an_earlier_run_join_only_on_the_same_stream(tmp_path):
    import json
    from benchmarks import wakeword
    counts = {"alexa": 3, "utterances": 10, "speech_hours": 0.01}
    row = {"engine": "openWakeWord", "phrase": "alexa", "budgets": {1.0: None, 0.1: None}, "rows": []}
    (tmp_path / "run.json").write_text(json.dumps({"counts": counts, "hours": 0.05, "results": [row]}))
    got = wakeword.earlier_rows(tmp_path / "run.json", counts, 0.05)
    assert got[0]["engine"] == f"openWakeWord {wakeword.EARLIER}" and set(got[0]["budgets"]) == {1.0, 0.1}
    with pytest.raises(ValueError, match="another stream"):
        wakeword.earlier_rows(tmp_path / "run.json", counts | {"alexa": 4}, 0.05)


def test_the_readme_table_puts_a_recipes_seeds_in_one_row():
    from benchmarks import wakeword
    row = lambda engine, miss, cpu: {"engine": engine, "phrase": "alexa", "cpu_ms_per_s": cpu,
                                     "budgets": {1.0: {"miss_rate": miss}, 0.1: None},
                                     "default": {"miss_rate": miss, "fa_per_hour": 0.5}}
    table = wakeword.seeds_table([row("rotkws (`alexa_s1.onnx`)", 0.3, 3.0), row("rotkws (`alexa_s0.onnx`)", 0.2, 2.0),
                                  row("openWakeWord", 0.1, 40.0), row("rotkws ears (`alexa_head_s0.onnx`)", 0.1, 30.0)]
                                 ).splitlines()
    assert len(table) == 4                                          # the head file alone left out
    assert table[2] == "| rotkws (`alexa_s*.onnx`) | `alexa` | 20.0 % / 30.0 % | — / — | 20.0 %, 0.5 / 30.0 %, 0.5 | 2.0 / 3.0 |"
    assert table[3].startswith("| openWakeWord | `alexa` | 10.0 % |")
    earlier = wakeword.seeds_table([row("rotkws (`alexa_s0.onnx`) (earlier run)", 0.2, 2.0),
                                    row("rotkws (`alexa_s1.onnx`)", 0.3, 3.0)]).splitlines()
    assert len(earlier) == 3 and earlier[2].startswith("| rotkws (`alexa_s*.onnx`) (earlier run) | `alexa` | 20.0 % / 30.0 % |")
