"""`rotkws demo`: a Gradio page that listens to the microphone and shows what it hears.

    rotkws demo [--model M] [--host 127.0.0.1] [--port 7860]
    rotkws demo --wake W.onnx [--commands C.onnx] [--wake-keywords K,…]   # a wake word, then a command

The page streams the microphone to the server (`gr.Audio(streaming=True)`: browsers send
48 kHz int16 in pieces of STREAM_EVERY_S); each piece goes through the visitor's own
`DemoSession` (app/demo_session.py), which holds their spotter; one ONNX model is shared by all.
With --wake the page is a two-stage assistant (app/twostage.py): each visitor's `WakeSession`
listens for the wake word, then for a command in the window it opens; the two models are
shared by all. A wake file whose metadata names a verifier runs as a cascade, with --wake
(app/twostage_cascade.py) or --model (app/keyword_cascade.py): its head, on the one speech
embedding, confirms each wake word.
A file upload runs the same path over a file. `app/web/`, where present, is served at /web.
"""
import argparse
import shlex
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pandas as pd

from app import demo_enroll
from app.cascade import verifier_of
from app.demo_controls import THRESHOLD_RANGE, Served, plot_colors, slider_start, slider_threshold
from app.demo_session import GAIN_RANGE_DB, PLOT_WINDOW_S, Assistant, DemoSession, WakeSession, new_session
from app.detect_cli import keyword_list
from app.embedding import FILES as EMBEDDING_FILES, FOLDER as EMBEDDING_FOLDER, shared_embedding
from app.enroll_jobs import EnrollJobs, JobsInUse
from app.keyword_cascade import served_model, slider_what
from app.spotter import COMMAND_MODEL, DEFAULT_MODEL, KeywordModel, ModelError, listened
from app.twostage import WINDOW_S

HOST = "127.0.0.1"           # loopback unless told otherwise (--host 0.0.0.0 in the container)
PORT = 7860
MAX_FILE_BYTES = 20 * 2**20  # uploads above 20 MB are refused by the server (HTTP 413)
STREAM_EVERY_S = 0.5         # the browser sends the microphone in pieces of this length
MAX_LISTENERS = 64           # visitors streaming at once: a recording holds one slot until it stops
STREAM_TIME_LIMIT_S = 1800   # a recording stops after 30 min, so a forgotten tab frees its slot
FILE_WORKERS = 2             # files scored at once (each is a burst of CPU)
SESSION_TTL_S = 3600         # a visitor's spotter is dropped after an hour without audio
CACHE_SWEEP = (60, 300)      # every 60 s, delete uploads older than 300 s: each 0.5 s microphone
                             # piece arrives as a file (~48 KB), ~350 MB per visitor-hour if kept
WEB_DIR = Path(__file__).resolve().parent / "web"   # static files served at /web when present
ORT_WEB_DIR = WEB_DIR.parents[1] / "node_modules" / "onnxruntime-web" / "dist"   # `npm ci`'s, when there
ORT_WEB_URL = "/node_modules/onnxruntime-web/dist"   # … served here: /web/'s first place to look
JOBS_DIR = Path.home() / ".cache" / "rotkws" / "enroll-jobs"   # the enroll tab's jobs (--jobs)
CSS = "#detections textarea { font-family: ui-monospace, monospace; }"

INTRO = """# rotkws: keyword spotting with RotRNN
Press **Record**, allow the microphone and say one of: {keywords}.
Scores update live; detections are logged below with the time they were heard."""

INTRO_WAKE = """# rotkws: a wake word, then a command
Press **Record**, allow the microphone and say {wake}, then a command: {commands}.
The wake word opens a {window:g}-second window in which the command model listens (the grey line
on the plot, at the score a command must reach); the log shows each wake word and the command
heard after it."""


# ─── handlers: (inputs…, session) → (scores, plot, log, latency, session) ───

def views(session: DemoSession) -> tuple:
    """What the page shows of a session, in the order of the handlers' outputs."""
    plot = pd.DataFrame(session.plot_points())
    return session.current_scores() or None, plot, session.log_text(), session.latency_text(), session


def configured(model: Served, session, threshold: float | None, gain_db: float, keywords) -> DemoSession:
    """The visitor's session (a new one on the first event) with the controls' values; no keyword
    ticked → a warning (once, not at every piece), and the ones listened for before stay."""
    threshold = slider_threshold(model, threshold)
    session = session if runs_on(session, model) else new_session(model, threshold)
    try:
        session.configure(threshold, gain_db, keywords)
    except ValueError as e:
        if not (session.log and session.log[0] == f"!! {e}"):
            warn(session, e)
        session.configure(threshold, gain_db)
    return session


def runs_on(session: DemoSession | None, model: Served) -> bool:
    """Whether the visitor's session runs `model` (the page's, or the visitor's own wake word)."""
    if session is None:
        return False
    return session.assistant is model if isinstance(session, WakeSession) else session.model is model


def on_chunk(model: Served, chunk, session, threshold: float | None, gain_db: float, keywords=None) -> tuple:
    """One microphone piece, `chunk` = (sample_rate, int16 (n,) or (n, ch)), as Gradio gives it."""
    session = configured(model, session, threshold, gain_db, keywords)
    if chunk is not None and len(chunk[1]):
        try:
            session.feed(chunk[1], chunk[0])
        except ValueError as e:                  # the runtime's word on audio it cannot take
            warn(session, e)
    return views(session)


def on_file(model: Served, path, session, threshold: float | None, gain_db: float, keywords=None) -> tuple:
    """An uploaded file through the streaming path; a file that is not audio → a warning."""
    session = configured(model, session, threshold, gain_db, keywords)
    if path:
        try:
            session.feed_file(path)
        except ValueError as e:
            warn(session, e)
    return views(session)


def warn(session: DemoSession, error: Exception) -> None:
    """A message on the page (a toast and the log); the server keeps serving."""
    session.log.appendleft(f"!! {error}")
    gr.Warning(str(error))


def on_clear(model: Served, session, threshold: float | None, gain_db: float, keywords=None) -> tuple:
    session = session if runs_on(session, model) else new_session(model, slider_threshold(model, threshold))
    session.clear()
    session.log.clear()
    session.timings.clear()
    return views(session)


def on_stop(session) -> None:
    """Recording stopped: the next recording starts from a fresh state (the log stays)."""
    if session is not None:
        session.clear()


# ─── the page ───

def build_demo(model: Served | None = None, jobs: EnrollJobs | None = None) -> gr.Blocks:
    """The page on `model` (default: the bundled DEFAULT_MODEL) or on a wake word and its
    commands (an Assistant), shared by every visitor; with `jobs`, a second tab makes a wake
    word of the visitor's own (app/demo_enroll.py)."""
    model = model if model is not None else KeywordModel()
    with gr.Blocks(title="rotkws demo", analytics_enabled=False, delete_cache=CACHE_SWEEP) as demo:
        session = gr.State(None, time_to_live=SESSION_TTL_S)     # the visitor's DemoSession
        with gr.Tabs() as tabs:
            with gr.Tab("Listen", id=demo_enroll.LISTEN_TAB, elem_id="tab_listen"):
                own = demo_enroll.own_toggle() if jobs is not None else None
                ui = layout(model)
            if jobs is None:
                wire(model, session, ui)
            else:
                with gr.Tab("Your own wake word", id="enroll", elem_id="tab_enroll") as tab:
                    page = demo_enroll.build_tab(jobs, tab, model, tabs, own, ui)
                wire(model, session, ui, ([page.listening], page.served))
    return demo


def layout(model: Served) -> SimpleNamespace:
    """The components: controls on the left, what the spotter hears on the right."""
    gr.Markdown(intro(model))
    wake = isinstance(model, Assistant)
    listen = model.commands.keywords if wake else model.keywords
    ui = SimpleNamespace()
    operating_point, per_keyword = slider_start(model)
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            ui.mic = gr.Audio(sources=["microphone"], streaming=True, type="numpy",
                              label="Microphone", elem_id="mic")
            ui.upload = gr.Audio(sources=["upload"], type="filepath",
                                 label="Or run an audio file through the same path", elem_id="upload")
            note = (f" · starts at the model's per keyword ({per_keyword}); moving it sets one for all"
                    if per_keyword else "")
            what = "wake-word probability to open a command window" if wake else "keyword probability to detect"
            if getattr(model, "verifier", None) is not None:          # a cascade: its head confirms
                what = slider_what(model.verifier, wake)
            ui.threshold = gr.Slider(*THRESHOLD_RANGE, value=operating_point, step=0.01,
                                     label=f"Threshold ({what}{note})", elem_id="threshold")
            ui.gain = gr.Slider(*GAIN_RANGE_DB, value=0.0, step=1.0,
                                label="Sensitivity (input gain, dB)", elem_id="sensitivity")
            ui.keywords = gr.CheckboxGroup(list(listen), value=list(listen), elem_id="listen",
                                           label=f"Listen for{' commands' if wake else ''} (the others never fire)")
            ui.clear = gr.Button("Clear", elem_id="clear")
        with gr.Column(scale=2, min_width=420):
            ui.scores = gr.Label(num_top_classes=5, label="Hearing now", elem_id="scores")
            title = "Wake word and command scores" if wake else "Keyword scores"
            ui.plot = gr.LinePlot(x="time", y="score", color="keyword", y_lim=[0, 1], color_map=plot_colors(model),
                                  x_title="time since start (s)", y_title="probability",
                                  label=f"{title}, last {PLOT_WINDOW_S:g} s", elem_id="plot")
            ui.log = gr.Textbox(label="Detections (newest first)", elem_id="detections",
                                lines=8, max_lines=8, interactive=False)
            ui.latency = gr.Markdown("Waiting for audio.", elem_id="latency")
    return ui


def intro(model: Served) -> str:
    """What the page asks the visitor to say."""
    if not isinstance(model, Assistant):
        return INTRO.format(keywords=", ".join(f"*{k}*" for k in model.keywords))
    return INTRO_WAKE.format(wake=" or ".join(f"*{k}*" for k in model.wake_words), window=model.spotter().window_s,
                             commands=", ".join(f"*{k}*" for k in model.commands.keywords))


def wire(model: Served, session: gr.State, ui: SimpleNamespace, own: tuple = ((), lambda: None)) -> None:
    """The events: every handler gets the model it runs for this visitor, their session and the
    controls. own = (components, pick): pick(*their values) is the visitor's own wake word and
    the command stage (an Assistant: app/demo_enroll.py), or None for the page's shared model."""
    extra, pick = list(own[0]), own[1]

    def bind(fn):
        def handler(*args):
            split = len(args) - len(extra)
            return fn(pick(*args[split:]) or model, *args[:split])
        return handler

    inputs = [session, ui.threshold, ui.gain, ui.keywords]
    outputs = [ui.scores, ui.plot, ui.log, ui.latency, session]
    ui.mic.stream(bind(on_chunk), [ui.mic, *inputs, *extra], outputs, api_name="stream",
                  stream_every=STREAM_EVERY_S, time_limit=STREAM_TIME_LIMIT_S,
                  concurrency_limit=MAX_LISTENERS, show_progress="hidden")
    ui.mic.stop_recording(on_stop, [session], None, api_visibility="private")
    ui.upload.upload(bind(on_file), [ui.upload, *inputs, *extra], outputs, api_name="file",
                     concurrency_limit=FILE_WORKERS)
    ui.clear.click(bind(on_clear), [*inputs, *extra], outputs, api_name="clear")


def build_app(demo: gr.Blocks, web_dir: Path = WEB_DIR, model_path: Path | None = None,
              jobs: EnrollJobs | None = None, ort_dir: Path = ORT_WEB_DIR):
    """A FastAPI app serving `web_dir` at /web (when it exists), the Gradio page at /, and at
    /models/NAME the bundled models and the demo's own model (`model_path`, under its file
    name: the page at /web/?model=../models/NAME runs the same model as the server). Only
    those files: never the rest of a folder a model happens to sit in. onnxruntime-web's files
    (`ort_dir`, `npm ci`'s) at /node_modules/onnxruntime-web/dist, where /web looks first, so the
    page needs no CDN; with `jobs`, each finished job's model at /enrolled/ID.onnx."""
    from fastapi import FastAPI
    from fastapi.staticfiles import StaticFiles

    app = FastAPI()
    if web_dir.is_dir():
        app.mount("/web", StaticFiles(directory=web_dir, html=True), name="web")
        serve_models(app, model_path)
    if ort_dir.is_dir():
        app.mount(ORT_WEB_URL, StaticFiles(directory=ort_dir), name="onnxruntime-web")
    if jobs is not None:
        serve_enrolled(app, jobs)
    return gr.mount_gradio_app(app, demo.queue(), path="/", max_file_size=MAX_FILE_BYTES, css=CSS,
                               footer_links=["api", "gradio"], ssr_mode=False)


def serve_models(app, model_path: Path | None) -> None:
    """GET /models/NAME: the bundled models, the demo's own and the head its verifier names
    beside it (a cascade: app/web/cascade.js fetches it there); /models/speech_embedding/NAME:
    the embedding's files, where the page looks for a cascade's `ears`."""
    from fastapi import HTTPException
    from fastapi.responses import FileResponse

    served = {p.name: p for p in DEFAULT_MODEL.parent.glob("*.onnx")}
    if model_path is not None:
        served |= {p.name: p for p in with_head(Path(model_path))}

    @app.get("/models/{name}")
    def model_file(name: str):
        if name not in served:
            raise HTTPException(404, f"no model {name!r} here; served: {sorted(served)}")
        return FileResponse(served[name], media_type="application/octet-stream")

    @app.get("/models/speech_embedding/{name}")
    def embedding_file(name: str):
        if name not in EMBEDDING_FILES:
            raise HTTPException(404, f"no embedding file {name!r} here; served: {sorted(EMBEDDING_FILES)}")
        return FileResponse(EMBEDDING_FOLDER / name, media_type="application/octet-stream")


def with_head(path: Path) -> list[Path]:
    """A model file and, when its metadata names a verifier, the head file beside it."""
    try:
        verifier = KeywordModel(path).meta.get("verifier")
    except ModelError:
        return [path]
    return [path] + ([path.parent / verifier["head"]] if isinstance(verifier, dict) and "head" in verifier else [])


def serve_enrolled(app, jobs: EnrollJobs) -> None:
    """GET /enrolled/ID.onnx: a finished job's model, named after its phrase; /enrolled/ID/NAME:
    its files under their own names (model.onnx and, with a verifier, its head beside it: what
    the page at /web/ loads a cascade from)."""
    from fastapi import HTTPException
    from fastapi.responses import FileResponse

    def finished(job_id: str) -> Path:
        path = jobs.model_path(job_id)
        if path is None:
            raise HTTPException(404, f"no finished job {job_id!r} on this server")
        return path

    @app.get("/enrolled/{name}")
    def enrolled_file(name: str):
        job_id = name.removesuffix(".onnx")
        path = finished(job_id)
        filename = demo_enroll.file_name(jobs.view(job_id)["phrase"])
        return FileResponse(path, media_type="application/octet-stream", filename=filename)

    @app.get("/enrolled/{job_id}/{name}")
    def enrolled_part(job_id: str, name: str):
        files = {p.name: p for p in with_head(finished(job_id))}
        if name not in files or not files[name].is_file():
            raise HTTPException(404, f"job {job_id!r} has no file {name!r}; it has: {sorted(files)}")
        return FileResponse(files[name], media_type="application/octet-stream")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rotkws demo", description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=None,
                   help=f"streaming ONNX model (default: the bundled {DEFAULT_MODEL.name}); a wake file with a "
                   "verifier (what `enroll` writes) runs as the cascade, its head beside it confirming")
    p.add_argument("--host", default=HOST, help=f"address to bind (default {HOST}; 0.0.0.0 for all)")
    p.add_argument("--port", type=port_number, default=PORT, help=f"port, 1–65535 (default {PORT})")
    two = p.add_argument_group("a wake word, then a command (app/twostage.py)")
    two.add_argument("--wake", type=Path, default=None, metavar="W.onnx", help="a wake-word model (`rotkws "
                     "enroll`): the page listens for it, then for a command in the window it opens (its "
                     f"metadata's window_s, else {WINDOW_S:g} s); a file with a verifier (what `enroll` writes) "
                     "runs as the cascade, its head beside it confirming")
    two.add_argument("--commands", type=Path, default=None, metavar="C.onnx", help="the command model, whose "
                     f"keywords are the commands (default: the bundled {COMMAND_MODEL.name})")
    two.add_argument("--wake-keywords", type=keyword_list, default=None, metavar="K,…", help="the wake model's "
                     "keywords that open a window, separated by commas (default: all of them)")
    own = p.add_argument_group("your own wake word (the page's second tab: app/demo_enroll.py)")
    own.add_argument("--jobs", type=Path, default=JOBS_DIR, help="folder of the enroll jobs, kept across "
                     f"restarts (default {JOBS_DIR})")
    own.add_argument("--enroll-args", type=shlex.split, default=[], metavar="'ARGS'",
                     help="options every job's `rotkws enroll` gets, e.g. a smaller budget: "
                          "'--max-steps 200', or '--no-verifier': each wake word the wake file alone, "
                          "without the cascade's heads (default: none, enroll's own)")
    own.add_argument("--no-enroll", action="store_true", help="no enroll tab")
    args = p.parse_args(argv)
    if args.wake is None and (args.commands is not None or args.wake_keywords is not None):
        p.error("--commands and --wake-keywords need --wake (the wake word that opens each command window)")
    if args.wake is not None and args.model is not None:
        p.error("--model and --wake: give the wake word as --wake and the commands as --commands")
    return args


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65_535:
        raise argparse.ArgumentTypeError(f"expected a port number from 1 to 65535, got {text!r}")
    return port


def check_bindable(host: str, port: int) -> str | None:
    """Why the server could not listen on host:port (in use, no such address), or None."""
    try:
        with socket.create_server((host, port)):
            return None
    except OSError as e:
        return e.strerror or str(e)


def load_models(args: argparse.Namespace) -> Served:
    """What the arguments ask the page to run; ValueError (ModelError among them) naming the
    option and what was wrong with it."""
    for option in ("model", "wake", "commands"):
        path = getattr(args, option)
        if path is not None and not path.is_file():
            raise ValueError(f"--{option}: no model at {path}; expected a streaming .onnx file")
    if args.wake is None:
        try:
            return served_model(args.model, shared_embedding())   # a cascade file: a CascadeModel
        except ValueError as e:                 # a head missing or not a head, the embedding's files
            raise ValueError(f"--model: {e}") from None
    wake = loaded("--wake", args.wake)
    try:
        keywords = None if args.wake_keywords is None else listened(wake, args.wake_keywords)
    except ValueError as e:
        raise ValueError(f"--wake-keywords: {e}") from None
    command_path = args.commands or COMMAND_MODEL
    same = command_path.resolve() == args.wake.resolve()
    commands = wake if same else loaded("--commands", command_path)   # one KeywordModel per file
    try:
        verifier = verifier_of(wake, shared_embedding())    # a cascade wake file: its head confirms
    except ValueError as e:                     # a head missing or not a head, the embedding's files
        raise ValueError(f"--wake: {e}") from None
    try:
        return Assistant(wake, commands, keywords, verifier)
    except ValueError as e:                     # rates or hops that differ
        raise ValueError(f"--wake {wake.path} and --commands {commands.path} do not fit: {e}") from None


def loaded(option: str, path: Path | None) -> KeywordModel:
    try:
        return KeywordModel(path)
    except ModelError as e:
        raise ModelError(f"{option}: {e}") from None


def enroll_jobs(args: argparse.Namespace) -> EnrollJobs | None:
    """The enroll tab's jobs in --jobs; None (no tab, said why) when another demo holds them."""
    try:
        return EnrollJobs(args.jobs, extra=args.enroll_args)
    except JobsInUse as e:
        print(f"rotkws demo: {e}: no \"Your own wake word\" tab (give this one another --jobs DIR)", flush=True)
        return None


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        runs = load_models(args)
    except ValueError as e:
        print(f"rotkws demo: {e}", file=sys.stderr)
        return 2
    model = runs.wake if isinstance(runs, Assistant) else runs   # served to /web
    problem = check_bindable(args.host, args.port)
    if problem:
        print(f"rotkws demo: cannot listen on {args.host}:{args.port}: {problem} "
              f"(choose another --port or --host)", file=sys.stderr)
        return 2
    jobs = None if args.no_enroll else enroll_jobs(args)
    app = build_app(build_demo(runs, jobs), model_path=model.path, jobs=jobs)
    print(f"rotkws demo: serving on http://{args.host}:{args.port}", flush=True)
    if WEB_DIR.is_dir():
        query = "" if model.path == DEFAULT_MODEL else f"?model=../models/{model.path.name}"
        print(f"rotkws demo: the in-browser runtime (no server round trip) at "
              f"http://{args.host}:{args.port}/web/{query}", flush=True)
        if not ORT_WEB_DIR.is_dir():
            print(f"rotkws demo: {ORT_WEB_DIR} not found (run `npm ci`, as `make demo` does): the "
                  f"in-browser page will fetch onnxruntime-web from its CDN", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
