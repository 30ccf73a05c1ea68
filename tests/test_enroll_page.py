"""The demo page's tab "Your own wake word" in Debian's Chromium: a phrase typed, three takes
recorded from the fake microphone (a real recording of the phrase from the shared data), a job
with a tiny budget followed through its stages to the listener, the file downloaded and loaded by
the in-browser runtime; two visitors queued, a reload, a cancel; bad input's messages.

The tiny budget (two training steps) makes a model that cannot be trusted to detect anything, so
the listening test checks the pipeline, not the model: when the job is done the page switches to
its Listen tab running the new file (the toggle names the phrase, the threshold slider stands at
the threshold enroll stored), the microphone's audio is scored by it, and at the lowest threshold
the page offers, its wake word (the new phrase, by name) opens a command window in the log. Without
Chromium, PyTorch, espeak-ng or the shared data the tests skip with the reason; under CI they fail.
"""
import re
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
import soxr

from app.demo import THRESHOLD_RANGE
from app.takes import check_take
from demo_client import DemoServer
from corpus.clips import read_audio
from test_browser import CHROMIUM_ARGS, chromium  # noqa: F401 (fixture)
from test_enroll_jobs import TINY_BUDGET, require_enroll
from training.progress import STAGES

pytestmark = [pytest.mark.browser, pytest.mark.slow]

PHRASE = "alexa"
MIC_RATE = 48_000
LEAD_S, TAIL_S = 1.0, 1.0         # silence around the recording the fake microphone plays
TAKE_S = 3.5                      # how long each take is recorded
TAKES = 3
JOB_TIMEOUT_MS = 600_000          # a tiny job: ~45 s alone on 2 cores, over 5 min beside other runs
STEP_MS = 250                     # how often the test looks at the bar
DETECT_TIMEOUT_MS = 40_000
ORT_CDN = "https://cdn.jsdelivr.net/**"   # /web/'s fallback for onnxruntime-web, blocked here
LOWEST = THRESHOLD_RANGE[0]       # the lowest threshold the page's slider offers


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    """A real `alexa` recording (the first even-numbered one the page takes as a take) at 48 kHz
    between LEAD_S and TAIL_S of silence: what the fake microphone plays, in a loop."""
    folder = require_enroll() / "wakeword_benchmark_dev" / PHRASE
    for path in sorted(folder.glob("*.flac"), key=lambda p: int(p.stem))[::2]:
        try:
            audio, rate = read_audio(path)
            check_take(audio, rate, PHRASE)
        except ValueError:
            continue
        mic = np.concatenate([np.zeros(int(LEAD_S * MIC_RATE)), soxr.resample(audio, rate, MIC_RATE),
                              np.zeros(int(TAIL_S * MIC_RATE))])
        out = tmp_path_factory.mktemp("mic") / f"{PHRASE}_{path.stem}_48k.wav"
        sf.write(out, mic, MIC_RATE, subtype="PCM_16")
        return out
    pytest.fail(f"no recording in {folder} passes the page's take checks")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`rotkws demo` whose jobs run enroll with the tiny budget, in a folder of the test's own."""
    jobs = tmp_path_factory.mktemp("jobs")
    command = [sys.executable, "-m", "rotkws", "demo", "--jobs", str(jobs), "--enroll-args",
               " ".join(TINY_BUDGET + ["--no-verifier"])]    # heads trained two steps confirm nothing
    with DemoServer(command=command) as url:
        yield url


@pytest.fixture
def browser(chromium, recording):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(chromium),
                                     args=CHROMIUM_ARGS + [f"--use-file-for-fake-audio-capture={recording}"])
        try:
            yield launched
        finally:
            launched.close()


def enroll_tab(context, url: str):
    """A new page of the demo in `context` (one visitor), on the enroll tab."""
    tab = context.new_page()
    tab.set_viewport_size({"width": 1280, "height": 1400})
    tab.route(ORT_CDN, lambda route: route.abort())
    tab.goto(url)
    tab.get_by_role("tab", name="Your own wake word").click()
    tab.locator("#enroll_status").wait_for()
    return tab


def status(tab) -> str:
    return tab.locator("#enroll_status").inner_text()


def wait_status(tab, pattern: str, timeout_ms: int = JOB_TIMEOUT_MS) -> str:
    tab.wait_for_function("([sel, p]) => new RegExp(p).test(document.querySelector(sel).innerText)",
                          arg=["#enroll_status", pattern], timeout=timeout_ms)
    return status(tab)


def wait_text(tab, selector: str, text: str, timeout_ms: int = 30_000) -> str:
    tab.wait_for_function("([sel, t]) => document.querySelector(sel).innerText.includes(t)",
                          arg=[selector, text], timeout=timeout_ms)
    return tab.locator(selector).inner_text()


def record_take(tab, n: int) -> None:
    tab.locator("#take_mic").get_by_role("button", name="Record").click()
    tab.wait_for_timeout(int(TAKE_S * 1000))
    tab.locator("#take_mic").get_by_role("button", name="Stop").click()
    tab.locator(f"#take{n}").wait_for(state="visible")


def start(tab, phrase: str) -> None:
    """Type the phrase and press Start (on the enroll tab: a finished job switches to Listen)."""
    tab.get_by_role("tab", name="Your own wake word").click()
    tab.locator("#phrase textarea, #phrase input").first.fill(phrase)
    tab.locator("#enroll_start").click()


def watch(tab) -> list[tuple[str, str]]:
    """(stage, bar value) as the page shows them every STEP_MS, until the job is done."""
    seen, deadline = [], time.monotonic() + JOB_TIMEOUT_MS / 1000
    while "done in" not in status(tab):
        assert time.monotonic() < deadline and not re.search(r"failed|lost", status(tab)), status(tab)
        bar = tab.locator("#enroll_bar progress")
        seen.append((bar.get_attribute("data-stage"), bar.get_attribute("value")))
        tab.wait_for_timeout(STEP_MS)
    return seen


def test_type_say_start_then_the_page_listens_with_the_new_wake_word(browser, server):
    context = browser.new_context()
    tab = enroll_tab(context, server)
    tab.locator("#phrase textarea, #phrase input").first.fill(PHRASE)
    for n in range(1, TAKES + 1):
        record_take(tab, n)
        wait_text(tab, "#take_note", f"Take {n} recorded")
    assert tab.locator("#redo2").is_visible()
    start(tab, PHRASE)
    wait_text(tab, "#enroll_note", f"with {TAKES} takes")
    seen = watch(tab)
    stages = list(dict.fromkeys(s for s, _ in seen if s))     # a stage of a tenth of a second may pass unseen
    assert {"synthesising", "threshold"} <= set(stages), seen                     # the stages moved …
    known = [s for s in stages if s in STAGES]
    assert known == sorted(known, key=STAGES.index), seen                       # … in enroll's order …
    assert len({v for s, v in seen if s == "synthesising"}) >= 2 or len(stages) >= 4, seen   # … and the bar
    assert "Listening below" in status(tab)
    result = tab.locator("#enroll_result").inner_text()
    assert re.search(r"Threshold 0\.\d+.*validation stream \([\d.]+ h.*\d+ false accepts \([\d.]+ per hour\)",
                     result, re.S), result

    # the page switches to its Listen tab, which now runs the new wake word and the command stage
    toggle = tab.locator("#use_own input[type=checkbox]")
    toggle.wait_for(state="visible")
    assert toggle.is_checked() and PHRASE in tab.locator("#use_own").inner_text()
    assert tab.locator("#mic").is_visible(), "the page did not switch to the Listen tab"
    stored = float(re.search(r"Threshold (0\.\d+)", result).group(1))
    assert float(tab.locator("#threshold input[type=number]").input_value()) == stored
    tab.locator("#threshold input[type=number]").fill(str(LOWEST))         # the lowest the page offers
    tab.locator("#threshold input[type=number]").press("Enter")
    tab.locator("#mic").get_by_role("button", name="Record").click()
    log = tab.wait_for_function("() => { const v = document.querySelector('#detections textarea').value;"
                                " return v.includes('wake word') && v; }", timeout=DETECT_TIMEOUT_MS).json_value()
    assert re.search(rf"t=\s*[\d.]+ s\s+{PHRASE}\s+[\d.]+\s+wake word: listening", log), log
    tab.locator("#plot svg").first.wait_for(timeout=DETECT_TIMEOUT_MS)          # the score plot drew
    tab.locator("#mic").get_by_role("button", name="Stop").click()
    tab.get_by_role("tab", name="Your own wake word").click()

    # the file: downloaded, the same bytes the server keeps, and the in-browser runtime loads it
    with tab.expect_download() as download:
        tab.locator("#enroll_download").click()
    assert download.value.suggested_filename == f"{PHRASE}.onnx"
    got = Path(download.value.path()).read_bytes()
    served = httpx.get(server + tab.locator("#enroll_download").get_attribute("href"))
    assert served.status_code == 200 and got == served.content and len(got) > 10_000
    web = context.new_page()
    web.route(ORT_CDN, lambda route: route.abort())                  # onnxruntime-web from the demo itself
    web.goto(server + tab.locator("#enroll_web").get_attribute("href"))
    web.wait_for_function("() => window.rotkws && (window.rotkws.spotter || window.rotkws.error)")
    assert web.evaluate("window.rotkws.error") is None, web.locator("#status").inner_text()
    assert web.locator("#keywords").inner_text() == PHRASE
    context.close()


def test_a_second_visitor_waits_in_the_queue_both_finish_and_a_cancel_frees_the_slot(browser, server):
    first, second = browser.new_context(), browser.new_context()     # two visitors: own storage each
    a, b = enroll_tab(first, server), enroll_tab(second, server)
    start(a, PHRASE)
    wait_status(a, "alexa: ")
    start(b, "hey computer")
    assert re.search(r"waiting, place 2 in the queue \(1 job ahead", wait_status(b, "waiting")), status(b)
    a.reload()                                                          # a reload finds the job again
    a.get_by_role("tab", name="Your own wake word").click()
    wait_status(a, "^alexa: (starting|synthesising|rendering|training|choosing|done)")
    wait_status(a, "done in")
    wait_status(b, "hey computer.*done in")
    for visitor in (a, b):                                              # each on their own wake word
        visitor.locator("#use_own").wait_for(state="visible")
    assert "alexa" in a.locator("#use_own").inner_text() and "hey computer" in b.locator("#use_own").inner_text()
    start(a, PHRASE)                                                    # again: a runs, b waits
    wait_status(a, "^alexa: (starting|synthesising|rendering|training|choosing)")
    start(b, "hey computer")
    wait_status(b, "place 2 in the queue")
    a.locator("#enroll_cancel").click()
    assert "cancelled" in wait_status(a, "cancelled", timeout_ms=30_000)
    wait_status(b, "^hey computer: (starting|synthesising|rendering|training|choosing)", timeout_ms=30_000)   # free
    b.locator("#enroll_cancel").click()
    wait_status(b, "cancelled", timeout_ms=30_000)
    first.close()
    second.close()


@pytest.mark.parametrize("phrase, says", [
    ("", "the phrase is empty"), ("?! …", "has no letter or digit"),
    ("a wake phrase that goes on for far too long", "43 characters long"),
])
def test_a_phrase_that_cannot_be_a_wake_phrase_is_refused_on_the_page(browser, server, phrase, says):
    tab = enroll_tab(browser.new_context(), server)
    start(tab, phrase)
    assert "Not started" in wait_text(tab, "#enroll_note", says)
    assert tab.locator("#phrase textarea, #phrase input").first.input_value() == phrase   # nothing lost
