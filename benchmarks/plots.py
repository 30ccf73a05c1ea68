"""The bench report's figures (PNG, matplotlib's Agg backend: no display needed)."""
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def det_png(rows: list[dict], hours: float, points: dict, path: Path) -> None:
    """Miss rate against false accepts per hour over the threshold sweep (log x; a rate of 0
    is drawn at the resolution of the stream, 1 false accept in all its hours)."""
    floor = 1 / hours
    order = sorted(rows, key=lambda r: (r["fa_per_hour"], r["miss_rate"]))
    fa = np.array([max(r["fa_per_hour"], floor / 2) for r in order])
    miss = np.array([r["miss_rate"] for r in order])
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.plot(fa, 100 * miss, ".-", lw=1, ms=3)
    for name, r in points.items():
        if r is not None:
            ax.plot(max(r["fa_per_hour"], floor / 2), 100 * r["miss_rate"], "o",
                    label=f"{name}: {100 * r['miss_rate']:.1f} % missed (threshold {r['threshold']:.3f})")
    ax.axvline(floor, color="grey", ls=":", lw=1, label=f"1 false accept in {hours:.2g} h")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("false accepts per hour")
    ax.set_ylabel("missed keywords (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title(f"streaming detection over {hours:.2g} h (left of the dotted line: no false accept)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ablation_png(arms: dict, path: Path) -> None:
    """Held-out accuracy per arm: every seed as a dot, the mean with its 95 % interval."""
    fig, ax = plt.subplots(figsize=(6, 0.7 + 0.6 * len(arms)))
    for y, (name, a) in enumerate(arms.items()):
        s = a["accuracy"]
        ax.plot(100 * np.array(s["values"]), [y] * len(s["values"]), "o", alpha=0.5, color="C0")
        if not np.isnan(s["low"]):
            ax.plot([100 * s["low"], 100 * s["high"]], [y, y], "-", color="C1", lw=3)
        ax.plot(100 * s["mean"], y, "|", color="k", ms=14, mew=2)
    ax.set_yticks(range(len(arms)), list(arms))
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("held-out accuracy (%): seeds (dots), mean (bar), 95 % interval")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
