"""The `rotkws` command with bad input: each row is an input, the exit code and the one-line
message a user gets (never a traceback), for `detect`, `eval --model` and `demo`; and the
command's own flags (--version, a closed pipe)."""
import json
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from rotkws import cli
from conftest import CLIPS, REPO
from onnx_models import META, exported

GOOD = sorted(CLIPS.glob("yes/*.wav"))[0]


@pytest.fixture(scope="module")
def model(request) -> str:
    return str(exported("logmel", request.config.cache.mkdir("rotkws-onnx"), **META)[1])


def bad_files(root):
    """name → a file (or folder) that is not a usable recording, and the message it must get."""
    full = root / "full.wav"
    sf.write(full, (np.random.default_rng(0).standard_normal(16_000) * 0.1).astype(np.float32), 16_000, subtype="PCM_16")
    data = full.read_bytes()
    files = {"empty": (b"", "not a readable audio file"),
             "header_only": (data[:44], "truncated: its WAV header promises 32000 more bytes"),
             "truncated": (data[: len(data) // 2], "truncated: its WAV header promises"),
             "text": (b"not audio at all", "not a readable audio file")}
    out = {}
    for name, (content, message) in files.items():
        (root / f"{name}.wav").write_bytes(content)
        out[name] = (root / f"{name}.wav", message)
    for name, value in (("nan", np.nan), ("huge", 1e30)):
        sf.write(root / f"{name}.wav", np.full(16_000, value, np.float32), 16_000, subtype="FLOAT")
    out["nan"] = (root / "nan.wav", "holds non-finite samples")
    out["huge"] = (root / "huge.wav", "samples far outside [−1, 1] (peak 1e+30")
    out["folder"] = (root, "is a folder; expected an audio file")
    out["missing"] = (root / "gone.wav", "no such audio file")
    return out


CASES = ["empty", "header_only", "truncated", "text", "nan", "huge", "folder", "missing"]


@pytest.mark.parametrize("case", CASES)
def test_detect_refuses_a_bad_file_by_name_and_goes_on(model, tmp_path, capsys, case):
    from app.detect_cli import main
    path, message = bad_files(tmp_path)[case]
    assert main(["--model", model, str(path), str(GOOD)]) == 1
    out, err = capsys.readouterr()
    assert err.startswith(f"rotkws detect: {path}: {message}") and len(err.splitlines()) == 1, err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", ["nan", "huge", "truncated", "header_only", "text"])
def test_eval_skips_and_counts_a_bad_clip_in_a_folder(model, tmp_path, capsys, case):
    """A broken clip in yes/ is refused, counted, and not scored."""
    from rotkws.eval_cli import main
    folder = tmp_path / "data"
    (folder / "yes").mkdir(parents=True)
    for p in sorted(CLIPS.glob("yes/*.wav")):
        (folder / "yes" / p.name).write_bytes(p.read_bytes())
    bad, message = bad_files(tmp_path)[case]
    (folder / "yes" / "aaaa0000_nohash_0.wav").write_bytes(bad.read_bytes())
    with pytest.warns(UserWarning, match=re.escape(message)):
        assert main(["--model", model, "--data", str(folder), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["skipped_corrupt"] == 1 and result["n"] == 2


@pytest.mark.parametrize("data,message", [("file", "is a file; expected a folder"),
                                          ("missing", "does not exist")])
def test_eval_names_a_data_path_that_is_not_a_folder(model, tmp_path, capsys, data, message):
    from rotkws.eval_cli import main
    path = GOOD if data == "file" else tmp_path / "nowhere"
    assert main(["--model", model, "--data", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rotkws eval: ") and message in err and "Traceback" not in err


def test_demo_refuses_a_port_out_of_range_and_a_busy_one(capsys):
    from app.demo import main
    with pytest.raises(SystemExit) as exit_:
        main(["--port", "99999"])
    assert exit_.value.code == 2
    assert "expected a port number from 1 to 65535, got '99999'" in capsys.readouterr().err
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        assert main(["--port", str(port)]) == 2
    out, err = capsys.readouterr()
    assert "serving on" not in out
    assert err.startswith(f"rotkws demo: cannot listen on 127.0.0.1:{port}: ") and "--port" in err


def test_version_and_help(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("rotkws ")
    assert cli.main(["--help"]) == 0 and "--version" in capsys.readouterr().out


def test_a_closed_pipe_ends_the_command_quietly(model):
    """`rotkws detect --scores … | head -1`: no BrokenPipeError traceback."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = (f"{sys.executable} -m rotkws detect --model {model} --scores "
           + " ".join(str(p) for p in sorted(CLIPS.glob("*/*.wav"))) + " | head -1")
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    assert proc.stdout.startswith("file,time_s,")
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("checkpoint, bundled", [("kws12_stream.ckpt", "kws12.onnx"),      # app/models/MODEL_CARD.md
                                                  ("kws12_commands.ckpt", "commands.onnx")])
def test_eval_scores_a_checkpoint_and_its_export_alike(checkpoint, bundled, capsys):
    """One eval, two kinds of model: a bundled model's checkpoint (PyTorch) and the file exported
    from it (onnxruntime) classify the real clips the same way."""
    from rotkws.eval_cli import main
    from app.spotter import COMMAND_MODEL, DEFAULT_MODEL
    assert {DEFAULT_MODEL.name, COMMAND_MODEL.name} == {"kws12.onnx", "commands.onnx"}
    checkpoint = REPO / "training" / "checkpoints" / checkpoint
    results = []
    for args in (["--checkpoint", str(checkpoint)], ["--model", str(DEFAULT_MODEL.parent / bundled)]):
        assert main(args + ["--data", str(CLIPS), "--json"]) == 0
        results.append(json.loads(capsys.readouterr().out))
    torch_run, onnx_run = results
    assert torch_run["n"] == onnx_run["n"] == 24
    assert torch_run["confusion"] == onnx_run["confusion"]


@pytest.mark.parametrize("args,message", [
    (["--checkpoint", "nowhere.ckpt"], "checkpoint nowhere.ckpt does not exist"),
    (["--checkpoint", str(GOOD)], "not a readable checkpoint"),
    (["--model", "nowhere.onnx"], "no model at"),
])
def test_eval_names_a_model_it_cannot_load(args, message, capsys):
    from rotkws.eval_cli import main
    assert main(args + ["--data", str(CLIPS)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rotkws eval: ") and message in err and "Traceback" not in err


def test_eval_help_shows_every_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["eval", "--help"])
    text = capsys.readouterr().out
    assert all(flag in text for flag in ("--model", "--checkpoint", "--data", "--split", "--json", "--png"))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["eval", "--model", "a.onnx", "--checkpoint", "b.ckpt", "--data", "."])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("case", [c for c in CASES if c not in ("folder", "missing")])
def test_demo_upload_refuses_a_bad_file_on_the_page_and_keeps_working(tmp_path, monkeypatch, case):
    """The demo's upload: the message on the page is detect's (one reader, one rule), naming the
    file, never the server's path, and the visitor's session goes on with the next file."""
    from app import demo
    from app.spotter import DEFAULT_MODEL, KeywordModel
    monkeypatch.setattr(demo.gr, "Warning", lambda *a, **k: None)
    model = KeywordModel(DEFAULT_MODEL)
    path, message = bad_files(tmp_path)[case]
    *_, log, _latency, session = demo.on_file(model, str(path), None, None, 0.0)
    assert log.startswith(f"!! {path.name}: {message}"), log
    assert str(tmp_path) not in log
    *_, log, _latency, session = demo.on_file(model, str(GOOD), session, None, 0.0)
    assert log.startswith(f"── {GOOD.name}") or GOOD.name in log
