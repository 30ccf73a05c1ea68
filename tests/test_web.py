"""app/web/: the JavaScript spotter in Node against the Python runtime on the same real audio (the
page itself, in Chromium and under `rotkws demo`: tests/test_web_page.py).

Node runs tests/web/*.test.mjs (`node --test`); for the comparison this file writes the Python
runtime's score tracks and detections to a JSON file that tests/web/spotter.test.mjs reads.
Without node, node_modules (`npm ci`) or /usr/bin/chromium the tests skip with the reason;
under CI (CI=true) they fail instead.
"""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from app.detection import detect
from app.spotter import DEFAULT_MODEL, KeywordModel, KeywordSpotter
from app.twostage import COMMAND_CONFIDENT, COMMAND_STATES, WakeCommandSpotter
from conftest import CLIPS, REPO
from corpus.clips import read_audio
from onnx_models import LABELS, META, exported

WEB = REPO / "app" / "web"
NODE = shutil.which("node")
ORT_NODE = REPO / "node_modules" / "onnxruntime-node"
ORT_WEB = REPO / "node_modules" / "onnxruntime-web" / "dist"
TOLERANCE = 1e-4                             # max |Δ score| between JavaScript and Python
NODE_TIMEOUT_S = 300
ALL_CLIPS = sorted(CLIPS.glob("*/*.wav"))    # 24 real 16 kHz clips
STREAM_CUT = 700                             # samples cut from the stream: its last hop is a short one
STREAM_CHUNKS = [1, 333, 4000, 1600, 7919]   # how the JavaScript side feeds the stream
MIC_LIKE_RATE, MIC_LIKE_CHUNKS = 48_000, [128]   # the stream again as a microphone gives it (Web Audio quanta)
RESAMPLED_TOLERANCE = 1e-2                   # … through resample.js in JS, soxr in Python: near, not equal
QUANTILES = (0.9, 0.8, 0.7, 0.5, 0.3)       # untrained models: thresholds tried, highest first
MIN_DETECTIONS = 2                           # … at least this often on the stream
PYTHON_NAMES = {"threshold": "threshold", "smoothing": "smoothing", "minHops": "min_hops",
                "refractoryS": "refractory_s", "keywords": "keywords"}
LISTENED = ["yes", "down", "stop"]            # a spotter listening for some keywords only


def missing(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; under CI these tests must run")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def node() -> str:
    if NODE is None:
        missing("node not found: install Node.js 20 (Debian's nodejs)")
    if not ORT_NODE.is_dir():
        missing(f"{ORT_NODE} not found: run `npm ci` in {REPO} (make test does)")
    return NODE


def run_node(node: str, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([node, "--test", *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          timeout=NODE_TIMEOUT_S, env={**os.environ, **(env or {})})
    assert done.returncode == 0 and re.search(r"^# fail 0$", done.stdout, re.M), \
        f"node --test failed ({done.returncode}):\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    return done


def test_javascript_unit_tests(node):
    """tests/web/units.test.mjs: metadata reader, detection rules, hop buffer, resampler."""
    out = run_node(node, "tests/web/").stdout
    assert re.search(r"^# pass [1-9]", out, re.M), out[-2000:]


def test_page_pins_the_onnxruntime_web_of_package_json():
    """index.html falls back to onnxruntime-web from a CDN: the version package.json tests."""
    pinned = json.loads((REPO / "package.json").read_text())["devDependencies"]["onnxruntime-web"]
    locked = json.loads((REPO / "package-lock.json").read_text())["packages"]["node_modules/onnxruntime-web"]["version"]
    page = re.search(r"const ORT_VERSION = '([^']+)'", (WEB / "index.html").read_text()).group(1)
    assert pinned == locked == page, (pinned, locked, page)


# ─── the JavaScript spotter against the Python runtime ───

def stream_case(name: str, clips: list[Path], cut: int, chunks) -> dict:
    audio = np.concatenate([read_audio(p)[0] for p in clips])
    return {"name": name, "clips": [str(p) for p in clips], "samples": len(audio) - cut,
            "chunks": chunks or [len(audio) - cut], "audio": audio[: len(audio) - cut]}


def python_track(spotter: KeywordSpotter, audio: np.ndarray, rate: int):
    """The Python runtime over one stream: all of it in one call, then flush."""
    spotter.reset()
    a = spotter.process(audio, rate)
    b = spotter.flush()
    return np.concatenate([a.times, b.times]), np.concatenate([a.scores, b.scores]), a.detections + b.detections


def snake(settings: dict) -> dict:
    """JavaScript's setting names (minHops) → Python's (min_hops)."""
    return {PYTHON_NAMES[k]: v for k, v in settings.items()}


def settings_of(spotter: KeywordSpotter) -> dict:
    d = spotter.detector
    return {"threshold": d.threshold, "smoothing": d.smoothing, "minHops": d.min_hops, "refractoryS": d.refractory_s}


def options_that_fire(model: KeywordModel, stream: np.ndarray) -> dict:
    """For an untrained model (flat scores): the highest threshold, a quantile of the stream's top
    keyword scores rounded to 0.001, that detects at least MIN_DETECTIONS times."""
    spotter = KeywordSpotter(model)
    times, scores, _ = python_track(spotter, stream, model.sample_rate)
    top = scores[:, [model.labels.index(k) for k in model.keywords]].max(1)
    for q in QUANTILES:
        settings = snake(settings_of(spotter)) | {"threshold": round(float(np.quantile(top, q)), 3)}
        if len(detect(times, scores, model.labels, model.keywords, **settings)) >= MIN_DETECTIONS:
            return {"threshold": settings["threshold"]}
    raise AssertionError(f"{model.path} fires fewer than {MIN_DETECTIONS} times on the stream at any threshold tried")


def synthetic_tracks(seed: int = 0, hops: int = 400) -> list[dict]:
    """Random score tracks with keyword bursts, under several settings, and Python's detections."""
    rng = np.random.default_rng(seed)
    keywords = [k for k in LABELS if not k.startswith("_")]
    scores = rng.dirichlet(np.ones(len(LABELS)), hops)
    for start in rng.integers(0, hops, 60):            # bursts of 1–6 hops of one keyword
        rows = scores[start:start + rng.integers(1, 7)]
        level = rng.uniform(0.3, 0.95)
        rows *= 1 - level
        rows[:, LABELS.index(keywords[rng.integers(len(keywords))])] += level
    times = (np.arange(1, hops + 1) * 1600) / 16_000    # as the spotter times its hops
    cases = []
    for name, settings in {"defaults": {"threshold": 0.5, "smoothing": 3, "minHops": 2, "refractoryS": 1.0},
                           "no smoothing": {"threshold": 0.4, "smoothing": 1, "minHops": 1, "refractoryS": 0.0},
                           "long runs": {"threshold": 0.45, "smoothing": 5, "minHops": 3, "refractoryS": 0.45},
                           "one threshold per keyword": {"threshold": {k: round(0.35 + 0.05 * i, 2) for i, k in enumerate(keywords)},
                                                         "smoothing": 2, "minHops": 2, "refractoryS": 0.3}}.items():
        found = detect(times, scores, LABELS, keywords, **snake(settings))
        cases.append({"name": name, "labels": list(LABELS), "keywords": keywords, "settings": settings,
                      "times": times.tolist(), "scores": scores.tolist(), "splits": [1, 7, 50, 3],
                      "detections": [{"keyword": d.keyword, "time_s": d.time_s, "score": d.score} for d in found]})
    return cases


def mic_like_case(stream: dict, folder: Path) -> dict:
    """The stream at 48 kHz (a float WAV): JavaScript resamples it with resample.js, Python with soxr."""
    audio = soxr.resample(stream["audio"], 16_000, MIC_LIKE_RATE).astype(np.float32)
    sf.write(folder / "stream_48k.wav", audio, MIC_LIKE_RATE, subtype="FLOAT")
    return {"name": "the stream at 48 kHz, through resample.js", "wav": str(folder / "stream_48k.wav"),
            "rate": MIC_LIKE_RATE, "chunks": MIC_LIKE_CHUNKS, "tolerance": RESAMPLED_TOLERANCE, "audio": audio}


def reference(model: KeywordModel, options: dict | None, folder: Path) -> dict:
    """What tests/web/spotter.test.mjs checks: Python's tracks on every clip, on their stream and
    on the stream at 48 kHz."""
    cases = [stream_case(f"{p.parent.name}/{p.name}", [p], 0, None) for p in ALL_CLIPS]
    cases.append(stream_case(f"stream of all {len(ALL_CLIPS)} clips", ALL_CLIPS, STREAM_CUT, STREAM_CHUNKS))
    cases.append(mic_like_case(cases[-1], folder))
    options = options_that_fire(model, cases[-2]["audio"]) if options is None else options
    spotter = KeywordSpotter(model, **snake(options))
    for case in cases:
        times, scores, found = python_track(spotter, case.pop("audio"), case.get("rate", model.sample_rate))
        case |= {"times": times.tolist(), "scores": scores.tolist(),
                 "detections": [{"keyword": d.keyword, "time_s": d.time_s, "score": d.score} for d in found]}
    return {
        "model": str(model.path), "tolerance": TOLERANCE, "result": str(folder / "result.json"),
        "metadata": dict(model.session.get_modelmeta().custom_metadata_map),
        "model_info": {"labels": list(model.labels), "keywords": list(model.keywords),
                       "sample_rate": model.sample_rate, "hop_samples": model.hop_samples,
                       "streaming": model.streaming, "state_size": model.state_size},
        "default_settings": settings_of(KeywordSpotter(model)), "options": options,
        "settings": settings_of(spotter), "cases": cases, "detector_cases": synthetic_tracks(),
    }


@pytest.fixture(scope="session")
def test_models(request) -> dict[str, Path]:
    cache = request.config.cache.mkdir("rotkws-onnx")
    return {kind: exported(kind, cache, **META)[1] for kind in ("filterbank", "linear", "bidirectional")}


def default_model() -> Path:
    if not DEFAULT_MODEL.is_file():
        missing(f"{DEFAULT_MODEL} is not there yet: the default model is compared and detects in the browser")
    return DEFAULT_MODEL


# The untrained filterbank model is run at a threshold that fires on the stream, so detections are
# compared too; the others (a linear front-end barely moves its flat scores) at their metadata's.
def with_operating_point(model: Path, folder: Path) -> Path:
    """The model with an operating point in its metadata, as `rotkws calibrate` writes one: a
    threshold per keyword and a shorter flush."""
    import onnx
    from export.onnx import set_metadata
    keywords = KeywordModel(model).keywords
    proto = onnx.load(str(model))
    set_metadata(proto, {"detection": json.dumps({"threshold": {k: round(0.4 + 0.02 * i, 2) for i, k in enumerate(keywords)},
                                                  "flush_s": 0.6})})
    onnx.save(proto, str(folder / "calibrated.onnx"))
    return folder / "calibrated.onnx"


@pytest.mark.parametrize("kind, fire", [("filterbank", True), ("linear", False), ("bidirectional", False),
                                        ("default", False), ("default with a per-keyword operating point", False),
                                        ("default with a per-keyword operating point, listening for some", False)])
def test_javascript_spotter_matches_python(kind, fire, node, test_models, tmp_path):
    """onnxruntime-node through app/web/rotkws.js gives Python's hops, scores (≤ 1e-4) and detections."""
    path = (default_model() if kind == "default" else
            with_operating_point(default_model(), tmp_path) if kind.startswith("default") else test_models[kind])
    model = KeywordModel(path)
    some = kind.endswith("listening for some")
    ref = reference(model, {"keywords": LISTENED} if some else None if fire else {}, tmp_path)
    detections = sum(len(c["detections"]) for c in ref["cases"] if "wav" not in c)
    if fire or kind.startswith("default"):
        assert detections >= MIN_DETECTIONS, f"{detections} detections: the comparison must include some"
    if some:                                     # the others never fire; the thresholds are theirs
        assert {d["keyword"] for c in ref["cases"] for d in c["detections"]} <= set(LISTENED)
        assert set(ref["settings"]["threshold"]) == set(LISTENED)
    (tmp_path / "reference.json").write_text(json.dumps(ref))
    run_node(node, "tests/web/spotter.test.mjs", env={"ROTKWS_WEB_REFERENCE": str(tmp_path / "reference.json")})
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["hops"] == sum(len(c["times"]) for c in ref["cases"] if "wav" not in c)
    assert result["detections"] == detections and result["max_abs_diff"] <= TOLERANCE
    resampled = result["cases"][ref["cases"][-1]["name"]]["max_abs_diff"]
    print(f"{kind}: {result['hops']} hops, {detections} detections, max |Δ score| {result['max_abs_diff']:.2e}; "
          f"48 kHz through resample.js vs soxr: {resampled:.2e}")


# ─── the two-stage spotter: app/twostage.py against WakeCommandSpotter in rotkws.js ───

WAKE, COMMANDS = ["yes"], ["left", "right", "stop"]      # kws12.onnx as both models
YES, LEFT = "yes/03401e93_nohash_0.wav", "left/0487ba9b_nohash_0.wav"
TWO_STAGE_STREAM = [0.5, YES, 0.6, LEFT,                 # a wake word, then a command
                    1.0, YES, 0.5, YES, 4.0,             # another, a yes in its window (dropped), no command
                    YES, 0.3, YES, 0.3, "stop/1b4c9b89_nohash_0.wav",
                    1.0, YES, 0.4, "right/03401e93_nohash_0.wav",
                    1.0, YES, 0.6, LEFT]                 # seconds of silence, and clips under tests/data/clips
TWO_STAGE_CUT = 5000                                     # samples cut from the end: the last command is
                                                         # heard in flush's silence


def two_stage_audio(rate: int) -> np.ndarray:
    parts = [np.zeros(round(p * rate), np.float32) if isinstance(p, float) else read_audio(CLIPS / p)[0]
             for p in TWO_STAGE_STREAM]
    return np.concatenate(parts)[:-TWO_STAGE_CUT]


def two_stage_reference(spotter: WakeCommandSpotter, audio: np.ndarray) -> dict:
    """What tests/web/twostage_python.test.mjs checks: Python's hops, wake words and events over
    the stream (in one call, then flush), the command model's rows with None where it did not run."""
    spotter.reset()
    a, b = spotter.process(audio, spotter.model.sample_rate), spotter.flush()
    rows = np.concatenate([a.command_scores, b.command_scores]).astype(np.float64)
    event = lambda e: {"wake": e.wake, "timeS": e.time_s, "score": e.score, "command": e.command,
                       "commandTimeS": e.command_time_s, "commandScore": e.command_score}
    return {"times": np.concatenate([a.times, b.times]).tolist(),
            "scores": np.concatenate([a.scores, b.scores]).tolist(),
            "command_scores": np.where(np.isnan(rows), None, rows).tolist(),
            "detections": [{"keyword": d.keyword, "timeS": d.time_s, "score": d.score}
                           for d in a.detections + b.detections],
            "events": [event(e) for e in a.events + b.events], "window_open": b.window_open,
            "settings": {"windowS": spotter.window_s, "windowHops": spotter.window_hops,
                         "commandState": spotter.command_state, "wake": settings_of(spotter),
                         "commands": settings_of(spotter.commands)}}


@pytest.mark.parametrize("command_state", COMMAND_STATES)
def test_javascript_two_stage_spotter_matches_python(command_state, node, tmp_path):
    """kws12.onnx as the wake model (yes) and the command model (left, right, stop) on a stream of
    real clips, fed to JavaScript in uneven chunks: the same wake words and events as app/twostage.py
    at the same times, scores within 1e-4, on a stream that has every way a window closes."""
    model = KeywordModel(default_model())
    audio = two_stage_audio(model.sample_rate)
    spotter = WakeCommandSpotter(model, model, command_state=command_state, keywords=WAKE, command_keywords=COMMANDS)
    ref = two_stage_reference(spotter, audio)
    end_s = len(audio) / model.sample_rate
    heard = python_track(KeywordSpotter(model, keywords=WAKE), audio, model.sample_rate)[2]
    assert {e["command"] for e in ref["events"]} == {None, *COMMANDS}, ref["events"]   # commands and a timeout
    assert ref["events"][-1]["commandTimeS"] == end_s, ref["events"][-1]              # one heard in the silence
    sure = {e["commandScore"] >= COMMAND_CONFIDENT for e in ref["events"] if e["command"]}
    assert sure == {True, False}, ref["events"]     # windows closed at once and by their peak at the end
    assert len(heard) > len(ref["detections"]) >= 5, (heard, ref["detections"])       # one dropped in a window
    sf.write(tmp_path / "stream.wav", audio, model.sample_rate, subtype="FLOAT")
    ref |= {"model": str(model.path), "wav": str(tmp_path / "stream.wav"), "chunks": STREAM_CHUNKS,
            "tolerance": TOLERANCE, "result": str(tmp_path / "result.json"),
            "options": {"commandState": command_state, "keywords": WAKE, "commandKeywords": COMMANDS}}
    (tmp_path / "reference.json").write_text(json.dumps(ref))
    run_node(node, "tests/web/twostage_python.test.mjs", env={"ROTKWS_TWOSTAGE_REFERENCE": str(tmp_path / "reference.json")})
    result = json.loads((tmp_path / "result.json").read_text())
    assert (result["hops"], result["detections"], result["events"]) == \
        (len(ref["times"]), len(ref["detections"]), len(ref["events"])), result
    assert result["commands"] == sum(e["command"] is not None for e in ref["events"]) and result["max_abs_diff"] <= TOLERANCE
    print(f"{command_state}: {result['hops']} hops, {result['events']} events ({result['commands']} with a command), "
          f"max |Δ score| {result['max_abs_diff']:.2e}")
