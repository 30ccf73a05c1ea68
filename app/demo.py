"""`rotkws demo`: a Gradio page that listens to the microphone and shows what it hears.

    rotkws demo [--model M] [--host 127.0.0.1] [--port 7860]

The page streams the microphone to the server (`gr.Audio(streaming=True)`: browsers send
48 kHz int16 in pieces of STREAM_EVERY_S); each piece goes through the visitor's own
`DemoSession` (app/demo_session.py), which holds their spotter; one ONNX model is shared by all.
A file upload runs the same path over a file. `app/web/`, where present, is served at /web.
"""
import argparse
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pandas as pd

from app.demo_session import GAIN_RANGE_DB, PLOT_WINDOW_S, DemoSession
from app.spotter import DEFAULT_MODEL, KeywordModel, ModelError, detection_settings

HOST = "127.0.0.1"           # loopback unless told otherwise (--host 0.0.0.0 in the container)
PORT = 7860
MAX_FILE_BYTES = 20 * 2**20  # uploads above 20 MB are refused by the server (HTTP 413)
THRESHOLD_RANGE = (0.05, 0.99)  # the threshold slider's span; it starts at the model's operating point
STREAM_EVERY_S = 0.5         # the browser sends the microphone in pieces of this length
MAX_LISTENERS = 64           # visitors streaming at once: a recording holds one slot until it stops
STREAM_TIME_LIMIT_S = 1800   # a recording stops after 30 min, so a forgotten tab frees its slot
FILE_WORKERS = 2             # files scored at once (each is a burst of CPU)
SESSION_TTL_S = 3600         # a visitor's spotter is dropped after an hour without audio
CACHE_SWEEP = (60, 300)      # every 60 s, delete uploads older than 300 s: each 0.5 s microphone
                             # piece arrives as a file (~48 KB), ~350 MB per visitor-hour if kept
WEB_DIR = Path(__file__).resolve().parent / "web"   # static files served at /web when present
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]   # one fixed colour per keyword, so a line keeps its colour
CSS = "#detections textarea { font-family: ui-monospace, monospace; }"

INTRO = """# rotkws: keyword spotting with RotRNN
Press **Record**, allow the microphone and say one of: {keywords}.
Scores update live; detections are logged below with the time they were heard."""


# ─── handlers: (inputs…, session) → (scores, plot, log, latency, session) ───

def views(session: DemoSession) -> tuple:
    """What the page shows of a session, in the order of the handlers' outputs."""
    plot = pd.DataFrame(session.plot_points())
    return session.current_scores() or None, plot, session.log_text(), session.latency_text(), session


def configured(model: KeywordModel, session, threshold: float | None, gain_db: float, keywords) -> DemoSession:
    """The visitor's session (a new one on the first event) with the controls' values; no keyword
    ticked → a warning (once, not at every piece), and the ones listened for before stay."""
    threshold = slider_threshold(model, threshold)
    session = session or DemoSession(model, threshold)
    try:
        session.configure(threshold, gain_db, keywords)
    except ValueError as e:
        if not (session.log and session.log[0] == f"!! {e}"):
            warn(session, e)
        session.configure(threshold, gain_db)
    return session


def on_chunk(model: KeywordModel, chunk, session, threshold: float | None, gain_db: float, keywords=None) -> tuple:
    """One microphone piece, `chunk` = (sample_rate, int16 (n,) or (n, ch)), as Gradio gives it."""
    session = configured(model, session, threshold, gain_db, keywords)
    if chunk is not None and len(chunk[1]):
        try:
            session.feed(chunk[1], chunk[0])
        except ValueError as e:                  # the runtime's word on audio it cannot take
            warn(session, e)
    return views(session)


def on_file(model: KeywordModel, path, session, threshold: float | None, gain_db: float, keywords=None) -> tuple:
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


def on_clear(model: KeywordModel, session, threshold: float | None, gain_db: float, keywords=None) -> tuple:
    session = session or DemoSession(model, slider_threshold(model, threshold))
    session.clear()
    session.log.clear()
    session.timings.clear()
    return views(session)


def on_stop(session) -> None:
    """Recording stopped: the next recording starts from a fresh state (the log stays)."""
    if session is not None:
        session.clear()


# ─── the page ───

def build_demo(model: KeywordModel | None = None) -> gr.Blocks:
    """The page on `model` (default: the bundled DEFAULT_MODEL), shared by every visitor."""
    model = model if model is not None else KeywordModel()
    with gr.Blocks(title="rotkws demo", analytics_enabled=False, delete_cache=CACHE_SWEEP) as demo:
        session = gr.State(None, time_to_live=SESSION_TTL_S)     # the visitor's DemoSession
        ui = layout(model)
        wire(model, session, ui)
    return demo


def slider_start(model: KeywordModel) -> tuple[float, str]:
    """The threshold slider's first value (the model's operating point; its median when the
    model has one threshold per keyword) and, then, those thresholds as text."""
    point = detection_settings(model, {})["threshold"]
    if not isinstance(point, dict):
        return float(np.clip(point, *THRESHOLD_RANGE)), ""
    start = float(np.clip(np.round(np.median(list(point.values())), 2), *THRESHOLD_RANGE))
    return start, ", ".join(f"{k} {v:.2f}" for k, v in point.items())


def slider_threshold(model: KeywordModel, value: float | None) -> float | None:
    """The slider's value as a threshold: None (the model's own operating point, per keyword
    where it has one) while the slider stays where it started."""
    return None if value is None or value == slider_start(model)[0] else value


def layout(model: KeywordModel) -> SimpleNamespace:
    """The components: controls on the left, what the spotter hears on the right."""
    gr.Markdown(INTRO.format(keywords=", ".join(f"*{k}*" for k in model.keywords)))
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
            ui.threshold = gr.Slider(*THRESHOLD_RANGE, value=operating_point, step=0.01,
                                     label=f"Threshold (keyword probability to detect{note})", elem_id="threshold")
            ui.gain = gr.Slider(*GAIN_RANGE_DB, value=0.0, step=1.0,
                                label="Sensitivity (input gain, dB)", elem_id="sensitivity")
            ui.keywords = gr.CheckboxGroup(list(model.keywords), value=list(model.keywords),
                                           label="Listen for (the others never fire)", elem_id="listen")
            ui.clear = gr.Button("Clear", elem_id="clear")
        with gr.Column(scale=2, min_width=420):
            ui.scores = gr.Label(num_top_classes=5, label="Hearing now", elem_id="scores")
            colors = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(model.keywords)}
            ui.plot = gr.LinePlot(x="time", y="score", color="keyword", y_lim=[0, 1], color_map=colors,
                                  x_title="time since start (s)", y_title="probability",
                                  label=f"Keyword scores, last {PLOT_WINDOW_S:g} s", elem_id="plot")
            ui.log = gr.Textbox(label="Detections (newest first)", elem_id="detections",
                                lines=8, max_lines=8, interactive=False)
            ui.latency = gr.Markdown("Waiting for audio.", elem_id="latency")
    return ui


def wire(model: KeywordModel, session: gr.State, ui: SimpleNamespace) -> None:
    """The events: every handler gets the shared model, the visitor's session and the controls."""
    bind = lambda fn: lambda *args: fn(model, *args)   # noqa: E731
    inputs = [session, ui.threshold, ui.gain, ui.keywords]
    outputs = [ui.scores, ui.plot, ui.log, ui.latency, session]
    ui.mic.stream(bind(on_chunk), [ui.mic, *inputs], outputs, api_name="stream",
                  stream_every=STREAM_EVERY_S, time_limit=STREAM_TIME_LIMIT_S,
                  concurrency_limit=MAX_LISTENERS, show_progress="hidden")
    ui.mic.stop_recording(on_stop, [session], None, api_visibility="private")
    ui.upload.upload(bind(on_file), [ui.upload, *inputs], outputs, api_name="file",
                     concurrency_limit=FILE_WORKERS)
    ui.clear.click(bind(on_clear), inputs, outputs, api_name="clear")


def build_app(demo: gr.Blocks, web_dir: Path = WEB_DIR, model_path: Path | None = None):
    """A FastAPI app serving `web_dir` at /web (when it exists), the Gradio page at /, and at
    /models/NAME the bundled models and the demo's own model (`model_path`, under its file
    name: the page at /web/?model=../models/NAME runs the same model as the server). Only
    those files: never the rest of a folder a model happens to sit in."""
    from fastapi import FastAPI, HTTPException
    from fastapi.responses import FileResponse
    from fastapi.staticfiles import StaticFiles

    app = FastAPI()
    if web_dir.is_dir():
        app.mount("/web", StaticFiles(directory=web_dir, html=True), name="web")
        served = {p.name: p for p in DEFAULT_MODEL.parent.glob("*.onnx")}
        if model_path is not None:
            served[Path(model_path).name] = Path(model_path)

        @app.get("/models/{name}")
        def model_file(name: str):
            if name not in served:
                raise HTTPException(404, f"no model {name!r} here; served: {sorted(served)}")
            return FileResponse(served[name], media_type="application/octet-stream")
    return gr.mount_gradio_app(app, demo.queue(), path="/", max_file_size=MAX_FILE_BYTES, css=CSS,
                               footer_links=["api", "gradio"], ssr_mode=False)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rotkws demo", description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=None,
                   help=f"streaming ONNX model (default: the bundled {DEFAULT_MODEL.name})")
    p.add_argument("--host", default=HOST, help=f"address to bind (default {HOST}; 0.0.0.0 for all)")
    p.add_argument("--port", type=port_number, default=PORT, help=f"port, 1–65535 (default {PORT})")
    return p.parse_args(argv)


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


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.model is not None and not args.model.is_file():
        print(f"rotkws demo: no model at {args.model}; expected a streaming .onnx file", file=sys.stderr)
        return 2
    try:
        model = KeywordModel(args.model)
    except ModelError as e:
        print(f"rotkws demo: {e}", file=sys.stderr)
        return 2
    problem = check_bindable(args.host, args.port)
    if problem:
        print(f"rotkws demo: cannot listen on {args.host}:{args.port}: {problem} "
              f"(choose another --port or --host)", file=sys.stderr)
        return 2
    app = build_app(build_demo(model), model_path=model.path)
    print(f"rotkws demo: serving on http://{args.host}:{args.port}", flush=True)
    if WEB_DIR.is_dir():
        query = "" if model.path == DEFAULT_MODEL else f"?model=../models/{model.path.name}"
        print(f"rotkws demo: the in-browser runtime (no server round trip) at "
              f"http://{args.host}:{args.port}/web/{query}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
