"""Alternated rounds on a noisy machine: every configuration runs once per round, in the same order,
so that the machine's swings land on all of them alike; a configuration is then judged by its
median over rounds and by the median of its ratio to the baseline *in the same round* (the
paired median), each with a distribution-free interval."""

import math
import statistics

from .jsonio import emit


def alternate(labels, rounds, run, out=None):
    """run(label, round) -> dict for every round 1..ROUNDS and every label in order; an exception
    becomes {"error": ...}. Every row gets "label" and "round" and is printed as a JSON line (and
    appended to the file OUT). Returns the rows."""
    rows = []
    for r in range(1, rounds + 1):
        for label in labels:
            try:
                row = dict(run(label, r) or {})
            except Exception as e:  # noqa: BLE001 - one failed run must not end the others
                row = {"error": f"{type(e).__name__}: {e}"}
            row = {"label": label, "round": r, **row}
            rows.append(emit(row, *([out] if out else [])))
    return rows


def median_interval(xs, confidence=0.95):
    """(median, low, high, achieved) of XS: the interval between the order statistics that cover
    the median with at least CONFIDENCE (binomial, no assumption on the distribution). With too few
    values for that confidence it is [min, max] and `achieved` says what that covers."""
    xs = sorted(x for x in xs if x is not None)
    n = len(xs)
    if not n:
        return None, None, None, 0.0
    # P(the median lies outside [x_(k), x_(n-k+1)]) = 2 * P(Binomial(n, 1/2) < k)
    def cover(k):
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n
    k = 1
    while k + 1 <= (n + 1) // 2 and cover(k + 1) >= confidence:
        k += 1
    return statistics.median(xs), xs[k - 1], xs[n - k], round(cover(k), 4)


def _stat(xs, digits):
    m, lo, hi, conf = median_interval(xs)
    if m is None:
        return {"median": None}
    return {"median": round(m, digits), "low": round(lo, digits), "high": round(hi, digits), "confidence": conf}


def summarize(rows, metrics, baseline=None, digits=3):
    """Per label (in first-seen order): ok rounds, each metric's median with its interval, and with
    BASELINE (default the first label) each metric's paired ratio to the baseline's same round."""
    ok = [r for r in rows if "error" not in r]
    labels = list(dict.fromkeys(r["label"] for r in rows))
    baseline = baseline or (labels[0] if labels else None)
    base = {r["round"]: r for r in ok if r["label"] == baseline}
    out = {"baseline": baseline, "rounds": max((r["round"] for r in rows), default=0)}
    for label in labels:
        mine = [r for r in ok if r["label"] == label]
        s = {"ok_rounds": len(mine)}
        for m in metrics:
            s[m] = _stat([r.get(m) for r in mine], digits)
            if label != baseline:
                s[m + "_ratio"] = _stat([r[m] / base[r["round"]][m] for r in mine
                                         if r["round"] in base and r.get(m) is not None and base[r["round"]].get(m)], digits)
        out[label] = s
    return out
