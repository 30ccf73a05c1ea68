"""The demo page's tab "Your own wake word": type a phrase, say it a few times, start; the job
runs as `rotkws enroll` in its own process (app/enroll_jobs.py), the page shows its stage, bar and
estimate from enroll's own counters; when it is done the page switches to its Listen tab, which
then runs the visitor's new wake word with the bundled command stage, and offers the file.

The visitor's job id is kept in the browser (gr.BrowserState: localStorage), so a reload finds
the job again; the page asks the server for its state every POLL_S. The Listen tab's microphone
serves both (one streaming microphone per page: Gradio 6.31's second one fails to record).
"""
import html
import sys
from types import SimpleNamespace

import gradio as gr
import numpy as np

from app.cascade import verifier_of
from app.demo_controls import plot_colors, slider_start
from app.demo_session import Assistant
from app.embedding import shared_embedding
from app.enroll_jobs import EnrollJobs, JobError, check_text, torch_missing
from app.spotter import COMMAND_MODEL, KeywordModel
from app.takes import MAX_TAKES, MIN_TAKES, TakeError, check_take
from corpus.rate import SAMPLE_RATE

POLL_S = 1.0                 # the page asks for its job's state this often
ARRIVAL_S = 5.0              # … and first this long after it loaded, to find the visitor's job
LISTEN_TAB = "listen"        # the page's tab with the microphone
STAGE_NAMES = {"synthesising": "synthesising the phrase", "sentences": "synthesising sentences",
               "rendering": "rendering the examples", "speech": "rendering real speech",
               "backbone": "running the frozen backbone", "training": "training",
               "threshold": "choosing the threshold on the validation stream (the verifier's heads done first)",
               "verifier": "choosing the verifier's thresholds"}
JOB_KEY = "rotkws-enroll-job"    # the browser's localStorage key for the visitor's job id

INTRO = f"""## Your own wake word
Type the phrase, say it {MIN_TAKES}–{MAX_TAKES} times into the microphone (optional: without takes
the model learns from synthetic speech alone) and press **Start**. The model trains on this
server in its own process, one job at a time; when it is done the **Listen** tab listens for it,
followed by a command, and this tab offers the file."""


class EnrollPage:
    """What the tab shares between visitors: the jobs, the command model, the page's own model
    (`shared`), and the components holding each visitor's job id (`job`) and the finished job
    whose wake word the Listen tab runs for them (`listening`: a gr.State, so the page's API
    endpoints take no more inputs), both made by `wire`."""

    def __init__(self, jobs: EnrollJobs, commands: KeywordModel, shared=None):
        self.jobs, self.commands, self.shared = jobs, commands, shared
        self.job = self.listening = None

    def assistant(self, job_id: str | None) -> Assistant | None:
        """The new wake word and the command stage, or None while the job has no model or its
        model cannot run (`problem` says why)."""
        path = self.jobs.model_path(job_id or "")
        return None if path is None or self.problem(job_id) else cached_assistant(str(path), self.commands)

    def problem(self, job_id: str | None) -> str | None:
        """Why the job's finished model cannot run here (a verifier whose head is missing), said
        with its file names (no server path), or None."""
        path = self.jobs.model_path(job_id or "")
        if path is None:
            return None
        try:
            cached_assistant(str(path), self.commands)
        except ValueError as e:
            return str(e).replace(f"{path.parent}/", "")
        return None

    def served(self, listening: str | None) -> Assistant | None:
        """What the Listen tab runs for the visitor: the wake word of the job they listen with, else None."""
        return self.assistant(listening)


_assistants: dict[str, Assistant | ValueError] = {}


def cached_assistant(path: str, commands: KeywordModel) -> Assistant:
    """One Assistant per finished model, shared by every visitor listening to it; a model with a
    verifier runs as a cascade (its head on the server's one speech embedding). A model that
    cannot run: its ValueError, raised again at every call, the model read once."""
    if path not in _assistants:
        try:
            wake = KeywordModel(path)
            _assistants[path] = Assistant(wake, commands, verifier=verifier_of(wake, shared_embedding()))
        except ValueError as e:
            print(f"rotkws demo: {e}", file=sys.stderr, flush=True)
            _assistants[path] = e
    if isinstance(_assistants[path], ValueError):
        raise _assistants[path]
    return _assistants[path]


# ─── the takes ───

def take_views(takes: list) -> list:
    """The take slots (audio, then re-record buttons): the takes recorded, the others hidden."""
    audio = [gr.update(value=(SAMPLE_RATE, pcm16(takes[i])) if i < len(takes) else None, visible=i < len(takes))
             for i in range(MAX_TAKES)]
    buttons = [gr.update(visible=i < len(takes)) for i in range(MAX_TAKES)]
    return audio + buttons


def pcm16(audio: np.ndarray) -> np.ndarray:
    return np.round(np.clip(audio, -1, 1) * 32767).astype(np.int16)


def on_take(recorded, phrase: str, takes: list | None, redo: int | None) -> tuple:
    """A take just recorded: checked, then added (or put in place of the one being re-recorded).
    Outputs: takes, redo, the message, the recorder (emptied), the slots."""
    takes = list(takes or [])
    if recorded is None:
        return (takes, redo, gr.skip(), gr.skip(), *take_views(takes))
    try:
        audio = check_take(recorded[1], recorded[0], check_text(phrase))
    except (TakeError, JobError, ValueError) as e:
        return (takes, redo, f"Take refused: {e}", None, *take_views(takes))
    if redo is not None and redo < len(takes):
        takes[redo], said = audio, f"Take {redo + 1} recorded again."
    elif len(takes) >= MAX_TAKES:
        return (takes, None, f"{MAX_TAKES} takes is the most: re-record one instead.", None, *take_views(takes))
    else:
        takes.append(audio)
        said = f"Take {len(takes)} recorded ({len(audio) / SAMPLE_RATE:.1f} s)."
    return (takes, None, said, None, *take_views(takes))


def on_redo(index: int):
    """A take's re-record button: the next recording replaces it."""
    return lambda takes: (index, f"Recording take {index + 1} again: press record, say the phrase, press stop.")


# ─── the job ───

def on_start(page: EnrollPage, phrase: str, takes: list | None, job_id: str | None) -> tuple:
    """Start a job (outputs: job id, message, the poll timer). The phrase and takes stay on the
    page either way."""
    job_id, said = start_job(page, phrase, takes, job_id)
    return job_id, said, gr.Timer(active=page.jobs.view(job_id) is not None)


def start_job(page: EnrollPage, phrase: str, takes: list | None, job_id: str | None) -> tuple[str | None, str]:
    takes = list(takes or [])
    missing = torch_missing()
    if missing:
        return job_id, f"**Cannot enroll on this server:** {missing}"
    current = page.jobs.view(job_id)
    if current and current["state"] in ("queued", "running"):
        return job_id, "Your job is still going: cancel it first to start another."
    if 0 < len(takes) < MIN_TAKES:
        return job_id, f"Record at least {MIN_TAKES} takes (you have {len(takes)}), or none for text alone."
    try:
        job = page.jobs.submit(phrase, takes)
    except JobError as e:
        return job_id, f"**Not started:** {e}"
    return job.id, f"Started a job for {job.phrase!r} with {job.takes} takes."


def on_cancel(page: EnrollPage, job_id: str | None) -> str:
    if job_id and page.jobs.cancel(job_id):
        return "Cancelling…"
    return "No job of yours is running."


def on_poll(page: EnrollPage, job_id: str | None, armed: str | None) -> tuple:
    """The job's state: outputs status, bar, cancel button, result, `armed` (the finished job the
    Listen tab was switched to, once), the poll timer (running while the job is), then the Listen
    tab's switch: tabs, own toggle, threshold, plot, the job the Listen tab runs."""
    view = page.jobs.view(job_id)
    problem = page.problem(job_id)
    listening = view is not None and view["state"] == "done" and problem is None
    switch = listen_with(page, job_id, view["phrase"]) if listening and armed != job_id else (
        listen_without(page) if not listening and armed else (gr.skip(),) * 5)
    if view is None:
        return ("No job yet.", bar_html(None), gr.update(visible=False), "", None, gr.Timer(active=False), *switch)
    going = view["state"] in ("queued", "running")
    said = f"**{view['phrase']}**: done, but its model cannot run here: {problem}" if problem else status_text(view)
    return (said, bar_html(view), gr.update(visible=going), result_text(view) if listening else "",
            job_id if listening else None, gr.Timer(active=going), *switch)


def on_load(page: EnrollPage, job_id: str | None, arrived: bool = True) -> tuple:
    """A visitor arrives (or reloads: `arrived`, the arrival timer's tick) or opens this tab: their
    job's line and bar, the poll timer started while there is a job to follow or a finished one to
    switch to, the arrival timer stopped. Not at page load: an event then delays the loading of the
    Listen tab's recorder, and a Record pressed before it is there records nothing (Gradio 6.31).
    The tab opened just after a reload may come before the browser has read back the job's id:
    finding none then leaves the arrival timer to look again."""
    view, once = page.jobs.view(job_id), gr.Timer(active=False)
    if view is None:
        return ("No job yet.", bar_html(None), gr.update(visible=False), gr.Timer(active=False),
                once if arrived else gr.skip())
    going = view["state"] in ("queued", "running")
    return (status_text(view), bar_html(view), gr.update(visible=going),
            gr.Timer(active=going or view["state"] == "done"), once)


def listen_with(page: EnrollPage, job_id: str, phrase: str) -> tuple:
    """The Listen tab selected, running the visitor's wake word: its toggle ticked and shown, the
    threshold slider at the threshold enroll stored, the plot's colours for its series."""
    assistant = page.assistant(job_id)
    toggle = gr.update(value=True, visible=True, label=own_label(phrase))
    return (gr.Tabs(selected=LISTEN_TAB), toggle, gr.update(value=slider_start(assistant)[0]),
            gr.update(color_map=plot_colors(assistant)), job_id)


def listen_without(page: EnrollPage) -> tuple:
    """The Listen tab back on the page's own model (the visitor's job is gone or not done)."""
    return (gr.skip(), gr.update(value=False, visible=False), *shared_controls(page), None)


def shared_controls(page: EnrollPage) -> tuple:
    return gr.update(value=slider_start(page.shared)[0]), gr.update(color_map=plot_colors(page.shared))


def on_toggle(page: EnrollPage, job_id: str | None, use_own: bool) -> tuple:
    """The visitor ticked or unticked their wake word: the threshold slider and the plot follow
    (outputs: threshold, plot, the job the Listen tab runs)."""
    listening = job_id if use_own and page.assistant(job_id) else None
    runs = page.served(listening) or page.shared
    return gr.update(value=slider_start(runs)[0]), gr.update(color_map=plot_colors(runs)), listening


def own_label(phrase: str) -> str:
    return f"Listen for your wake word \u201c{phrase}\u201d, then a command (untick: the page's own model)"


def own_toggle() -> gr.Checkbox:
    """The Listen tab's switch to the visitor's own wake word, shown once they have one."""
    return gr.Checkbox(False, visible=False, label=own_label(""), elem_id="use_own")


def status_text(view: dict) -> str:
    """One line: the job's place in the queue, its stage and estimate, or how it ended."""
    phrase = view["phrase"]
    if view["state"] == "queued":
        ahead = view["place"]
        jobs = f"{ahead} job{'s' * (ahead != 1)}"
        return f"**{phrase}**: waiting, place {ahead + 1} in the queue ({jobs} ahead of yours)."
    if view["state"] == "running":
        stage = STAGE_NAMES.get(view["stage"], view["stage"] or "starting")
        eta = f", about {duration(view['eta_s'])} left in this stage" if view["eta_s"] is not None else ""
        percent = f" {view['percent']} %" if view["percent"] is not None else ""
        return f"**{phrase}**: {stage}{percent}{eta}."
    if view["state"] == "done":
        return f"**{phrase}**: done in {duration(view['finished'] - view['started'])}. Listening below."
    return f"**{phrase}**: {view['state']}: {view['message']}"


def bar_html(view: dict | None) -> str:
    """The stage's bar: a <progress> with enroll's percent (indeterminate while a stage has no count)."""
    if view is None or view["state"] == "queued":
        return bar(0, "")
    if view["state"] == "done":
        return bar(100, "done")
    return bar(view["percent"], view["stage"] or "")


def bar(percent: int | None, stage: str) -> str:
    value = "" if percent is None else f' value="{percent}"'
    return f'<progress max="100"{value} data-stage="{html.escape(stage)}" style="width:100%"></progress>'


def result_text(view: dict) -> str:
    """What enroll measured, the takes its model does not detect, and the file's links."""
    r = view["result"]
    rate = r["validation_stream_false_accepts"] / max(r["validation_stream_hours"], 1e-9)
    lines = [f"Threshold **{r['threshold']}**, chosen for at most {r['fa_per_hour']:g} false accepts per "
             f"hour: at it, the validation stream ({r['validation_stream_hours']:g} h of real speech and "
             f"noise) had {r['validation_stream_false_accepts']} false accepts ({rate:.1f} per hour)."]
    if view["undetected"]:
        takes = ", ".join(map(str, view["undetected"]))
        lines.append(f"**Not detected by the new model: take {takes}.** Was it the phrase?")
    name = html.escape(file_name(view["phrase"]))
    url = f"/enrolled/{view['id']}.onnx"
    verifier = r.get("verifier")
    if verifier:                         # a cascade: the page at /web/ fetches the head beside the wake file
        lines.append(f"A cascade: the wake file proposes at {verifier['propose']}, its head on the speech "
                     f"embedding confirms at {verifier['confirm']}.")
        head = html.escape(verifier["head"])
        links = (f'<a id="enroll_download" href="{url}" download="{name}">Download {name}</a> and '
                 f'<a id="enroll_head" href="/enrolled/{view["id"]}/{head}" download="{head}">its head, '
                 f'{head}</a> (keep it beside the wake file under that name: the wake file names it)')
        web = f"/enrolled/{view['id']}/model.onnx"
    else:
        links, web = f'<a id="enroll_download" href="{url}" download="{name}">Download {name}</a>', url
    lines.append(f'{links} · <a id="enroll_web" href="/web/?model=..{web}" target="_blank">run it in the '
                 'browser (/web/)</a>')
    return "\n\n".join(lines)


def file_name(phrase: str) -> str:
    return "_".join("".join(c for c in w if c.isalnum()) for w in phrase.lower().split()) + ".onnx"


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


# ─── the tab ───

def layout(page: EnrollPage) -> SimpleNamespace:
    """The components: the phrase and the takes on the left, the job and then the listener on the right."""
    ui = SimpleNamespace()
    gr.Markdown(INTRO)
    missing = torch_missing()
    if missing:
        gr.Markdown(f"**Cannot enroll on this server:** {missing}", elem_id="enroll_missing")
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            takes_column(ui)
        with gr.Column(scale=2, min_width=420):
            ui.note = gr.Markdown("", elem_id="enroll_note")
            ui.status = gr.Markdown("No job yet.", elem_id="enroll_status")
            ui.bar = gr.HTML(bar_html(None), elem_id="enroll_bar")
            ui.result = gr.Markdown("", elem_id="enroll_result")
    return ui


def takes_column(ui: SimpleNamespace) -> None:
    """The phrase, the recorder, MAX_TAKES take slots (hidden until recorded), start and cancel."""
    ui.phrase = gr.Textbox(label="Wake phrase", placeholder="e.g. hey computer", elem_id="phrase", max_lines=1)
    ui.take_mic = gr.Audio(sources=["microphone"], type="numpy", elem_id="take_mic",
                           label=f"Say it ({MIN_TAKES}–{MAX_TAKES} takes, one at a time; optional)")
    ui.take_note = gr.Markdown("", elem_id="take_note")
    ui.slots, ui.redo_buttons = [], []
    for i in range(MAX_TAKES):
        with gr.Row():
            ui.slots.append(gr.Audio(label=f"Take {i + 1}", type="numpy", interactive=False, visible=False,
                                     elem_id=f"take{i + 1}", scale=4))
            ui.redo_buttons.append(gr.Button("Re-record", visible=False, elem_id=f"redo{i + 1}", scale=1, size="sm"))
    with gr.Row():
        ui.start = gr.Button("Start", variant="primary", elem_id="enroll_start")
        ui.cancel = gr.Button("Cancel", visible=False, elem_id="enroll_cancel")


def wire(page: EnrollPage, ui: SimpleNamespace, tab: gr.Tab, tabs: gr.Tabs, own: gr.Checkbox,
         listen: SimpleNamespace) -> None:
    """The tab's events; `listen`: the Listen tab's components it switches (threshold, plot)."""
    takes = gr.State([])                                  # the visitor's takes, (samples,) float32 @ 16 kHz
    redo = gr.State(None)                                 # the take the next recording replaces
    armed = gr.State(None)                                # the finished job the Listen tab was switched to
    page.job = job = gr.BrowserState(None, storage_key=JOB_KEY)   # the visitor's job id, across reloads
    page.listening = gr.State(None)                       # the finished job the Listen tab runs
    bind = lambda fn: lambda *args: fn(page, *args)       # noqa: E731
    slots = ui.slots + ui.redo_buttons
    ui.take_mic.stop_recording(on_take, [ui.take_mic, ui.phrase, takes, redo],
                               [takes, redo, ui.take_note, ui.take_mic, *slots], api_visibility="private")
    for i, button in enumerate(ui.redo_buttons):
        button.click(on_redo(i), [takes], [redo, ui.take_note], api_visibility="private")
    timer = gr.Timer(POLL_S, active=False)                # runs while the visitor's job does
    ui.start.click(bind(on_start), [ui.phrase, takes, job], [job, ui.note, timer], api_name="enroll")
    ui.cancel.click(bind(on_cancel), [job], [ui.note], api_name="enroll_cancel")
    polled = [ui.status, ui.bar, ui.cancel, ui.result, armed, timer, tabs, own, listen.threshold, listen.plot,
              page.listening]
    timer.tick(bind(on_poll), [job, armed], polled, show_progress="hidden", api_visibility="private")
    arrival = gr.Timer(ARRIVAL_S)                         # once, after the page has loaded: the visitor's job
    found = [ui.status, ui.bar, ui.cancel, timer, arrival]
    arrival.tick(bind(on_load), [job], found, show_progress="hidden", api_visibility="private")
    tab.select(lambda job_id: on_load(page, job_id, arrived=False), [job], found, show_progress="hidden",
               api_visibility="private")
    own.input(bind(on_toggle), [job, own], [listen.threshold, listen.plot, page.listening], api_visibility="private")


def build_tab(jobs: EnrollJobs, tab: gr.Tab, shared, tabs: gr.Tabs, own: gr.Checkbox,
              listen: SimpleNamespace) -> EnrollPage:
    """The tab's content (called within `tab`); `shared`: the page's own model."""
    page = EnrollPage(jobs, KeywordModel(COMMAND_MODEL), shared)
    wire(page, layout(page), tab, tabs, own, listen)
    return page
