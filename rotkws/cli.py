"""The `rotkws` command: one entry point, one module per subcommand.

Each subcommand lives in its own module as `main(argv: list[str]) -> int`, in the layer it
belongs to (COMMANDS), and is imported only when it runs, so `rotkws detect` and `rotkws demo`
never import torch, and `rotkws train` works only where the `train` extra is installed. This
module sits above every layer it names; nothing imports it but tests/.
"""
import importlib
import importlib.metadata
import os
import sys

# name → (module, what it does)
COMMANDS = {
    "train": ("training.cli", "train a classifier from a config file (needs the train extra)"),
    "eval": ("rotkws.eval_cli", "clip accuracy of an ONNX model (--model) or a checkpoint (--checkpoint)"),
    "export": ("export.cli", "checkpoint → streaming ONNX file, verified (needs the train extra)"),
    "enroll": ("rotkws.enroll_cli", "a keyword from text: synthesise it, train, write a streaming ONNX file "
                                  "(needs the train extra and espeak-ng)"),
    "calibrate": ("export.calibrate", "choose a model's per-keyword thresholds on validation streams, "
                                      "stored in its metadata (needs the train extra)"),
    "detect": ("app.detect_cli", "run the keyword spotter over audio files, one JSON line per detection"),
    "demo": ("app.demo", "the Gradio microphone demo"),
    "bench": ("benchmarks.bench", "accuracy, streaming DET, cost, peer and ablations → bench/report.md "
                                  "(needs the train extra)"),
}


def usage() -> str:
    lines = ["usage: rotkws COMMAND [options]   (rotkws COMMAND --help for its options; rotkws --version)", ""]
    width = max(map(len, COMMANDS)) + 2
    lines += [f"  {name:<{width}}{text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def version() -> str:
    try:
        return importlib.metadata.version("rotkws")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown (not installed: pip install -e .)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(f"rotkws {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"rotkws: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = COMMANDS[name][0]
    try:
        entry = importlib.import_module(module).main
    except ModuleNotFoundError as e:
        print(f"rotkws {name}: {e.name} is not installed here; "
              f"install the extra it needs, e.g. pip install -e '.[train]'", file=sys.stderr)
        return 2
    try:
        return int(entry(rest) or 0)
    except BrokenPipeError:              # `rotkws eval … | head -1`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no error at exit's flush
        return 0


if __name__ == "__main__":
    sys.exit(main())
