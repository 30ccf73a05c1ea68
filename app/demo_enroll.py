"""The demo page's tab "Your own wake word": type a phrase, say it a few times, start; the job
runs as `rotkws enroll` in its own process (app/enroll_jobs.py), the page shows its stage, bar and
estimate from enroll's own counters, then listens for the new wake word with the bundled command
stage, and offers the file.

The visitor's job id is kept in the browser (gr.BrowserState: localStorage), so a reload finds
the job again; the page asks the server for its state every POLL_S.
"""
import html
from dataclasses import dataclass
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pandas as pd

from app.demo_session import PLOT_WINDOW_S, Assistant, WakeSession
from app.enroll_jobs import EnrollJobs, JobError, check_text, torch_missing
from app.spotter import COMMAND_MODEL, KeywordModel
from app.takes import MAX_TAKES, MIN_TAKES, SAMPLE_RATE, TakeError, check_take

POLL_S = 1.0                 # the page asks for its job's state this often
THRESHOLD_RANGE = (0.01, 0.99)   # the new wake word's threshold slider; it starts at the stored one
STAGE_NAMES = {"synthesising": "synthesising the phrase", "sentences": "synthesising sentences",
               "rendering": "rendering the examples", "speech": "rendering real speech",
               "backbone": "running the frozen backbone", "training": "training",
               "threshold": "choosing the threshold on the validation stream"}
JOB_KEY = "rotkws-enroll-job"    # the browser's localStorage key for the visitor's job id

INTRO = f"""## Your own wake word
Type the phrase, say it {MIN_TAKES}–{MAX_TAKES} times into the microphone (optional: without takes
the model learns from synthetic speech alone) and press **Start**. The model trains on this
server in its own process, one job at a time; when it is done this tab listens for it, followed by a
command, and offers the file."""


@dataclass(frozen=True)
class EnrollPage:
    """What the tab shares between visitors: the jobs and the command model."""
    jobs: EnrollJobs
    commands: KeywordModel

    def assistant(self, job_id: str) -> Assistant | None:
        """The new wake word and the command stage, or None while the job has no model."""
        path = self.jobs.model_path(job_id)
        return None if path is None else cached_assistant(str(path), self.commands)


_assistants: dict[str, Assistant] = {}


def cached_assistant(path: str, commands: KeywordModel) -> Assistant:
    """One Assistant per finished model, shared by every visitor listening to it."""
    if path not in _assistants:
        _assistants[path] = Assistant(KeywordModel(path), commands)
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
    """Start a job (outputs: job id, message). The phrase and takes stay on the page either way."""
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
    """The job's state: outputs status, bar, cancel button, result, listener group, threshold and
    `armed` (the job whose listener was set up: its threshold slider is set once, then the
    visitor's)."""
    view = page.jobs.view(job_id)
    if view is None:
        return ("No job yet.", bar_html(None), gr.update(visible=False), "", gr.update(visible=False),
                gr.skip(), None)
    going = view["state"] in ("queued", "running")
    listening = view["state"] == "done"
    threshold = gr.skip()
    if listening and armed != job_id:
        threshold = gr.update(value=page.assistant(job_id).wake.meta["detection"]["threshold"])
    return (status_text(view), bar_html(view), gr.update(visible=going), result_text(view) if listening else "",
            gr.update(visible=listening), threshold, job_id if listening else None)


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
    lines.append(f'<a id="enroll_download" href="{url}" download="{name}">Download {name}</a> · '
                 f'<a id="enroll_web" href="/web/?model=..{url}" target="_blank">run it in the browser (/web/)</a>')
    return "\n\n".join(lines)


def file_name(phrase: str) -> str:
    return "_".join("".join(c for c in w if c.isalnum()) for w in phrase.lower().split()) + ".onnx"


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


# ─── listening for the new wake word ───

def on_listen(page: EnrollPage, chunk, session, threshold: float, job_id: str | None) -> tuple:
    """A microphone piece through the visitor's two-stage spotter on their new wake word."""
    assistant = page.assistant(job_id)
    if assistant is None:
        return None, None, "No wake word of yours yet.", session
    if session is None or session.assistant is not assistant:
        session = WakeSession(assistant)
    session.configure(threshold)
    if chunk is not None and len(chunk[1]):
        try:
            session.feed(chunk[1], chunk[0])
        except ValueError as e:
            session.log.appendleft(f"!! {e}")
    return session.current_scores() or None, pd.DataFrame(session.plot_points()), session.log_text(), session


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
            with gr.Group(visible=False, elem_id="own_listener") as ui.listener:
                listener(ui)
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


def listener(ui: SimpleNamespace) -> None:
    """What enroll measured, the file, and the two-stage listener on it."""
    ui.result = gr.Markdown("", elem_id="enroll_result")
    ui.mic = gr.Audio(sources=["microphone"], streaming=True, type="numpy", elem_id="own_mic",
                      label="Microphone: say your wake word, then a command")
    ui.threshold = gr.Slider(*THRESHOLD_RANGE, value=0.5, step=0.01, elem_id="own_threshold",
                             label="Threshold (wake-word probability to open a command window; "
                                   "starts at the one enroll chose)")
    ui.scores = gr.Label(num_top_classes=5, label="Hearing now", elem_id="own_scores")
    ui.plot = gr.LinePlot(x="time", y="score", color="keyword", y_lim=[0, 1], x_title="time since start (s)",
                          y_title="probability", label=f"Wake word and command scores, last {PLOT_WINDOW_S:g} s",
                          elem_id="own_plot")
    ui.log = gr.Textbox(label="Detections (newest first)", elem_id="own_detections", lines=8, max_lines=8,
                        interactive=False)


def wire(page: EnrollPage, ui: SimpleNamespace, demo: gr.Blocks, stream_every: float, time_limit: float) -> None:
    takes = gr.State([])                                  # the visitor's takes, (samples,) float32 @ 16 kHz
    redo = gr.State(None)                                 # the take the next recording replaces
    listen = gr.State(None)                               # the visitor's WakeSession on their wake word
    job = gr.BrowserState(None, storage_key=JOB_KEY)      # the visitor's job id, kept across reloads
    bind = lambda fn: lambda *args: fn(page, *args)       # noqa: E731
    slots = ui.slots + ui.redo_buttons
    ui.take_mic.stop_recording(on_take, [ui.take_mic, ui.phrase, takes, redo],
                               [takes, redo, ui.take_note, ui.take_mic, *slots], api_visibility="private")
    for i, button in enumerate(ui.redo_buttons):
        button.click(on_redo(i), [takes], [redo, ui.take_note], api_visibility="private")
    ui.start.click(bind(on_start), [ui.phrase, takes, job], [job, ui.note], api_name="enroll")
    ui.cancel.click(bind(on_cancel), [job], [ui.note], api_name="enroll_cancel")
    armed = gr.State(None)                                # the job whose listener is set up
    polled = [ui.status, ui.bar, ui.cancel, ui.result, ui.listener, ui.threshold, armed]
    gr.Timer(POLL_S).tick(bind(on_poll), [job, armed], polled, show_progress="hidden", api_visibility="private")
    demo.load(bind(on_poll), [job, armed], polled, api_visibility="private")
    ui.mic.stream(bind(on_listen), [ui.mic, listen, ui.threshold, job], [ui.scores, ui.plot, ui.log, listen],
                  stream_every=stream_every, time_limit=time_limit, show_progress="hidden",
                  api_visibility="private")
    ui.mic.stop_recording(lambda s: s.clear() if s is not None else None, [listen], None, api_visibility="private")


def build_tab(jobs: EnrollJobs, demo: gr.Blocks, stream_every: float, time_limit: float) -> None:
    """The tab, inside `demo`'s Blocks (called within a `gr.Tab`)."""
    page = EnrollPage(jobs, KeywordModel(COMMAND_MODEL))
    wire(page, layout(page), demo, stream_every, time_limit)
