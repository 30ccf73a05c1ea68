"""Stream audio into a running demo over HTTP, the way a browser's microphone does.

gradio_client cannot drive a streaming event, so this speaks Gradio 6's protocol itself:
each piece is uploaded as a WAV file (POST /gradio_api/upload); the first joins the queue
(POST /gradio_api/queue/join) and opens the stream; the others go to
POST /gradio_api/stream/{event_id}; answers arrive as server-sent events on
GET /gradio_api/queue/data; POST .../close ends it. One `StreamVisitor` is one browser session.
`DemoServer` runs `rotkws demo` in a subprocess on a free loopback port and stops it on exit.
Test tooling, not part of the runtime: used by the demo's tests (as `demo_client`) and by
benchmarks/bench_demo.py (as `tests.demo_client`).
"""
import io
import json
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from dataclasses import dataclass, field

import httpx
import numpy as np
import soundfile as sf

API = "/gradio_api"
LOG_LINE = re.compile(r"t=\s*([\d.]+) s\s+(\S+)\s+([\d.]+)")   # a line of app.demo_session.log_line


@dataclass
class StreamAnswer:
    """What one visitor saw: the final page values and each piece's round trip."""
    log: str = ""                                     # the detection log, as on the page
    scores: dict = field(default_factory=dict)        # the Label's last value
    round_trips_s: list[float] = field(default_factory=list)   # send → answer, per piece
    piece_s: float = 0.0                              # audio seconds per piece

    @property
    def detections(self) -> list[tuple[float, str, float]]:
        """(time s, keyword, score) from the log, oldest first; no wall clock, so comparable."""
        found = [(float(t), k, float(s)) for t, k, s in LOG_LINE.findall(self.log)]
        return found[::-1]


class StreamVisitor:
    """One browser session on the demo at `url` (e.g. http://127.0.0.1:7860)."""

    def __init__(self, url: str, timeout_s: float = 60.0):
        self.http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s)
        self.session_hash = secrets.token_hex(8)
        config = self.http.get("/config").raise_for_status().json()
        dep = next(d for d in config["dependencies"] if d.get("api_name") == "stream")
        self.fn_index, self.trigger_id = dep["id"], dep["targets"][0][0]
        components = {c["id"]: c for c in config["components"]}
        self.inputs = [components[i] for i in dep["inputs"]]    # the microphone, state, sliders…

    def close(self) -> None:
        self.http.close()

    def stream(self, audio: np.ndarray, rate: int, piece_s: float = 0.5, paced: bool = True,
               **controls) -> StreamAnswer:
        """Send `audio` (int16 (n,)) in pieces; `paced` sends no faster than real time.

        controls: slider values by elem_id (`threshold=0.6`); the others keep the page's default."""
        step = int(piece_s * rate)
        pieces = [audio[i:i + step] for i in range(0, len(audio), step)]
        answer, start = StreamAnswer(piece_s=piece_s), time.perf_counter()
        event_id, events = None, None
        try:
            for k, piece in enumerate(pieces):
                if paced:
                    time.sleep(max(0.0, start + k * piece_s - time.perf_counter()))
                body = self._body(self._upload(piece, rate), controls)
                sent = time.perf_counter()
                if event_id is None:
                    joined = self.http.post(f"{API}/queue/join", json=body).raise_for_status()
                    event_id = joined.json()["event_id"]
                    events = self._events()
                else:
                    self.http.post(f"{API}/stream/{event_id}", json=body).raise_for_status()
                self._read(next(events), answer)
                answer.round_trips_s.append(time.perf_counter() - sent)
        finally:
            if event_id is not None:
                self.http.post(f"{API}/stream/{event_id}/close")
                events.close()
        return answer

    def _upload(self, piece: np.ndarray, rate: int) -> dict:
        buf = io.BytesIO()
        sf.write(buf, piece, rate, format="WAV", subtype="PCM_16")
        files = [("files", ("audio.wav", buf.getvalue(), "audio/wav"))]
        path = self.http.post(f"{API}/upload", files=files).raise_for_status().json()[0]
        return {"path": path, "orig_name": "audio.wav", "meta": {"_type": "gradio.FileData"}}

    def _body(self, piece: dict, controls: dict) -> dict:
        """The inputs as the page sends them: the piece, null for gr.State, then the controls."""
        data = [piece if c["type"] == "audio" else
                None if c["type"] == "state" else
                controls.get(c["props"].get("elem_id"), c["props"].get("value")) for c in self.inputs]
        return {"data": data, "fn_index": self.fn_index, "trigger_id": self.trigger_id,
                "session_hash": self.session_hash, "event_data": None}

    def _events(self):
        """Each answer to a piece (the `output` of a process_streaming message), in order."""
        url = f"{API}/queue/data"
        with self.http.stream("GET", url, params={"session_hash": self.session_hash}) as r:
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("msg") in ("process_streaming", "process_generating"):
                    yield msg["output"]
                elif msg.get("msg") == "process_completed" and not msg.get("success"):
                    raise RuntimeError(f"the demo failed: {msg.get('output')}")
                elif msg.get("msg") == "close_stream":
                    return

    @staticmethod
    def _read(output: dict, answer: StreamAnswer) -> None:
        if output.get("error"):
            raise RuntimeError(f"the demo answered an error: {output['error']}")
        scores, _plot, log, *_ = output["data"]
        answer.log = log or ""
        answer.scores = scores or {}


class DemoServer:
    """`rotkws demo` on 127.0.0.1 and a free port, as a context manager: `with DemoServer() as url:`."""

    READY_TIMEOUT_S = 90.0

    def __init__(self, model: Path | None = None, command: list[str] | None = None):
        self.port = free_port()
        self.command = (command or [sys.executable, "-m", "rotkws", "demo"]) + [
            "--host", "127.0.0.1", "--port", str(self.port)] + (["--model", str(model)] if model else [])
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> str:
        self.log = tempfile.TemporaryFile(mode="w+")
        repo = Path(__file__).resolve().parents[1]
        self.process = subprocess.Popen(self.command, cwd=repo, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self.url

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.printed = self.output()
        self.log.close()

    def output(self) -> str:
        """What the server printed (stdout and stderr), so far or in all once stopped."""
        if self.log.closed:
            return self.printed
        self.log.seek(0)
        return self.log.read()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rotkws demo exited with {self.process.returncode}:\n"
                                   f"{self.output()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/config", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"rotkws demo did not answer on {self.url} within {self.READY_TIMEOUT_S:.0f} s:\n"
                           f"{self.output()[-3000:]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
