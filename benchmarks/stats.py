"""Seeds to statements: mean with a 95 % t-interval, Welch's t-test, Holm's correction."""
import math

import numpy as np
from scipy import stats

LEVEL = 0.95     # confidence of every interval
ALPHA = 0.05     # family-wise error rate of the significance statements (Holm)


def mean_interval(values, level: float = LEVEL) -> dict:
    """{"mean", "low", "high", "n", "values"}: Student's t interval over the seeds (no interval
    from one value)."""
    x = np.asarray(values, np.float64)
    n, mean = len(x), float(np.mean(x))
    if n < 2:
        return {"mean": mean, "low": math.nan, "high": math.nan, "n": n, "values": x.tolist()}
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * np.std(x, ddof=1) / math.sqrt(n))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n, "values": x.tolist()}


def welch_p(a, b) -> float:
    """Two-sided p of Welch's t-test (unequal variances); 1.0 when neither varies and the
    means are equal, 0.0 when neither varies and they differ."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if len(a) < 2 or len(b) < 2:
        return math.nan
    if np.std(a) == 0 and np.std(b) == 0:
        return 1.0 if np.mean(a) == np.mean(b) else 0.0
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def holm(pvalues: dict, alpha: float = ALPHA) -> dict:
    """{name: significant?} by Holm's step-down method over the family; NaN is never significant."""
    ordered = sorted((p, name) for name, p in pvalues.items() if not math.isnan(p))
    out = {name: False for name in pvalues}
    for rank, (p, name) in enumerate(ordered):
        if p > alpha / (len(ordered) - rank):
            break
        out[name] = True
    return out
