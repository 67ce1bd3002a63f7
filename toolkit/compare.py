"""Compare systems against a baseline on per-query values: win/tie/loss, paired significance tests, a
bootstrap confidence interval of the mean difference (`bootstrap_ci`, the one interval every report of a
difference uses), and Holm's correction across the systems.

The randomisation test is the paired sign-flip permutation test usual in IR (Smucker, Allan & Carterette
2007): under H0 each per-query difference is as likely to have either sign. It is vectorised as one matrix
product per chunk of permutations; with few queries (2^n <= n_permutations) every sign pattern is
enumerated and the p-value is exact. Random numbers come from a generator seeded by the per-query
differences themselves (and the user's seed): the same two runs give the same p whatever they are called or
wherever their files lie, and adding or reordering other systems changes nothing. A sampled p that could
decide a star (below 2 x alpha) is refined with ten times the permutations, so its Monte Carlo error
(about 0.002 at p = 0.05 with 10,000) no longer flips verdicts near alpha (user trial P: the same two runs
got p = 0.0512 or 0.047 by the path's spelling, when the name seeded the generator).
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
import polars as pl

from .errors import InputError
from .interop import _to_polars

# Below this many queries a p-value is shown with a note: a t-test's normality cannot be checked, and the
# randomisation test's exact p-values come in steps of 2 / 2^n (Sakai 2014 and Urbano et al. 2019 use 25-50+).
MIN_QUERIES = 10
_TIE = 1e-12  # values computed the same way for the same ranking are bit-equal; this only absorbs rounding
_CHUNK = 1 << 21  # matrix cells per chunk: bounds memory (~16 MB as float64) whatever the query count


# What the randomisation test is, in words, for outputs that print its p-values.
N_PERMUTATIONS = 10_000  # sampled sign patterns, and REFINE times as many for a p below 2 x alpha
REFINE = 10
TEST_WORDS = (f"paired randomisation test (sign flips; exact when 2^n <= permutations, else {N_PERMUTATIONS:,} sampled, "
              f"{REFINE * N_PERMUTATIONS:,} when p < 2 x alpha), Holm-corrected across the compared systems")


class SmallSampleWarning(UserWarning):
    """Too few paired queries for the significance test to mean much (`small_sample_note` says why)."""


def smallest_p(n: int, test: str = "randomization", n_systems: int = 1) -> float:
    """The smallest p-value `test` can give on `n` paired queries, after Holm over `n_systems` comparisons
    (Holm multiplies the smallest p by their number). The exact sign-flip test counts the observed sign
    pattern and its mirror, so its p is at least 2 / 2^n; a t-test can give any p."""
    if n <= 0:
        return 1.0
    p = math.ldexp(1.0, 1 - n) if test == "randomization" else 0.0  # 2 / 2^n; 2.0**n overflowed from n = 1,024
    return min(1.0, p * max(n_systems, 1))


def small_sample_note(n: int, *, test: str = "randomization", alpha: float = 0.05, n_systems: int = 1) -> str | None:
    """Words for a reader of p-values on `n` queries, or None when there are enough: either no difference
    can reach `alpha` at all, or `n` is below `MIN_QUERIES`."""
    floor = smallest_p(n, test, n_systems)
    if floor > alpha:
        holm_words = f" after Holm over {n_systems} systems" if n_systems > 1 else ""
        return (f"{n} queries: the smallest p-value the {test} test can give is {floor:.3g}{holm_words}, above alpha "
                f"{alpha:g}, so no difference can be significant; judge more queries")
    if n < MIN_QUERIES:
        return (f"only {n} queries: p-values from so few queries are unreliable, and a bootstrap interval from them is "
                "wide, and still covers the true difference less often than it says; judge at least "
                f"{MIN_QUERIES} before claiming a win")
    return None


def holm(p_values: np.ndarray | list[float]) -> np.ndarray:
    """Holm-Bonferroni step-down adjusted p-values (NaN stays NaN and is not counted).

    Hand-written because scipy only ships Benjamini-Hochberg (`false_discovery_control`) and statsmodels
    is not a dependency; it is six lines. Adjusted p_(i) = max_{j<=i} min(1, (m - j + 1) p_(j)).
    """
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    m = int(ok.sum())
    if m == 0:
        return out
    idx = np.flatnonzero(ok)[np.argsort(p[ok], kind="stable")]
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[idx]))
    out[idx] = adj
    return out


def randomization_test(
    diff: np.ndarray, n_permutations: int = N_PERMUTATIONS, seed: int | list[int] = 0, refine_below: float = 0.0
) -> float:
    """Two-sided paired sign-flip test of mean(diff) == 0; p = (1 + #{|perm mean| >= |observed|}) / (1 + P).

    The +1 counts the observed assignment itself (Phipson & Smyth 2010), so a sampled p is never 0. A
    sampled p below `refine_below` is sampled again with `REFINE` x `n_permutations` (exact when 2^n allows).
    """
    d = np.asarray(diff, dtype=float)
    n = d.size
    if n == 0:
        return float("nan")
    obs = abs(d.sum())
    tol = 1e-9 * max(1.0, np.abs(d).sum())
    # Under H0 each difference takes either sign, so the null distribution of the sum depends only on the
    # sizes |d|: sampled over them in sorted order, p is the same for A vs B and B vs A and whatever order
    # or names the queries come in (only the observed sum keeps the signs).
    d = np.sort(np.abs(d))
    exact, chunks = flip_patterns(n, n_permutations, seed)
    total, hits = d.sum(), 0
    for flip in chunks:
        # Sum with the flipped signs = total - 2 * (sum of the flipped values).
        hits += int(np.count_nonzero(np.abs(total - 2.0 * (flip @ d)) >= obs - tol))
    if exact:
        return hits / 2**n
    p = (hits + 1) / (n_permutations + 1)
    if p < refine_below:
        return randomization_test(diff, REFINE * n_permutations, seed)
    return p


def flip_patterns(n: int, n_permutations: int, seed: int | list[int]) -> tuple[bool, Iterator[np.ndarray]]:
    """The sign patterns of a paired sign-flip test on `n` queries, in chunks of rows of 0.0 / 1.0 (1 = that query's
    difference changes sign): every one of the 2^n (the identity among them: exact, no sampling error) when
    2^n <= `n_permutations`, else `n_permutations` drawn at random. Returns (exact, chunks). Chunks bound memory
    whatever the query count. One generator for every sign-flip test (`randomization_test`, the tuner's
    selection-aware test in `toolkit.tune`)."""
    rows = max(1, _CHUNK // max(n, 1))

    def enumerate_all() -> Iterator[np.ndarray]:
        for start in range(0, 2**n, rows):
            yield ((np.arange(start, min(start + rows, 2**n))[:, None] >> np.arange(n)) & 1).astype(np.float64)

    def sample() -> Iterator[np.ndarray]:
        rng = np.random.default_rng(seed)
        done = 0
        while done < n_permutations:
            b = min(rows, n_permutations - done)
            # Random bytes unpacked to bits are ~2x faster than integers(0, 2) and feed a BLAS float product.
            raw = np.frombuffer(rng.bytes(b * ((n + 7) // 8)), dtype=np.uint8).reshape(b, -1)
            yield np.unpackbits(raw, axis=1, count=n).astype(np.float64)
            done += b

    exact = n <= 30 and 2**n <= n_permutations
    return exact, enumerate_all() if exact else sample()


def bootstrap_ci(
    diff: np.ndarray, n_resamples: int = 10_000, level: float = 0.95, seed: int | list[int] = 0,
    bounds: tuple[float, float] | None = None,
) -> tuple[float, float]:
    """Interval of the mean difference over queries: the symmetric studentised bootstrap (bootstrap-t; Hall 1988,
    "On symmetric bootstrap confidence intervals", JRSS B 50:35-45). Queries are resampled with replacement (paired)
    and each resample's |mean - observed mean| / its own standard error is bootstrapped; the interval is the observed
    mean +- that statistic's `level` quantile times the observed standard error. `bounds`: the range the mean can
    take (the interval is clipped to it; `compare` passes (-1, 1) for values in [0, 1]).

    Why not the percentile interval it replaces: on skewed, tied IR differences (most queries unchanged, a few moved a
    lot; synthetic, and LoCoMo's real BM25-variant differences) it covered the true mean in 68-86% of datasets at 10
    queries and 85-93% at 30, against the 95% printed (`benchmarks/interval_coverage.py`); this one covers 81-90% at
    10 and 94-98% at 30 (95% at 100), and is wider where that one was too narrow. Why by hand: `scipy.stats.bootstrap`
    offers percentile, basic and BCa only (BCa measured no better on the same data: 71-87% at 10, 83-95% at 30;
    Student's t: 73-88%, 88-93%), and `import scipy.stats` costs ~0.6 s here. A resample whose differences are all equal has
    no standard error of its own: its deviation is scaled by the one a single differing query would give it (the
    sample's se / sqrt(n)). Infinite, it made a binary win on 19 of 20 queries [-1, 1] beside p 1e-5; the sample's se
    made mostly-tied samples too narrow; so scaled, 19/20 gives [0.73, 1] (exact binomial: [0.75, 1.00]). One query
    bounds nothing (`bounds`); every query moved by the same amount gives that amount.
    `compare` uses 2,000 resamples by default (Hall: >= 1,000 for a 95% bootstrap-t quantile).
    """
    d = np.asarray(diff, dtype=float)
    n = d.size
    if n == 0 or not np.isfinite(d).all():
        return float("nan"), float("nan")
    m = float(d.mean())
    lo_b, hi_b = bounds if bounds is not None else (-math.inf, math.inf)
    if n == 1:
        return lo_b, hi_b
    se = float(d.std(ddof=1)) / math.sqrt(n)
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    if se <= tol:  # every query moved by the same amount: no resample differs
        return m, m
    rng = np.random.default_rng(seed)
    stat = np.empty(n_resamples)
    rows, done = max(1, _CHUNK // n), 0
    while done < n_resamples:
        b = min(rows, n_resamples - done)
        x = d[rng.integers(0, n, size=(b, n), dtype=np.int32)]
        dev = np.abs(x.mean(axis=1) - m)
        s = x.std(axis=1, ddof=1) / math.sqrt(n)
        stat[done : done + b] = dev / np.where(s > tol, s, se / math.sqrt(n))
        done += b
    q = float(np.quantile(stat, level, method="higher"))  # the conservative order statistic
    return max(lo_b, m - q * se), min(hi_b, m + q * se)


def ttest(diff: np.ndarray) -> float:
    """Two-sided paired t-test p-value (scipy's ttest_rel); all-zero differences give p = 1, not NaN, one query
    NaN (no test), and differences that are all equal the exact randomisation p (2 / 2^n), not 0."""
    d = np.asarray(diff, dtype=float)
    if d.size >= 1 and np.all(np.abs(d) <= _TIE):
        return 1.0
    if d.size < 2:
        return float("nan")
    # The statistic by hand and only the t distribution from scipy (`special.stdtr`, a ufunc): `stats.ttest_rel`
    # gives the same p but spends ~4 ms per call in its array-API dispatch when torch is loaded (the lab's
    # metric panel runs three per slider move). scipy.stats also takes seconds to import on these machines.
    from scipy.special import stdtr

    n = d.size
    sd = d.std(ddof=1)
    if sd <= _TIE:
        # Every query moved by the same amount: t is infinite and the t-test's p is 0, even on 2 queries, which
        # claimed a win (user trial AY). The exact sign-flip randomisation p is the honest number here: of the
        # 2^n sign assignments only the all-plus and all-minus ones are as extreme, so p = 2 / 2^n.
        return float(min(1.0, 2.0 ** (1 - n)))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = d.mean() / (sd / np.sqrt(n))
    if np.isnan(t):
        return float("nan")
    return float(2.0 * stdtr(n - 1, -abs(t)))


def compare(
    per_query: Any,
    baseline: str,
    *,
    test: Literal["randomization", "ttest"] = "randomization",
    alpha: float = 0.05,
    n_permutations: int = N_PERMUTATIONS,
    n_bootstrap: int = 2_000,
    ci_level: float = 0.95,
    seed: int = 0,
) -> pl.DataFrame:
    """Each system against `baseline`, per measure, on [system, qid, measure, value] (e.g. `evaluate_systems`),
    or [name, qid, measure, value] (`experiment(..., per_query=True)`), as a polars or pandas frame.

    Returns [system, measure, mean, baseline_mean, delta, wins, ties, losses, p_value, p_holm, significant,
    ci_low, ci_high]: p from the chosen paired `test` ("randomization": the sign-flip test `hrt eval`
    prints, or "ttest": the paired t-test the lab shows live), `p_holm` corrected across the compared systems of
    each measure, `significant` = p_holm <= alpha, and the bootstrap CI of delta (`bootstrap_ci`). The queries of a measure
    are all queries any system has for it; a query missing for a system counts as 0 there (as a query with
    no results scores 0 in `evaluate`). With too few queries for the test to mean much it warns
    (`SmallSampleWarning`, words from `small_sample_note`).
    """
    per_query = _to_polars(per_query, "per-query frame")
    if "system" not in per_query.columns and "name" in per_query.columns:
        per_query = per_query.rename({"name": "system"})  # as `experiment(..., per_query=True)` names them
    need = [c for c in ("system", "qid", "measure", "value") if c not in per_query.columns]
    if need:
        raise InputError(
            f"per-query frame: missing column(s) {', '.join(need)} (have {', '.join(per_query.columns)})"
        )
    if test not in ("randomization", "ttest"):
        raise InputError(f"test {test!r}: expected 'randomization' or 'ttest'")
    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha {alpha!r}: expected a value between 0 and 1")
    pq = per_query.select(
        pl.col("system").cast(pl.Utf8),
        pl.col("qid").cast(pl.Utf8),
        pl.col("measure").cast(pl.Utf8),
        pl.col("value").cast(pl.Float64),
    )
    bad = pq.filter(~pl.col("value").is_finite())  # (NaN gave p 0 and a star; review)
    if len(bad):
        r = bad.row(0, named=True)
        raise InputError(f"per-query value {r['value']} (system {r['system']!r}, query {r['qid']!r}, measure "
                         f"{r['measure']!r}) is not a number: a measure's value must be finite")
    systems = pq["system"].unique(maintain_order=True).to_list()
    if baseline not in systems:
        raise InputError(f"baseline {baseline!r}: no such system (have {', '.join(systems) or 'none'})")
    others = [s for s in systems if s != baseline]

    rows: list[dict] = []
    notes: set[str] = set()
    for measure in pq["measure"].unique(maintain_order=True).to_list():
        wide = (
            pq.filter(pl.col("measure") == measure)
            .pivot(on="system", index="qid", values="value", aggregate_function="mean")
            .fill_null(0.0)
            .sort("qid")  # the differences seed the tests: one order for the same data
        )
        base = wide[baseline].to_numpy() if baseline in wide.columns else np.zeros(len(wide))
        if others and (note := small_sample_note(len(wide), test=test, alpha=alpha, n_systems=len(others))):
            notes.add(note)
        block = []
        for s in others:
            vals = wide[s].to_numpy() if s in wide.columns else np.zeros(len(wide))
            d = vals - base
            p = (
                ttest(d)
                if test == "ttest"
                else randomization_test(d, n_permutations, seed=_seed(seed, d), refine_below=2 * alpha)
            )
            # Values of the toolkit's measures lie in [0, 1], so their mean difference lies in [-1, 1].
            unit = bool(vals.size) and min(vals.min(), base.min()) >= 0.0 and max(vals.max(), base.max()) <= 1.0
            lo, hi = bootstrap_ci(d, n_bootstrap, ci_level, seed=_seed(seed + 1, d), bounds=(-1.0, 1.0) if unit else None)
            block.append(
                {
                    "system": s,
                    "measure": measure,
                    "mean": float(vals.mean()) if vals.size else float("nan"),
                    "baseline_mean": float(base.mean()) if base.size else float("nan"),
                    "delta": float(d.mean()) if d.size else float("nan"),
                    "wins": int(np.count_nonzero(d > _TIE)),
                    "ties": int(np.count_nonzero(np.abs(d) <= _TIE)),
                    "losses": int(np.count_nonzero(d < -_TIE)),
                    "p_value": p,
                    "ci_low": lo,
                    "ci_high": hi,
                }
            )
        adj = holm([r["p_value"] for r in block])
        for r, a in zip(block, adj, strict=True):
            r["p_holm"] = float(a)
            r["significant"] = bool(a <= alpha) if not np.isnan(a) else False
        rows += block
    for note in sorted(notes):
        warnings.warn(f"compare: {note}", SmallSampleWarning, stacklevel=2)
    schema = {
        "system": pl.Utf8,
        "measure": pl.Utf8,
        "mean": pl.Float64,
        "baseline_mean": pl.Float64,
        "delta": pl.Float64,
        "wins": pl.Int64,
        "ties": pl.Int64,
        "losses": pl.Int64,
        "p_value": pl.Float64,
        "p_holm": pl.Float64,
        "significant": pl.Boolean,
        "ci_low": pl.Float64,
        "ci_high": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)


def interval_disagrees(p: float, ci: tuple[float, float], alpha: float, what: str = "95% bootstrap interval",
                       holm: bool = True) -> str | None:
    """Words for an interval of the difference that says otherwise than the test, else None. The interval and the test
    are different methods and can part near alpha (user trial AU: the demo's MRR@10 [0.003, 0.190] beside p (Holm)
    0.055, no star, when the interval was the narrower percentile bootstrap). The verdict is the test's; the reader
    must be told. `what` names the interval."""
    if not np.isfinite(p):
        return None
    excludes_zero = ci[0] > 0 or ci[1] < 0
    if excludes_zero and p >= alpha:
        why = "the interval is not corrected for several systems, as the p (Holm) is, and " if holm else ""
        return (f"the {what} excludes 0 while the test's p is >= {alpha:g}: {why}an interval and a test can part near "
                "alpha; the verdict follows the test")
    if not excludes_zero and p < alpha:
        return f"the {what} includes 0 while the test's p is < {alpha:g}; the verdict follows the test"
    return None


def interval_notes(sig: pl.DataFrame, alpha: float = 0.05) -> list[str]:
    """`interval_disagrees` for each row of `compare`'s output, naming system and measure, against the p its verdict
    reads (`p_holm`, where a report shows stars by it; else `p_value`)."""
    out = []
    p_col = "p_holm" if "p_holm" in sig.columns else "p_value"
    for r in sig.iter_rows(named=True):
        if words := interval_disagrees(r[p_col], (r["ci_low"], r["ci_high"]), alpha):
            out.append(f"{r['system']}, {r['measure']}: {words}")
    return out


def _seed(seed: int, diff: np.ndarray) -> list[int]:
    """A seed sequence from the user's seed and the sizes of the per-query differences (rounded to 12 digits,
    sorted; + 0.0 turns -0.0 into 0.0): the same data give the same p whatever the systems or queries are
    called, in whichever order or direction they are compared."""
    sizes = np.sort(np.abs(np.round(np.asarray(diff, dtype=float), 12))) + 0.0
    return [seed, *hashlib.sha256(sizes.tobytes()).digest()[:16]]
