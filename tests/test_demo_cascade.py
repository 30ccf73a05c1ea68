"""A cascade wake file on the demo page (app/twostage_cascade.py, app/keyword_cascade.py through
app/demo_session.py): `rotkws demo --wake W.onnx`, `rotkws demo --model W.onnx` and the enroll tab
run it as the cascade, on real recordings of the wake word, with one head and embedding shared by
every visitor; a head that is missing is an error naming it, and the page serves the files the
in-browser page needs for a cascade.
The cascade files are built as tests/test_cascade.py builds them (its `setup`: the bundled
alexa.onnx and an untrained head)."""
import sys

import numpy as np
import pytest
import soundfile as sf

from app import demo
from app.cascade import CascadeSpotter, Verifier
from app.demo_controls import slider_start
from app.demo_enroll import EnrollPage, on_poll
from app.demo_session import FILE_PIECE_S, Assistant, DemoSession, read_upload
from app.embedding import FILES, shared_embedding
from app.enroll_jobs import EnrollJobs
from app.keyword_cascade import CascadeKeywordSpotter, CascadeModel
from app.spotter import COMMAND_MODEL, KeywordModel, KeywordSpotter
from app.twostage_cascade import CascadeWakeCommandSpotter
from test_cascade import CLIPS, cascade_file, offline
from test_cascade import setup   # noqa: F401  (a fixture)
from test_demo import BROWSER_RATE, at_48k, split, stream
from test_enroll_jobs import JOB_TIMEOUT_S

PROPOSE = 0.3                # the wake file's proposals (test_cascade.py's)
GAP_S = 4.5                  # silence after each clip: past its command window and refractory period


@pytest.fixture(scope="module")
def commands() -> KeywordModel:
    return KeywordModel(COMMAND_MODEL)


@pytest.fixture(scope="module")
def clips_48k() -> np.ndarray:
    """Every real `alexa` recording after 1 s of silence and before GAP_S: int16 at 48 kHz."""
    return np.concatenate([at_48k(c, 1.0, GAP_S) for c in CLIPS])


@pytest.fixture(scope="module")
def confirm(setup, clips_48k) -> float:
    """A head threshold that confirms some of the wake file's proposals on the stream and not others."""
    wake, head, _ = setup
    import soxr
    audio = soxr.resample(clips_48k.astype(np.float32) / 32767, BROWSER_RATE, 16_000).astype(np.float32)
    for q in np.linspace(0.3, 0.95, 14):
        c = float(np.quantile(head.track(audio)[1], q))
        proposals, confirmed = offline(wake, head, audio, PROPOSE, c)
        if 0 < len(confirmed) < len(proposals):
            return c
    pytest.fail("no head threshold splits the proposals on the alexa recordings")


def reference(wake, head, confirm, audio_48k) -> list:
    """The plain CascadeSpotter (app/cascade.py) over the same pieces the page gets."""
    cascade = CascadeSpotter(wake, head, PROPOSE, confirm)
    pieces = split(audio_48k, (demo.STREAM_EVERY_S,))
    return [d for piece in pieces for d in cascade.process(piece, BROWSER_RATE).detections]


def test_the_wake_page_hears_what_the_cascade_confirms(setup, commands, clips_48k, confirm):
    """`rotkws demo --wake W.onnx` with a verifier: the wake words the page logs are the cascade's,
    at its times and head scores, fewer than the wake file alone proposes at the same threshold;
    the plot still draws the wake file's score."""
    wake, head, _ = setup
    assistant = Assistant(wake, commands, verifier=Verifier(head, PROPOSE, confirm))
    session = stream(assistant, clips_48k)
    expected = reference(wake, head, confirm, clips_48k)
    assert isinstance(session.spotter, CascadeWakeCommandSpotter)
    assert [d.keyword for d in session.detections] == [d.keyword for d in expected]
    np.testing.assert_allclose([d.time_s for d in session.detections], [d.time_s for d in expected], atol=1e-6)
    np.testing.assert_allclose([d.score for d in session.detections], [d.score for d in expected], atol=1e-5)
    alone = stream(Assistant(wake, commands), clips_48k, threshold=PROPOSE)
    assert 0 < len(session.detections) < len(alone.detections)
    assert [e.wake for e in session.events] == [d.keyword for d in session.detections]   # each opened a window
    assert "alexa (wake)" in set(session.plot_points()["keyword"])
    assert session.scores.max() > PROPOSE                            # the wake file's scores, kept
    assert slider_start(assistant)[0] == PROPOSE and session.spotter.threshold == PROPOSE


def test_visitors_share_the_head_and_keep_their_own_cascade(setup, commands, clips_48k, confirm):
    """Two visitors, pieces interleaved: one hears the recordings, the other silence; each hears
    what it would alone, through the same head sessions."""
    wake, head, _ = setup
    assistant = Assistant(wake, commands, verifier=Verifier(head, PROPOSE, confirm))
    loud, quiet = None, None
    for piece in split(clips_48k, (demo.STREAM_EVERY_S,)):
        *_, loud = demo.on_chunk(assistant, (BROWSER_RATE, piece), loud, None, 0.0)
        *_, quiet = demo.on_chunk(assistant, (BROWSER_RATE, np.zeros_like(piece)), quiet, None, 0.0)
    assert loud.spotter.cascade is not quiet.spotter.cascade
    assert loud.spotter.cascade.head is quiet.spotter.cascade.head is head
    np.testing.assert_allclose([d.time_s for d in loud.detections],
                               [d.time_s for d in reference(wake, head, confirm, clips_48k)], atol=1e-6)
    assert quiet.detections == [] and quiet.spotter.cascade.hops_embedded == 0


def test_demo_wake_loads_the_cascade_and_names_a_missing_head(setup, tmp_path, capsys):
    """--wake W.onnx: its verifier loaded from beside it; the head gone, an error naming the head
    file and what was expected, at start-up (exit status 2)."""
    wake, head, _ = setup
    path = cascade_file(wake, head, tmp_path, "w", PROPOSE, 0.5)
    runs = demo.load_models(demo.parse_args(["--wake", str(path)]))
    assert runs.verifier.head.path == tmp_path / "w.head.onnx" and runs.verifier.confirm == 0.5
    (tmp_path / "w.head.onnx").unlink()
    with pytest.raises(ValueError, match=r"--wake: .*w\.onnx names 'w\.head\.onnx' as its verifier: no head file at "
                       r".*w\.head\.onnx \(expected the head file"):
        demo.load_models(demo.parse_args(["--wake", str(path)]))
    assert demo.main(["--wake", str(path), "--no-enroll"]) == 2
    assert str(tmp_path / "w.head.onnx") in capsys.readouterr().err


# ─── `rotkws demo --model W.onnx`: the plain Listen page on a cascade wake file ───

def from_file(path, audio, rate, piece_s=demo.STREAM_EVERY_S, flush=False) -> list:
    """CascadeSpotter.from_file(path) over `audio` in the pieces the page gets; then its flush."""
    cascade = CascadeSpotter.from_file(path)
    step = int(piece_s * rate)
    found = [d for i in range(0, len(audio), step) for d in cascade.process(audio[i:i + step], rate).detections]
    return found + (cascade.flush().detections if flush else [])


def same_detections(got, expected) -> None:
    assert [d.keyword for d in got] == [d.keyword for d in expected]
    np.testing.assert_allclose([d.time_s for d in got], [d.time_s for d in expected], atol=1e-6)
    np.testing.assert_allclose([d.score for d in got], [d.score for d in expected], atol=1e-5)


@pytest.fixture
def model_page(setup, confirm, tmp_path) -> tuple:
    """`rotkws demo --model W.onnx` on a cascade file at (PROPOSE, confirm): what it serves, W.onnx."""
    wake, head, _ = setup
    path = cascade_file(wake, head, tmp_path, "w", PROPOSE, confirm)
    return demo.load_models(demo.parse_args(["--model", str(path)])), path


def test_the_model_page_hears_what_the_cascade_confirms(setup, model_page, clips_48k, tmp_path):
    """The plain page on a cascade file: the microphone and a file upload (ending amid a wake word,
    so that its flush confirms what is pending) log exactly CascadeSpotter.from_file's
    detections, at its times and head scores, fewer than the wake file alone at `propose`; the
    plot keeps the wake file's scores; the slider starts at `propose` and says where the head confirms."""
    import gradio as gr
    wake, _, _ = setup
    runs, path = model_page
    assert isinstance(runs, CascadeModel) and runs.verifier.head.ears is shared_embedding()
    session = stream(runs, clips_48k)
    assert isinstance(session, DemoSession) and isinstance(session.spotter, CascadeKeywordSpotter)
    same_detections(session.detections, from_file(path, clips_48k, BROWSER_RATE))
    assert session.scores.max() > PROPOSE and "alexa" in set(session.plot_points()["keyword"])

    file = tmp_path / "alexa.wav"          # ending 0.2 s before the stream's last detection: in its flush
    sf.write(file, clips_48k[:int((session.detections[-1].time_s - 0.2) * BROWSER_RATE)], BROWSER_RATE,
             subtype="PCM_16")
    audio, rate = read_upload(file)
    expected = from_file(path, audio, rate, FILE_PIECE_S, flush=True)
    *_, log, _, session = demo.on_file(runs, str(file), session, None, 0.0)
    same_detections(session.detections, expected)
    assert len(expected) > len(from_file(path, audio, rate, FILE_PIECE_S))     # the flush confirmed one
    assert log.split("── alexa.wav")[0].count("alexa ") == len(expected)       # newest first
    alone = DemoSession(wake, PROPOSE)
    alone.feed_file(file)
    assert 0 < len(session.detections) < len(alone.detections)

    assert slider_start(runs)[0] == PROPOSE and session.spotter.threshold == PROPOSE
    page = demo.build_demo(runs)
    slider = next(b for b in page.blocks.values() if getattr(b, "elem_id", None) == "threshold")
    assert isinstance(slider, gr.Slider) and f"confirms at {runs.verifier.confirm:g}" in slider.label
    *_, moved = demo.on_chunk(runs, (BROWSER_RATE, clips_48k[:BROWSER_RATE]), None, 0.6, 0.0)
    assert moved.spotter.threshold == 0.6 and moved.spotter.cascade.confirm == runs.verifier.confirm


def test_model_page_visitors_share_the_head_and_keep_their_own_cascade(model_page, clips_48k):
    """Two visitors of the plain page, pieces interleaved: one hears the recordings, the other
    silence; each hears what it would alone, through the same head and embedding."""
    runs, path = model_page
    loud, quiet = None, None
    for piece in split(clips_48k, (demo.STREAM_EVERY_S,)):
        *_, loud = demo.on_chunk(runs, (BROWSER_RATE, piece), loud, None, 0.0)
        *_, quiet = demo.on_chunk(runs, (BROWSER_RATE, np.zeros_like(piece)), quiet, None, 0.0)
    assert loud.spotter.cascade is not quiet.spotter.cascade
    assert loud.spotter.cascade.head is quiet.spotter.cascade.head is runs.verifier.head
    same_detections(loud.detections, from_file(path, clips_48k, BROWSER_RATE))
    assert loud.detections and quiet.detections == [] and quiet.spotter.cascade.hops_embedded == 0


def test_demo_model_names_a_missing_head(setup, tmp_path, capsys):
    """--model W.onnx whose head is gone: an error naming the head file and what was expected,
    at start-up (exit status 2); a file without a verifier is served as it is."""
    wake, head, _ = setup
    path = cascade_file(wake, head, tmp_path, "w", PROPOSE, 0.5)
    (tmp_path / "w.head.onnx").unlink()
    with pytest.raises(ValueError, match=r"--model: .*w\.onnx names 'w\.head\.onnx' as its verifier: no head file "
                       r"at .*w\.head\.onnx \(expected the head file"):
        demo.load_models(demo.parse_args(["--model", str(path)]))
    assert demo.main(["--model", str(path), "--no-enroll"]) == 2
    assert str(tmp_path / "w.head.onnx") in capsys.readouterr().err
    plain = demo.load_models(demo.parse_args(["--model", str(wake.path)]))
    assert not isinstance(plain, CascadeModel) and type(demo.new_session(plain).spotter) is KeywordSpotter


# ─── the enroll tab: jobs that enroll a cascade (enroll's default) ───

# A stand-in for `rotkws enroll` (its default, a cascade): the cascade file as its model and the head beside it
# (none for the phrase "headless"), then the `done` line with the verifier it measured.
CASCADE_ENROLL = r'''
import json, shutil, sys
phrase, output, model = sys.argv[1:4]
shutil.copy(model, output)
if phrase != "headless":
    shutil.copy(model.replace(".onnx", ".head.onnx"), output.replace(".onnx", ".head.onnx"))
print(json.dumps({"event": "done", "output": output, "phrase": phrase, "threshold": 0.8, "fa_per_hour": 0.5,
                  "validation_stream_hours": 4.1, "validation_stream_false_accepts": 2,
                  "verifier": {"head": "model.head.onnx", "propose": 0.3, "confirm": 0.5}}), flush=True)
'''


@pytest.fixture
def page(setup, commands, tmp_path):
    wake, head, _ = setup
    (tmp_path / "cascade").mkdir()
    model = cascade_file(wake, head, tmp_path / "cascade", "model", PROPOSE, 0.5)   # as enroll names it
    script = tmp_path / "cascade_enroll.py"
    script.write_text(CASCADE_ENROLL)
    jobs = EnrollJobs(tmp_path / "jobs", command=lambda phrase, output, takes, extra: [
        sys.executable, str(script), phrase, str(output), str(model)])
    yield EnrollPage(jobs, commands, wake)
    jobs.close()


def test_an_enrolled_cascade_is_kept_whole_and_listened_to_as_a_cascade(page, clips_48k):
    """A job that enrolled a cascade: its head kept beside its model, the Listen tab's
    wake word the cascade (the head confirming), the page's links to both files."""
    job = page.jobs.submit("alexa")
    assert page.jobs.wait(job.id, JOB_TIMEOUT_S)["state"] == "done"
    folder = page.jobs.folder(job.id)
    assert sorted(p.name for p in folder.glob("*.onnx")) == ["model.head.onnx", "model.onnx"]
    assistant = page.assistant(job.id)
    assert assistant.verifier.head.path == folder / "model.head.onnx" and assistant.operating_point == PROPOSE
    session = stream(assistant, clips_48k)
    assert isinstance(session.spotter, CascadeWakeCommandSpotter) and session.detections
    said = on_poll(page, job.id, None)
    assert "Listening below" in said[0] and said[4] == job.id          # the Listen tab switched to it
    assert f'href="/enrolled/{job.id}/model.head.onnx"' in said[3] and \
        f'href="/web/?model=../enrolled/{job.id}/model.onnx"' in said[3]


def test_an_enrolled_cascade_without_its_head_is_named_and_others_go_on(page):
    """A job's model names a head that is not there: the page says so, naming the file and what
    was expected, and does not switch to it; another visitor's job still runs."""
    broken, fine = page.jobs.submit("headless"), page.jobs.submit("alexa")
    for job in (broken, fine):
        assert page.jobs.wait(job.id, JOB_TIMEOUT_S)["state"] == "done"
    problem = page.problem(broken.id)
    assert "model.onnx names 'model.head.onnx' as its verifier: no head file at model.head.onnx" in problem
    assert "expected the head file" in problem and str(page.jobs.root) not in problem   # no server path
    assert page.assistant(broken.id) is None
    status, _, _, result, armed, *_ = on_poll(page, broken.id, None)
    assert "cannot run here" in status and "model.head.onnx" in status and armed is None and result == ""
    assert page.assistant(fine.id).verifier is not None and page.problem(fine.id) is None


# ─── what the page at /web/ fetches for a cascade ───

def test_the_demo_serves_a_cascades_head_and_the_embedding(setup, tmp_path, page):
    """/models/: the demo's wake file, the head its verifier names and the embedding's files
    (where app/web/index.html looks); /enrolled/ID/: a finished job's model and its head."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    wake, head, _ = setup
    path = cascade_file(wake, head, tmp_path, "w", PROPOSE, 0.5)
    job = page.jobs.submit("alexa")
    page.jobs.wait(job.id, JOB_TIMEOUT_S)
    app = FastAPI()
    demo.serve_models(app, path)
    demo.serve_enrolled(app, page.jobs)
    client = TestClient(app)
    for url, file in [("/models/w.onnx", path), ("/models/w.head.onnx", tmp_path / "w.head.onnx"),
                      *[(f"/models/speech_embedding/{name}", demo.EMBEDDING_FOLDER / name) for name in FILES],
                      (f"/enrolled/{job.id}/model.head.onnx", page.jobs.folder(job.id) / "model.head.onnx")]:
        r = client.get(url)
        assert r.status_code == 200 and r.content == file.read_bytes(), url
    for url in ("/models/speech_embedding/LICENSE", f"/enrolled/{job.id}/job.json", "/enrolled/nojob/model.onnx"):
        assert client.get(url).status_code == 404, url
