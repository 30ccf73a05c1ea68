"""Wake word, then a command: two rotkws models on one stream, the way assistants use them.

    spotter = WakeCommandSpotter(KeywordModel("alexa.onnx"), KeywordModel("commands.onnx"))
    res = spotter.process(chunk, 48_000)     # any dtype, channels, rate, length
    res.detections                           # the wake words heard in this call
    res.events                               # WakeEvents whose command window closed in this call

The rule, hop by hop (both models score the same 100-ms hops; docs/onnx-interface.md says it for
other languages):

1. The wake model runs on every hop, its state carried, through the detection rule of
   app/detection.py with its own settings (the threshold `enroll` stored).
2. When it fires and no window is open, a command window opens for the next `window_s`
   seconds (WINDOW_S, or the wake model's metadata `detection.window_s`). With
   `command_state="reset"` the command model runs only inside windows, from silence at the wake
   word (the zero state; a clip model's window of zeros); with "carried" it runs on every hop
   (twice the CPU).
3. Inside the window the command model's rows are smoothed as the runtime smooths them
   (app/detection.py, the command model's `smoothing`). A command it is sure of closes the
   window at once: the detection rule with COMMAND_CONFIDENT as its threshold (`min_hops` hops
   in a row). Otherwise the window closes after its last hop with the command whose smoothed
   score peaked highest in it, at the hop of that peak, if the peak reached `command_threshold`
   (COMMAND_THRESHOLD: low, since inside a window the false accepts per hour are the wake
   word's) and no other keyword of the command model (one not listened for) scored higher
   there; else with None (nothing heard, or only `_unknown_` / `_silence_`). While it is open the
   wake word's detections are not reported; when it closes, the wake word's detector starts
   afresh (its smoothing and run forgotten) and listens again.
4. At a stream's end (`flush`), an open window closes as at its last hop, on what it heard by
   then; times in the flushed silence are the time the input ended, as for KeywordSpotter.
"""
import math
from dataclasses import dataclass, field

import numpy as np

from app.detection import Detection, check_threshold, moving_average
from app.spotter import KeywordModel, KeywordSpotter, SpotResult

WINDOW_S = 3.0            # the command window after a wake word (Porcupine + Rhino: a few seconds)
COMMAND_CONFIDENT = 0.9   # a command's smoothed probability that closes the window at once …
COMMAND_THRESHOLD = 0.4   # … else its peak in the window must reach this (BENCHMARKS.md, commands: at 0.3, 6 %
                          # of wake words with nothing said after them reported a command at 10 dB)
COMMAND_STATES = ("reset", "carried")
COMMAND_STATE = "reset"   # the command model runs inside windows only (BENCHMARKS.md, commands)


@dataclass(frozen=True)
class WakeEvent:
    wake: str                           # the wake word's label
    time_s: float                       # when it fired (seconds since the stream started)
    score: float
    command: str | None                 # the command heard in the window, None: none
    command_time_s: float | None = None
    command_score: float | None = None

    def to_json(self) -> dict:
        r = lambda v, n: None if v is None else round(v, n)
        return {"wake": self.wake, "time_s": r(self.time_s, 3), "score": r(self.score, 4),
                "command": self.command, "command_time_s": r(self.command_time_s, 3),
                "command_score": r(self.command_score, 4)}


@dataclass
class TwoStageResult(SpotResult):
    """KeywordSpotter's result (the wake model's times, scores and reported detections) and the
    command model's rows (NaN where it did not run) and the events closed in this call."""
    command_scores: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    events: list[WakeEvent] = field(default_factory=list)
    window_open: bool = False           # a command window is open after this call


class WakeCommandSpotter(KeywordSpotter):
    """One stream's two-stage spotter; `self.model` and `self.detector` are the wake word's.

    commands: the command model (a KeywordModel or a path); command_keywords: the commands
    listened for (None: all its keywords); command_threshold (a command's peak at the window's
    end), command_confident (closes the window at once), command_smoothing, command_min_hops:
    its rule inside the window; the other settings are the wake word's."""

    def __init__(self, wake, commands, *, window_s: float | None = None,
                 command_state: str = COMMAND_STATE, command_keywords=None,
                 command_threshold: float = COMMAND_THRESHOLD, command_confident: float = COMMAND_CONFIDENT,
                 command_smoothing: int | None = None, command_min_hops: int | None = None, **wake_settings):
        super().__init__(wake, **wake_settings)
        self.command_model = commands if isinstance(commands, KeywordModel) else KeywordModel(commands)
        if command_state not in COMMAND_STATES:
            raise ValueError(f"expected command_state in {COMMAND_STATES}, got {command_state!r}")
        self.command_state = command_state
        for name in ("sample_rate", "hop_samples", "input_multiple"):
            if getattr(self.command_model, name) != getattr(self.model, name):
                raise ValueError(f"the command model's {name} ({getattr(self.command_model, name)}) is not "
                                 f"the wake model's ({getattr(self.model, name)}): they score the same hops")
        window_s = self.model.meta["detection"].get("window_s", WINDOW_S) if window_s is None else window_s
        if isinstance(window_s, bool) or not isinstance(window_s, (int, float)) or not 0 < window_s < math.inf:
            raise ValueError(f"expected window_s > 0 seconds, got {window_s!r}")
        self.window_s = float(window_s)
        self.window_hops = max(1, int(np.floor(self.window_s / self.hop_s + 0.5)))   # as JS's Math.round
        self.commands = KeywordSpotter(self.command_model, keywords=command_keywords,
                                       threshold=command_confident, smoothing=command_smoothing,
                                       min_hops=command_min_hops)
        check_threshold(command_threshold, ["command_threshold"])
        self.command_threshold = float(command_threshold)
        self._columns = np.array([self.command_model.labels.index(k) for k in self.command_model.keywords])
        self._collect()

    def reset(self) -> None:
        super().reset()
        if hasattr(self, "commands"):
            self.commands.reset()
        self._open: Detection | None = None      # the wake detection whose window is open
        self._heard: list[tuple[float, np.ndarray]] = []   # the window's (time, command row)

    @property
    def window_open(self) -> bool:
        return self._open is not None

    def process(self, chunk: np.ndarray, sample_rate: int) -> TwoStageResult:
        self._collect()
        return self._result(super().process(chunk, sample_rate))

    def flush(self) -> TwoStageResult:
        """KeywordSpotter.flush for both models; a window still open then closes with what it heard."""
        self._collect()
        result = super().flush()
        end_s = self._samples_done / self.model.sample_rate
        if self._open is not None:
            self._close(self._best())
        self._events = [WakeEvent(e.wake, min(e.time_s, end_s), e.score, e.command,
                                  None if e.command_time_s is None else min(e.command_time_s, end_s),
                                  e.command_score) for e in self._events]
        self._command_rows = self._command_rows[:len(result.times)]   # the silence's rows are not returned
        return self._result(result)

    def _collect(self) -> None:
        self._events: list[WakeEvent] = []
        self._command_rows: list[np.ndarray] = []

    def _result(self, r: SpotResult) -> TwoStageResult:
        rows = np.array(self._command_rows, np.float32).reshape(len(self._command_rows),
                                                                 len(self.command_model.labels))
        return TwoStageResult(r.times, r.scores, r.detections, rows, self._events, self.window_open)

    def _score_hops(self, audio: np.ndarray, hop: int, advance: int) -> SpotResult:
        """Both models hop by hop, the window opened and closed between hops (the rule above)."""
        times, rows, heard = [], [], []
        for start in range(0, len(audio), hop):
            piece = audio[start:start + hop]
            row = self._score_one(piece)
            self._samples_done += advance
            t = self._samples_done / self.model.sample_rate
            times.append(t)
            rows.append(row)
            wake = self._wake(piece[:advance], t, row)
            runs = self.command_state == "carried" or self._open is not None
            command_row = self.commands._score_one(piece) if runs else np.full(len(self.command_model.labels), np.nan)
            self._command_rows.append(command_row)
            if self._open is not None:
                self._heard.append((t, command_row))
                sure = self.commands.detector.update(np.array([t]), command_row[None])
                if sure:
                    self._close(sure[0])
                elif len(self._heard) >= self.window_hops:
                    self._close(self._best())
            elif wake:
                heard.append(wake[0])
                self._open, self._heard = wake[0], []
                self.commands.detector.reset()
                if self.command_state == "reset":
                    self.commands.forget()
        scores = np.array(rows, np.float32).reshape(len(rows), len(self.model.labels))
        return SpotResult(np.array(times, np.float64), scores, heard)

    def _wake(self, audio: np.ndarray, t: float, row: np.ndarray) -> list[Detection]:
        """The wake word's detections at the hop ending at `t`: `audio` its new samples, `row`
        its scores (a cascade's wake word is confirmed by its head: app/twostage_cascade.py)."""
        return self.detector.update(np.array([t]), row[None])

    def _best(self) -> Detection | None:
        """The command listened for whose smoothed score peaked highest in the window (the first
        such hop and keyword on a tie), if that peak reached command_threshold and no other keyword
        of the command model scored higher at that hop (an unticked command said is not heard as
        the next best ticked one)."""
        if not self._heard:
            return None
        rows = np.array([r for _, r in self._heard], np.float64)
        smooth = moving_average(rows, self.commands.detector.smoothing, np.zeros((0, rows.shape[1])))
        smooth = smooth[:, self._columns]                              # every keyword of the command model
        listened = smooth[:, [self.command_model.keywords.index(k) for k in self.commands.keywords]]   # now
        hop, k = np.unravel_index(int(np.argmax(listened)), listened.shape)
        if listened[hop, k] < self.command_threshold or listened[hop, k] < smooth[hop].max():
            return None
        return Detection(self.commands.keywords[k], self._heard[hop][0], float(listened[hop, k]))

    def _close(self, said: Detection | None) -> None:
        w = self._open
        self._events.append(WakeEvent(w.keyword, w.time_s, w.score, *(
            (said.keyword, said.time_s, said.score) if said else (None, None, None))))
        self._open, self._heard = None, []
        self.detector.reset()                    # the wake word listens again, afresh
