"""The two-stage wake word (app/cascade.py): the streaming cascade gives the offline rule's
detections over the two full score tracks, whatever the chunks, and computes the embedding only
around proposals."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.cascade import CascadeSpotter, cascade_detections
from app.embedding import FOLDER, SAMPLE_RATE, SpeechEmbedding
from app.spotter import WAKE_MODEL, KeywordModel
from app.wakehead import HeadModel
from app.sweep import model_rule, score_track, sweep_detections
from export.embedding_head import HEAD_RULE, export_head
from export.onnx import write_metadata
from test_web import TOLERANCE, node, run_node  # noqa: F401  (node: a fixture)
from training.embedding_head import Head

CLIPS = sorted((Path(__file__).parent / "data" / "wakeword" / "alexa").glob("*.flac"))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("cascade") / "head.onnx"
    export_head(Head(), path, {"labels": ["alexa", "_other_"], "detection": HEAD_RULE | {"threshold": 0.5}})
    rng = np.random.default_rng(0)
    parts = []
    for c in CLIPS:
        parts += [rng.normal(0, 0.003, int(rng.uniform(0.5, 2) * SAMPLE_RATE)).astype(np.float32),
                  sf.read(c, dtype="float32")[0]]
    return KeywordModel(WAKE_MODEL), HeadModel(path, SpeechEmbedding()), np.concatenate(parts)


def cascade_file(wake, head, folder, name: str, propose: float, confirm: float):
    """The wake file written to `folder` as NAME.onnx naming NAME.head.onnx, a copy of the head, as
    its verifier at these thresholds; its path."""
    shutil.copy(head.path, folder / f"{name}.head.onnx")
    write_metadata(wake.path, folder / f"{name}.onnx", {"verifier": {"head": f"{name}.head.onnx", "propose": propose,
                                                                     "confirm": confirm}})
    return folder / f"{name}.onnx"


def confirming(head, audio) -> float:
    """A confirming threshold that some proposals pass and others do not."""
    return float(np.quantile(head.track(audio)[1], 0.3))


def offline(wake, head, audio, propose, confirm):
    times, scores = score_track(wake, audio)
    proposals = sweep_detections(times, scores, wake.labels, wake.keywords, [propose], **model_rule(wake))[propose]
    head_times, head_scores = head.track(audio)
    return np.array([d.time_s for d in proposals]), cascade_detections(
        np.array([d.time_s for d in proposals]), head_times, head_scores, confirm)


def test_streaming_cascade_is_the_offline_rule(setup):
    wake, head, audio = setup
    _, head_scores = head.track(audio)
    propose = 0.3
    found = []
    for confirm in np.quantile(head_scores, [0.2, 0.6, 0.95]):
        proposals, expected = offline(wake, head, audio, propose, confirm)
        assert len(proposals) >= 3
        found.append(len(expected))
        rng = np.random.default_rng(1)
        cascade, got, i = CascadeSpotter(wake, head, propose, confirm), [], 0
        while i < len(audio):
            n = int(rng.integers(100, 40000))
            got += [d.time_s for d in cascade.process(audio[i:i + n]).detections]
            i += n
        got += [d.time_s for d in cascade.flush().detections]
        np.testing.assert_allclose(got, expected, atol=1e-6)
        assert cascade.hops_embedded < len(head_scores)        # only around proposals
    assert found[0] > found[-1]                                # confirm mattered

def test_recorded_hops_give_the_sweep(setup):
    wake, head, audio = setup
    cascade = CascadeSpotter(wake, head, 0.3, 0.99, record=True)
    for i in range(0, len(audio) + SAMPLE_RATE, 1600):
        cascade.process(np.concatenate([audio, np.zeros(SAMPLE_RATE, np.float32)])[i:i + 1600])
    hops = np.array(sorted(cascade.recorded))
    times = (hops + 1) * 1280 / SAMPLE_RATE
    scores = np.array([cascade.recorded[k] for k in hops])
    _, head_scores = head.track(audio)
    np.testing.assert_allclose(scores, head_scores[hops[hops < len(head_scores)]][:len(hops)], atol=1e-5)
    for confirm in np.quantile(head_scores, [0.2, 0.6]):
        _, expected = offline(wake, head, audio, 0.3, confirm)
        np.testing.assert_allclose(cascade_detections(np.array(cascade.proposals), times, scores, confirm), expected)


def test_javascript_cascade_matches_python(setup, node, tmp_path):
    """app/web/cascade.js through onnxruntime-node: Python's confirmed detections at the same times,
    scores within TOLERANCE, on the bundled alexa.onnx with a head; a batch of embedding windows
    the same as each alone (tests/web/cascade_python.test.mjs)."""
    wake, head, audio = setup
    propose, confirm = 0.3, confirming(head, audio)
    cascade = CascadeSpotter(wake, head, propose, confirm)
    found = [d for i in range(0, len(audio), 4000) for d in cascade.process(audio[i:i + 4000]).detections] + \
        cascade.flush().detections
    assert len(found) >= 2
    folder = tmp_path / "models"
    folder.mkdir()
    cascade_file(wake, head, folder, "alexa", propose, confirm)
    sf.write(tmp_path / "stream.wav", audio, SAMPLE_RATE, subtype="FLOAT")
    ref = {"wake": str(folder / "alexa.onnx"), "embedding": str(FOLDER) + "/", "wav": str(tmp_path / "stream.wav"),
           "chunks": [1, 333, 4000, 1600, 7919, 48000], "tolerance": TOLERANCE,
           "detections": [{"keyword": d.keyword, "timeS": d.time_s, "score": d.score} for d in found],
           "hops_embedded": cascade.hops_embedded}
    (tmp_path / "reference.json").write_text(json.dumps(ref))
    out = run_node(node, "tests/web/cascade_python.test.mjs", env={"ROTKWS_CASCADE_REFERENCE": str(tmp_path / "reference.json")})
    assert "# pass 3" in out.stdout and "# skipped 0" in out.stdout, out.stdout[-2000:]


def test_the_bench_runs_heads_and_cascades_as_the_runtime_does(setup, tmp_path):
    """benchmarks/engines.py: a Heads run's sweep is the head file's rule over its track; a Cascaded
    run's stored-threshold detections are the live CascadeSpotter's, its sweep the offline rule's."""
    from benchmarks import engines
    wake, head, audio = setup
    _, head_scores = head.track(audio)
    confirm = confirming(head, audio)
    path = cascade_file(wake, head, tmp_path, "alexa", 0.3, confirm)
    runnable, _ = engines.engines_for(["alexa"], [path, tmp_path / "alexa.head.onnx"], peers=())
    assert [type(e).__name__ for e in runnable] == ["Cascaded", "Heads"]
    cascade, heads = runnable[0].run(audio), runnable[1].run(audio)[0]
    live = CascadeSpotter(wake, head, 0.3, confirm)
    found = [d.time_s for i in range(0, len(audio), 1280) for d in live.process(audio[i:i + 1280]).detections] + \
        [d.time_s for d in live.flush().detections]
    np.testing.assert_allclose(cascade.detections[confirm], found)
    for th in (0.2, 0.5):
        _, expected = offline(wake, head, audio, 0.3, th)
        np.testing.assert_allclose(cascade.detections[th], expected)
    assert heads.phrase == "alexa" and heads.cpu_s > 0
    times = np.arange(1, len(head_scores) + 1) * 0.08
    above = times[head_scores >= 0.5]
    assert len(heads.detections[0.5]) and set(heads.detections[0.5]) <= set(np.round(above, 9))


def test_detect_runs_a_wake_file_with_its_verifier_as_the_cascade(setup, tmp_path, capsys):
    """`rotkws detect --model W.onnx` on a file naming its verifier: the cascade's detections,
    one JSON line each, as the offline rule gives them."""
    from app import detect_cli as detect
    wake, head, audio = setup
    confirm = confirming(head, audio)
    path = cascade_file(wake, head, tmp_path, "w", 0.3, confirm)
    sf.write(tmp_path / "a.wav", audio, SAMPLE_RATE, subtype="FLOAT")
    assert detect.main(["--model", str(path), str(tmp_path / "a.wav")]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    _, expected = offline(wake, head, audio, 0.3, confirm)
    assert len(expected) >= 2
    np.testing.assert_allclose([d["time_s"] for d in lines], expected, atol=1e-3)
    assert {d["keyword"] for d in lines} == {"alexa"}
