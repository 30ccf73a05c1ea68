"""app/web/'s page: the static page in Chromium hearing a real clip through its fake microphone
and saying what is wrong with a bad model, and the page as `rotkws demo` serves it at /web.
Without /usr/bin/chromium or onnxruntime-web (`npm ci`) the tests skip with the reason; under CI
(CI=true) they fail instead."""
import contextlib
import functools
import http.server
import re
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from app.embedding import FILES, FOLDER as EMBEDDING_FOLDER
from app.spotter import KeywordModel
from conftest import CLIPS, REPO
from onnx_models import LABELS, META, exported
from test_web import ORT_WEB, WEB, default_model, missing
from test_web import test_models   # noqa: F401  (a fixture)
from test_cascade import CLIPS as ALEXA_CLIPS, cascade_file
from test_cascade import setup   # noqa: F401  (a fixture: the bundled alexa.onnx and an untrained head)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run",
                 "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]
MIC_CLIP = CLIPS / "yes" / "03401e93_nohash_0.wav"
ALEXA_CLIP = ALEXA_CLIPS[0]                  # a real `alexa` the cascade's wake file proposes on
MIC_RATE = 48_000                            # what the fake microphone plays
LEAD_S, TAIL_S = 1.0, 0.5                    # silence before the word (and after, before it loops)
DETECT_TIMEOUT_MS = 40_000
MIN_PAGE_HOPS = 25                           # 2.5 s of microphone scored by the page


# ─── the page in Chromium ───

class QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm"}

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def static_server(root: Path):
    """A plain static file server on a free loopback port: what "any static server" means."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def site(root: Path, model: Path) -> Path:
    """The repository's layout as the page expects it: app/web/, app/models/kws12.onnx, node_modules/."""
    (root / "app" / "models").mkdir(parents=True)
    (root / "app" / "web").symlink_to(WEB)
    (root / "app" / "models" / "kws12.onnx").symlink_to(model)
    (root / "node_modules").symlink_to(REPO / "node_modules")
    return root


@pytest.fixture(scope="module")
def chromium() -> Path:
    if not CHROMIUM.exists():
        missing(f"{CHROMIUM} not found: apt-get install -y chromium (.ci/run does)")
    if not ORT_WEB.is_dir():
        missing(f"{ORT_WEB} not found: run `npm ci` in {REPO} (make test does)")
    pytest.importorskip("playwright.sync_api", reason="playwright (the dev extra) is not installed")
    return CHROMIUM


@pytest.fixture(scope="module")
def mic_wav(tmp_path_factory) -> Path:
    """The clip at 48 kHz 16-bit after LEAD_S of silence: what the fake microphone plays, looped."""
    audio, rate = sf.read(MIC_CLIP, dtype="float32")
    audio = np.concatenate([np.zeros(int(LEAD_S * MIC_RATE)), soxr.resample(audio, rate, MIC_RATE),
                            np.zeros(int(TAIL_S * MIC_RATE))])
    path = tmp_path_factory.mktemp("mic") / f"{MIC_CLIP.parent.name}_48k.wav"
    sf.write(path, audio, MIC_RATE, subtype="PCM_16")
    return path


@contextlib.contextmanager
def page_on(chromium: Path, mic_wav: Path, url: str):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium),
                                    args=CHROMIUM_ARGS + [f"--use-file-for-fake-audio-capture={mic_wav}"])
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_function("() => window.rotkws && (window.rotkws.spotter || window.rotkws.error)")
            assert page.evaluate("window.rotkws.error") is None, page.locator("#status").inner_text()
            yield page
            assert not errors, errors
        finally:
            browser.close()


def listen(page) -> None:
    page.locator("#start").click()
    page.wait_for_function("() => document.querySelector('#status').textContent.startsWith('Listening')"
                           " || window.rotkws.error")
    assert page.evaluate("window.rotkws.error") is None, page.locator("#status").inner_text()


@pytest.mark.browser
@pytest.mark.slow
def test_page_scores_the_microphone(chromium, mic_wav, test_models, tmp_path):
    """Plain files: the page loads the model at ../models/kws12.onnx, reads its metadata, scores
    the microphone (resampled to 16 kHz in the worklet) hop after hop and logs detections. The
    model is untrained: at a threshold of 0.05 its top keyword fires as soon as min_hops pass."""
    with static_server(site(tmp_path, test_models["filterbank"])) as url, \
            page_on(chromium, mic_wav, f"{url}/app/web/index.html?threshold=0.05&keywords=up,no") as page:
        assert page.locator("#keywords").inner_text() == "no, up"                 # listening for those only
        assert page.locator("#threshold").input_value() == "0.05"
        listen(page)
        status = page.locator("#status").inner_text()
        assert "→ 16000 Hz" in status and "100 ms" in status, status
        page.wait_for_function(f"() => window.rotkws.hops >= {MIN_PAGE_HOPS}", timeout=20_000)
        labels = page.locator("#scores .bar").evaluate_all("bars => bars.map(b => b.dataset.label)")
        assert sorted(labels) == sorted(LABELS), labels
        first = page.locator("#detections li").last.inner_text()
        assert re.fullmatch(r"t=\s*0\.2 s\s+(no|up)\s+0\.\d\d", first), first   # min_hops = 2 hops
        assert {d["keyword"] for d in page.evaluate("window.rotkws.detections")} <= {"no", "up"}
        page.locator("#stop").click()
        page.wait_for_function("() => document.querySelector('#status').textContent === 'Stopped.'")


@pytest.mark.browser
def test_page_says_what_is_wrong_with_its_model(chromium, test_models, tmp_path):
    """A model URL that is a 404, a file that is not a rotkws model, a keyword the model lacks: a
    message, not a blank page."""
    (tmp_path / "not-a-model.onnx").write_bytes(b"<html>404</html>")
    from playwright.sync_api import sync_playwright
    with static_server(site(tmp_path, test_models["filterbank"])) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            for query, message in (("model=../models/missing.onnx", r"no model at .*missing\.onnx \(HTTP 404\)"),
                                   ("model=../../not-a-model.onnx", r"not-a-model\.onnx: not an ONNX file"),
                                   ("keywords=yes,maybe", r"expected one or more of the model's keywords \[\"yes\",\"no\",\"up\"\]")):
                page.goto(f"{url}/app/web/index.html?{query}")
                page.wait_for_function("() => window.rotkws && window.rotkws.error")
                assert re.search(message, page.locator("#status").inner_text()), page.locator("#status").inner_text()
                assert page.locator("#start").is_disabled()
        finally:
            browser.close()


@pytest.mark.browser
@pytest.mark.slow
def test_page_detects_the_spoken_keyword(chromium, mic_wav, tmp_path):
    """The bundled model in the browser hears "yes" through the fake microphone, no server involved."""
    keyword = MIC_CLIP.parent.name
    with static_server(site(tmp_path, default_model())) as url, \
            page_on(chromium, mic_wav, f"{url}/app/web/index.html") as page:
        listen(page)
        page.wait_for_function("(word) => document.querySelector('#detections').textContent.includes(word)",
                               arg=keyword, timeout=DETECT_TIMEOUT_MS)
        found = {d["keyword"] for d in page.evaluate("window.rotkws.detections")}
        assert found == {keyword}, f"the page detected {found}; expected only {keyword!r}"


# ─── the page under `rotkws demo` ───

@pytest.fixture(scope="module")
def demo_client(request):
    from fastapi.testclient import TestClient

    from app.demo import build_app, build_demo
    path = exported("filterbank", request.config.cache.mkdir("rotkws-onnx"), **META)[1]
    with TestClient(build_app(build_demo(KeywordModel(path)))) as client:
        yield client


def test_demo_serves_the_page_at_web(demo_client):
    page = demo_client.get("/web/")
    assert page.status_code == 200 and "rotkws.js" in page.text
    for name in ("rotkws.js", "resample.js", "worklet.js"):
        r = demo_client.get(f"/web/{name}")
        assert r.status_code == 200 and "javascript" in r.headers["content-type"], (name, r.headers)


def test_demo_serves_the_model_where_the_page_looks(demo_client):
    r = demo_client.get("/models/kws12.onnx")   # /web/ + ../models/kws12.onnx
    assert r.status_code == 200 and r.content == default_model().read_bytes()


def test_demo_serves_its_own_model_and_no_other_file(request, tmp_path):
    """`rotkws demo --model M`: the page can load M at ../models/<M's name>; the folder M sits in
    is not exposed."""
    from fastapi.testclient import TestClient

    from app.demo import build_app, build_demo
    path = exported("filterbank", request.config.cache.mkdir("rotkws-onnx"), **META)[1]
    mine = tmp_path / "mine.onnx"
    mine.write_bytes(path.read_bytes())
    (tmp_path / "secret.txt").write_text("not for the web")
    with TestClient(build_app(build_demo(KeywordModel(mine)), model_path=mine)) as client:
        r = client.get("/models/mine.onnx")
        assert r.status_code == 200 and r.content == mine.read_bytes()
        assert client.get("/models/kws12.onnx").content == default_model().read_bytes()
        for name in ("secret.txt", "..%2Fsecret.txt", "MODEL_CARD.md"):
            assert client.get(f"/models/{name}").status_code == 404, name


# ─── a cascade wake file on the page ───

CASCADE_CONFIRM = 0.5        # the untrained head's score on the alexa recordings is ~0.6-0.7 (its window's peak)


@pytest.fixture(scope="module")
def alexa_mic(tmp_path_factory) -> tuple[Path, np.ndarray]:
    """A real `alexa` after LEAD_S of silence and 2 s after it: what the fake microphone plays
    (48 kHz 16-bit, looped), and the same at 16 kHz."""
    audio, rate = sf.read(ALEXA_CLIP, dtype="float32")
    audio = np.concatenate([np.zeros(int(LEAD_S * rate)), audio, np.zeros(2 * rate)]).astype(np.float32)
    path = tmp_path_factory.mktemp("mic") / "alexa_48k.wav"
    sf.write(path, soxr.resample(audio, rate, MIC_RATE), MIC_RATE, subtype="PCM_16")
    return path, audio


@pytest.mark.browser
@pytest.mark.slow
def test_page_runs_a_cascade_file(chromium, alexa_mic, setup, tmp_path):
    """?model= a wake file whose metadata names a verifier: the page fetches its head from beside
    it and the speech embedding from ../models/speech_embedding/, and logs the wake word the head
    confirms on a real recording through the fake microphone, as app/cascade.py confirms it."""
    from app.cascade import CascadeSpotter
    wake, head, _ = setup
    mic, audio = alexa_mic
    python = CascadeSpotter(wake, head, 0.3, CASCADE_CONFIRM)
    assert python.process(audio).detections + python.flush().detections, "the Python cascade hears the recording"
    root = site(tmp_path / "site", default_model())
    (root / "app" / "models" / "speech_embedding").symlink_to(EMBEDDING_FOLDER)
    cascade_file(wake, head, root / "app" / "models", "w", 0.3, CASCADE_CONFIRM)
    with static_server(root) as url, page_on(chromium, mic, f"{url}/app/web/index.html?model=../models/w.onnx") as page:
        assert page.evaluate("window.rotkws.cascade") and page.locator("#keywords").inner_text() == "alexa"
        assert "a cascade: w.head.onnx confirms at 0.5" in page.locator("#status").inner_text()
        fetched = page.evaluate("performance.getEntriesByType('resource').map((e) => e.name.split('/').pop())")
        assert {"w.onnx", "w.head.onnx", *FILES} <= set(fetched), fetched
        listen(page)
        page.wait_for_function("() => window.rotkws.detections.length > 0", timeout=DETECT_TIMEOUT_MS)
        assert {d["keyword"] for d in page.evaluate("window.rotkws.detections")} == {"alexa"}
        assert page.evaluate("window.rotkws.spotter.hopsEmbedded") > 0 and page.evaluate("window.rotkws.proposals") > 0


@pytest.mark.browser
def test_page_names_a_cascades_missing_head(chromium, setup, tmp_path):
    """A wake file naming a head that is not beside it: the page says which file it expected."""
    from playwright.sync_api import sync_playwright
    wake, head, _ = setup
    root = site(tmp_path / "site", default_model())
    cascade_file(wake, head, root / "app" / "models", "w", 0.3, CASCADE_CONFIRM)
    (root / "app" / "models" / "w.head.onnx").unlink()
    (root / "app" / "models" / "speech_embedding").symlink_to(EMBEDDING_FOLDER)
    with static_server(root) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{url}/app/web/index.html?model=../models/w.onnx")
            page.wait_for_function("() => window.rotkws && window.rotkws.error", timeout=DETECT_TIMEOUT_MS)
            said = page.locator("#status").inner_text()
            expected = r"w\.onnx names \"w\.head\.onnx\" as its verifier: no file at .*w\.head\.onnx \(HTTP 404\)"
            assert re.search(expected, said), said
            assert page.locator("#start").is_disabled()
        finally:
            browser.close()
