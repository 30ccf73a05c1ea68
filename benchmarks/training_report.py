"""Write a training run's measured figures (from its own metrics.csv) into BENCHMARKS.md.

    .venv/bin/python -m benchmarks.training_report RUN_DIR [--name CONFIG] [--note TEXT]

RUN_DIR names the section; --name is the config file (training/configs/CONFIG.yaml) it ran.
"""
import argparse
import csv
import statistics
from pathlib import Path

from benchmarks.report import write_section


def epochs(run: Path) -> list[dict]:
    rows = {}
    for f in sorted(run.glob("logs/*/metrics.csv")):            # a resumed run logs to version_N+1
        for r in csv.DictReader(f.open()):
            e = rows.setdefault(int(r["epoch"]), {})
            for k in ("val/acc", "train/acc", "train/epoch_seconds"):
                if r.get(k):
                    e[k] = float(r[k])
    return [rows[e] | {"epoch": e} for e in sorted(rows)]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("run", type=Path)
    p.add_argument("--name", default="kws12", help="the config's name (training/configs/NAME.yaml)")
    p.add_argument("--note", default="", help="how the run went (overrides, where it stopped), after the config")
    args = p.parse_args(argv)
    rows = [r for r in epochs(args.run) if "val/acc" in r]
    best = max(rows, key=lambda r: r["val/acc"])
    shown = rows[::5] + ([] if (len(rows) - 1) % 5 == 0 else [rows[-1]])   # every fifth epoch and the last
    secs = [r["train/epoch_seconds"] for r in rows if "train/epoch_seconds" in r]
    body = (f"Run `{args.run.name}` of `training/configs/{args.name}.yaml`{args.note}: {len(rows)} epoch{'s' * (len(rows) != 1)}; best validation "
            f"accuracy {best['val/acc']:.3f} at epoch {best['epoch']} (train accuracy there, with augmentation: "
            f"{best.get('train/acc', float('nan')):.3f}); median {statistics.median(secs):.0f} s per epoch "
            f"({statistics.median(secs) * len(rows) / 60:.0f} min for the run), on the CPU shared with other work.\n\n"
            "| epoch | validation accuracy | s/epoch |\n| ---: | ---: | ---: |\n"
            + "\n".join(f"| {r['epoch']} | {r['val/acc']:.3f} | {r.get('train/epoch_seconds', float('nan')):.0f} |"
                        for r in shown))
    write_section(f"training_{args.run.name}", f"Training `{args.run.name}` on this CPU", body,
                  script="training_report")
    print(body)


if __name__ == "__main__":
    main()
