"""Stage 7b: document priors (recency, priority, use) after blending and before dedup.

Agent memory is not a static corpus: a fact said last week supersedes one said last year, a memory marked
P0 matters more than small talk, and a memory recalled often is worth keeping on top. Each prior is a
factor per (query, document) read from the documents' typed metadata (`store.doc_values`):

    recency   floor + (1 - floor) * 0.5 ** (age_days / half_life_days)
              age = |reference time - document date|; the reference time is the query's own date
              (metadata field `recency_query_field`, as memory benchmarks date their questions, or `hrt
              search --as-of`), else `priors.as_of` when the config sets it (`hrt run --as-of`: evaluation
              that must not drift), else now. A document dated after its reference decays by how far ahead
              it is (`recency_future: decay`), and is flagged `dated_after_reference` when the query is
              asked as of a time (its date, or `priors.as_of`); `exclude` drops it
              (asked as of June, a memory written in December did not exist yet: with a long half-life,
              decay alone still lets it outrank May's as "the most recent"); `fresh` gives it factor 1
              (documents dated ahead on purpose: deadlines, scheduled events).
    priority  priority_map[value of priority_field] (value as text: 0, "P1", "high")
    use       1 + use_weight * ln(1 + max(value, 0))    (a count, log-damped: 10 uses is not 10x one use)

A document without the field, or with a value the mapping lacks, gets factor 1 (neutral); priority values
are matched without case or surrounding space ("p0" is "P0"), and values the mapping lacks are listed by
`unmapped_priorities` (the pipeline warns: "high" under a P0-P3 map would otherwise count as the lowest tier
without a word). A document without a date counts as new (`recency_missing: fresh`, factor 1) or as old as
the floor allows (`floor`). `combine`:
"multiply" scales the score by the product of the factors (a negative score is divided instead, so a
larger factor always ranks higher), "add" adds `add_weight * sum(factor - 1)`. The documents are then
re-ranked by the new score (ties keep their blended order); with `top_n`, only the blended top_n are
re-weighted and the rest follow in their blended order (agent-memory re-weights its limit * 2 candidates). The factors stay on every row as
`prior_recency`, `prior_priority`, `prior_use` (null for a prior that is off; 1 below top_n, where none
applied) and the score before the priors as `score_before_priors`, so the trace, the final list and `hrt
search` show what each prior did.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import polars as pl

from .blend import scores_below
from .config import PriorsConfig
from .metatypes import is_date_field

FACTOR_COLUMNS = ("prior_recency", "prior_priority", "prior_use")
FUTURE_FLAG = "dated_after_reference"  # a document dated after its query's reference time (the as-of)
_FUTURE = "_after_reference"
_LN_RECENCY = "_ln_recency"  # the recency factor's logarithm, for ranking without underflow
_US_PER_DAY = 86_400e6


def active(cfg: PriorsConfig) -> bool:
    """True when at least one prior is configured (otherwise the stage is skipped)."""
    return any(f is not None for f in (cfg.recency_field, cfg.priority_field, cfg.use_field))


def utc_now() -> datetime:
    """Now as a naive UTC datetime (the store keeps dates that way)."""
    return datetime.now(UTC).replace(tzinfo=None)


def reference_time(cfg: PriorsConfig) -> datetime | None:
    """`priors.as_of` as a naive UTC datetime (an aware one converted), None when unset (then the clock)."""
    if cfg.as_of is None:
        return None
    t = datetime.fromisoformat(cfg.as_of)
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo is not None else t


def _field(values: pl.DataFrame, key: str, field: str, column: str, alias: str) -> pl.DataFrame:
    """[key, alias]: one value per key for `field` (the first when a key has several)."""
    return (
        values.filter((pl.col("field") == field) & pl.col(column).is_not_null())
        .select(pl.col(key).cast(pl.Utf8), pl.col(column).alias(alias))
        .unique(key, keep="first", maintain_order=True)
    )


def prior_factors(
    ranked: pl.DataFrame,
    doc_values: pl.DataFrame,
    query_values: pl.DataFrame,
    cfg: PriorsConfig,
    *,
    now: datetime,
) -> pl.DataFrame:
    """`ranked` with the three factor columns added (Float64; 1.0 = neutral; null for a prior that is off)."""
    r = ranked
    if cfg.recency_field is not None:
        r = r.join(_field(doc_values, "doc_id", cfg.recency_field, "ts", "_doc_ts"), on="doc_id", how="left", maintain_order="left")
        r = r.join(_field(query_values, "qid", cfg.recency_query_field, "ts", "_ref_ts"), on="qid", how="left", maintain_order="left")
        ref = pl.coalesce(pl.col("_ref_ts"), pl.lit(now, pl.Datetime("us")))
        delta = (ref - pl.col("_doc_ts")).dt.total_microseconds().cast(pl.Float64) / _US_PER_DAY
        age = delta.abs() if cfg.recency_future != "fresh" else delta.clip(lower_bound=0.0)
        decay = pl.lit(0.5) ** (age / cfg.recency_half_life_days)
        undated = 1.0 if cfg.recency_missing == "fresh" else cfg.recency_floor
        rec = (cfg.recency_floor + (1.0 - cfg.recency_floor) * decay).fill_null(undated)
        # The factor's logarithm, exact where the factor itself underflows (a floor of 0 and ~1,000 half-lives:
        # a 5-day half-life over 14 years); `apply_priors` ranks by it (`_LN_RECENCY`, dropped there).
        ln_rec = (-(age / cfg.recency_half_life_days) * math.log(2.0)) if cfg.recency_floor == 0 else rec.log()
        ln_undated = math.log(undated) if undated > 0 else -math.inf
        # Ahead of an as-of time (the query's date, or `priors.as_of`), not of the clock: a deadline dated next
        # week is no memory "from the future" when nobody asked as of a time.
        asked = pl.col("_ref_ts").is_not_null() | pl.lit(cfg.as_of is not None)
        r = r.with_columns(rec.alias("prior_recency"), ln_rec.fill_null(ln_undated).alias(_LN_RECENCY),
                           ((delta < 0) & asked).fill_null(False).alias(_FUTURE)).drop("_doc_ts", "_ref_ts")
    else:
        r = r.with_columns(pl.lit(None, pl.Float64).alias("prior_recency"))
    if cfg.priority_field is not None:
        r = r.join(_field(doc_values, "doc_id", cfg.priority_field, "text", "_prio"), on="doc_id", how="left", maintain_order="left")
        mapping = _folded(cfg.priority_map)
        pri = _fold(pl.col("_prio")).replace_strict(list(mapping), list(mapping.values()), default=1.0, return_dtype=pl.Float64)
        r = r.with_columns(pri.fill_null(1.0).alias("prior_priority")).drop("_prio")
    else:
        r = r.with_columns(pl.lit(None, pl.Float64).alias("prior_priority"))
    if cfg.use_field is not None:
        r = r.join(_field(doc_values, "doc_id", cfg.use_field, "num", "_use"), on="doc_id", how="left", maintain_order="left")
        use = 1.0 + cfg.use_weight * pl.col("_use").clip(lower_bound=0.0).log1p()
        r = r.with_columns(use.fill_null(1.0).alias("prior_use")).drop("_use")
    else:
        r = r.with_columns(pl.lit(None, pl.Float64).alias("prior_use"))
    return r


def _folded(mapping: dict[str, float]) -> dict[str, float]:
    """The priority map keyed as values are compared: without case or surrounding space (the first key wins)."""
    out: dict[str, float] = {}
    folded = pl.Series(list(mapping), dtype=pl.Utf8).to_frame("k").select(_fold(pl.col("k")))["k"].to_list()
    for k, f in zip(folded, mapping.values(), strict=True):
        out.setdefault(k, f)
    return out


def _fold(e: pl.Expr) -> pl.Expr:
    # Surrounding whitespace off and lower case (polars has no casefold), for map keys and values alike: P0 and p0 are one tier.
    return e.str.strip_chars().str.to_lowercase()


def unusable_fields(doc_values: pl.DataFrame | None, cfg: PriorsConfig) -> list[str]:
    """What makes a configured prior neutral without a word, in sentences for a warning: a recency field no
    candidate holds as a date (a name not typed as a date: `last_seen`, `when`; or a field nobody has), and
    use-field values that are not JSON numbers ("10", true)."""
    if doc_values is None:
        return []
    out = []
    if cfg.recency_field is not None and not is_date_field(cfg.recency_field):
        # Undated memories under a date-named field are a documented state (they count as new); a name that is
        # never typed as a date (`last_seen`, `when`) leaves the prior neutral for every memory.
        out.append(f"priors.recency_field {cfg.recency_field!r} is never read as a date: only fields named date, "
                   "datetime, timestamp, created, updated, modified or ending in _at, _date, _time are; the recency "
                   "prior is neutral (factor 1)")
    elif cfg.recency_field is not None and not (doc_values["field"] == cfg.recency_field).any() and (
            dated := doc_values.filter(pl.col("ts").is_not_null())["field"].unique().sort().to_list()):
        # Undated memories are a documented state (they count as new), but candidates dated under another field are
        # a field named otherwise (user trial BK: memories dated in `created_at` under agent-memory's `date`, and the
        # old fact outranked the new one in silence).
        out.append(f"priors.recency_field {cfg.recency_field!r}: no candidate has that field, so the recency prior is "
                   f"neutral (factor 1) for all; they are dated in {', '.join(repr(f) for f in dated[:3])} (set "
                   "priors.recency_field to it)")
    if cfg.use_field is not None:
        odd = doc_values.filter((pl.col("field") == cfg.use_field) & pl.col("num").is_null())["text"].unique().sort().to_list()
        if odd:
            shown = ", ".join(repr(v) for v in odd[:5]) + (f" and {len(odd) - 5} more" if len(odd) > 5 else "")
            out.append(f"priors.use_field {cfg.use_field!r}: values {shown} are not numbers (a JSON number is): "
                       "they count as factor 1")
    return out


def unmapped_priorities(doc_values: pl.DataFrame | None, cfg: PriorsConfig) -> list[str]:
    """The distinct priority values of `doc_values` the map does not name (sorted; [] when the prior is off).
    They get the neutral factor 1, which under agent-memory's map is the lowest tier: a caller says so."""
    if cfg.priority_field is None or doc_values is None or not len(doc_values):
        return []
    vals = _field(doc_values, "doc_id", cfg.priority_field, "text", "_prio").select(
        pl.col("_prio"), _fold(pl.col("_prio")).alias("_key")).unique()  # folded as `prior_factors` folds them
    known = set(_folded(cfg.priority_map))
    return sorted(v for v, k in vals.iter_rows() if k not in known)


def apply_priors(
    ranked: pl.DataFrame,
    doc_values: pl.DataFrame | None,
    query_values: pl.DataFrame | None,
    cfg: PriorsConfig,
    *,
    now: datetime | None = None,
) -> pl.DataFrame:
    """Re-score and re-rank `ranked` ([qid, doc_id, score, rank, ...], any order) by the configured priors.

    `now` (naive UTC; default `priors.as_of`, else the current time) is the reference for queries without a
    date: tests and benchmarks pass a fixed one so results do not drift with the clock."""
    from .metatypes import values_frame

    now = now or reference_time(cfg) or utc_now()
    dv = doc_values if doc_values is not None else values_frame([], "doc_id")
    qv = query_values if query_values is not None else values_frame([], "qid")
    if now.tzinfo is not None:  # an aware `now` (Python API): the store keeps naive UTC
        now = now.astimezone(UTC).replace(tzinfo=None)
    if not len(ranked):
        return ranked.with_columns(
            *(pl.lit(None, pl.Float64).alias(c) for c in FACTOR_COLUMNS), pl.col("score").alias("score_before_priors")
        )
    r = prior_factors(ranked, dv, qv, cfg, now=now)
    if _LN_RECENCY not in r.columns:
        r = r.with_columns(pl.lit(0.0).alias(_LN_RECENCY), pl.lit(False).alias(_FUTURE))
    if r[_FUTURE].any():
        if cfg.recency_future == "exclude":  # it did not exist yet at the as-of time; ranks close up, in rank order
            r = r.filter(~pl.col(_FUTURE)).with_columns(pl.col("rank").rank("ordinal").over("qid").cast(pl.Int64))
        elif cfg.recency_future == "decay" and "flags" in r.columns:  # `fresh`: dated ahead on purpose
            r = r.with_columns(pl.when(pl.col(_FUTURE)).then(pl.col("flags").list.concat(pl.lit([FUTURE_FLAG], pl.List(pl.Utf8))))
                               .otherwise(pl.col("flags")).alias("flags"))
    r = r.drop(_FUTURE)
    factors = [pl.col(c).fill_null(1.0) for c in FACTOR_COLUMNS]
    s = pl.col("score")
    if cfg.combine == "multiply":
        # Ranked in log space: the product of tiny factors underflows (and was clipped at 1e-12, so a short
        # half-life tied every old memory and gave back the order without the prior, silently). The key is
        # ln|score| + ln(product), its sign flipped below 0 (a negative score is divided by the product).
        ln_prod = pl.col(_LN_RECENCY) + factors[1].log() + factors[2].log()
        prod = ln_prod.exp()
        new = pl.when(s >= 0).then(s * prod).otherwise(s / prod)
        mag = s.abs().log()
        key = pl.when(s > 0).then(mag + ln_prod).when(s < 0).then(-(mag - ln_prod)).otherwise(0.0)
        sign = pl.when(s > 0).then(1).when(s < 0).then(-1).otherwise(0)
    else:
        new = s + cfg.add_weight * ((factors[0] - 1.0) + (factors[1] - 1.0) + (factors[2] - 1.0))
        key, sign = new, pl.lit(0)
    r = r.with_columns(s.alias("score_before_priors"), new.alias("score"), key.alias("_key"), sign.alias("_sign"))
    r = r.drop(_LN_RECENCY)
    if cfg.top_n is None:
        r = r.sort(["qid", "_sign", "_key", "rank"], descending=[False, True, True, False], maintain_order=True)
        return r.drop("_key", "_sign").with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank"))
    # Re-weighted top_n first, then the rest in their blended order, scored strictly below the block.
    tail = pl.col("rank") > cfg.top_n
    r = r.with_columns(tail.alias("_tail"), *(pl.when(tail).then(0).otherwise(pl.col(c)).alias(c) for c in ("_sign", "_key")))
    r = r.sort(["qid", "_tail", "_sign", "_key", "rank"], descending=[False, False, True, True, False], maintain_order=True).drop("_sign", "_key")
    floor = pl.col("score").filter(~pl.col("_tail")).min().over("qid")
    pos = pl.col("_tail").cast(pl.Int64).cum_sum().over("qid")
    below = scores_below(floor, pos, pl.col("_tail").sum().over("qid"))
    # A row below top_n was not re-weighted: its factors read 1 (neutral), so no output claims a prior moved it.
    unused = [pl.when(pl.col("_tail") & pl.col(c).is_not_null()).then(1.0).otherwise(pl.col(c)).alias(c) for c in FACTOR_COLUMNS]
    return r.with_columns(
        pl.when(pl.col("_tail")).then(pl.coalesce(below, pl.col("score_before_priors"))).otherwise(pl.col("score")).alias("score"),
        pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank"),
        *unused,
    ).drop("_tail")


def factor_flags(df: pl.DataFrame) -> pl.Expr:
    """Flags naming each active prior's factor ("recency=0.707"), for the trace's priors stage."""
    parts = [
        pl.when(pl.col(c).is_not_null()).then(pl.format(f"{c.removeprefix('prior_')}={{}}", pl.col(c).round(4)))
        for c in FACTOR_COLUMNS
        if c in df.columns and df[c].null_count() < len(df)
    ]
    if not parts:
        return pl.col("flags")
    return pl.col("flags").list.concat(pl.concat_list(parts).list.drop_nulls())
