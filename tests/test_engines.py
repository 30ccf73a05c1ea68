"""benchmarks/engines.py's TFLite peers on one thread (`one_thread`): running them starts no
thread, and they score a real recording as the peer's own interpreters (TFLite's default thread
count) do. The rest of the engines' tests are in tests/test_peers.py."""
from pathlib import Path

import numpy as np
import pytest

from benchmarks import engines
from conftest import data_root, require
from evaluation import speech

TASKS = Path("/proc/self/task")    # one entry per thread of this process (Linux)
ATOL = 1e-5                        # measured: one thread against the default differ by < 4e-6


@pytest.fixture(scope="module")
def recording() -> np.ndarray:
    """1 s silence, an `alexa` recording no training uses, 1 s silence: (samples,) float32."""
    data = require(data_root() / speech.WAKEWORD_FOLDER).parent
    gap = np.zeros(engines.SAMPLE_RATE, np.float32)
    return np.concatenate([gap, speech.read(speech.wake_recordings(data, "alexa")[0]), gap])


def openwakeword(audio: np.ndarray, oww=None, features=None) -> list[float]:
    """openWakeWord's probabilities over `audio`, by the given objects or its own defaults."""
    from pyopen_wakeword import Model, OpenWakeWord, OpenWakeWordFeatures
    oww, features = oww or OpenWakeWord.from_builtin(Model.ALEXA), features or OpenWakeWordFeatures.from_builtin()
    return [p for _, data in engines.chunks(audio) for f in features.process_streaming(data)
            for p in oww.process_streaming(f)]


def microwakeword(audio: np.ndarray, mww=None, features=None) -> list[float]:
    """microWakeWord's sliding-window means over `audio`, by the given objects or its own defaults."""
    from pymicro_wakeword import MicroWakeWord, MicroWakeWordFeatures, Model
    mww, features = mww or MicroWakeWord.from_builtin(Model.ALEXA), features or MicroWakeWordFeatures()
    probs = (mww.process_streaming_prob(f) for _, data in engines.chunks(audio)
             for f in features.process_streaming(data))
    return [p for p in probs if p is not None]


def threads() -> int:
    return len(list(TASKS.iterdir()))


@pytest.mark.skipif(not TASKS.exists(), reason="counts threads in /proc/self/task (Linux only)")
@pytest.mark.parametrize("engine, scores", [(engines.OpenWakeWord, openwakeword),
                                            (engines.MicroWakeWord, microwakeword)])
def test_a_tflite_peer_on_one_thread_starts_none_and_scores_as_its_own(engine, scores, recording):
    peer = engine("alexa")
    before = threads()
    objects = peer.make()                  # the interpreters' threads live as long as they do
    ours = scores(recording, *objects)
    assert threads() <= before             # none started (others may have ended)
    theirs = scores(recording)
    assert len(theirs) == len(ours) > 0
    np.testing.assert_allclose(ours, theirs, atol=ATOL)
    assert np.array_equal(peer.track(recording)[1], ours)
