"""Fusion method `learned`: a LambdaMART model (LightGBM) scores every candidate from its cached features.

The model file is one JSON document: the feature names it reads, LightGBM's text dump of the booster, the
calibrator (`calibration.py`) that turns its scores into P(relevant), and what it was trained on. The
package ships one (`toolkit/models/learned-fusion.json`, trained by `hrt train-fusion` on the pooled dev
splits of twelve collections: the shared four, the demo and seven built by `benchmarks/unseen_collections.py`);
`fusion.model` names another. Scores come from LightGBM's C library (`booster.py`).

The scores depend on the cached features and the model only, not on any slider, so `rescore` computes the
fused lists once per (Prepared, model file) and every later slider change reuses them: blend buckets,
dedup and thresholds still apply after it. List weights, RRF k and the rank bonus do not apply to it.
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from . import booster as booster_mod
from . import calibration, fusion, ltr_features
from . import router as router_mod
from .errors import InputError
from .files import write_text_atomic
from .provenance import overlap

FORMAT = "hrt-learned-fusion"
SHIPPED_MODEL = Path(__file__).resolve().parent / "models" / "learned-fusion.json"
SCORED_SCHEMA = {
    "qid": pl.Utf8, "doc_id": pl.Utf8, "chunk_id": pl.Utf8, "score": pl.Float64, "rank": pl.Int64, "score_prob": pl.Float64,
}  # fmt: skip


@dataclass
class FusionModel:
    """A trained LambdaMART fusion model, its calibrator and its provenance."""

    features: list[str]
    booster_text: str
    calibration: dict | None = None
    router: dict | None = None
    info: dict[str, Any] = field(default_factory=dict)
    # The trees learn a correction on top of `scale` x 30 x (plain RRF, k = 60): where they are unsure the
    # model falls back to RRF's order (30 x RRF is ~1 for a document ranked first in both lists).
    prior: dict | None = None
    _booster: Any = field(default=None, repr=False, compare=False)

    @property
    def booster(self):
        if self._booster is None:
            self._booster = booster_mod.load(self.booster_text)
        return self._booster

    def predict(self, feats: pl.DataFrame) -> np.ndarray:
        missing = [f for f in self.features if f not in feats.columns]
        if missing:
            raise InputError(f"learned fusion model needs feature(s) {', '.join(missing)} that this toolkit does not compute")
        if not len(feats):
            return np.zeros(0)
        x = feats.select(self.features).to_numpy().astype(np.float64)
        return np.asarray(self.booster.predict(x, num_threads=1), dtype=np.float64) + prior_score(feats, self.prior)

    def save(self, path: str | Path) -> Path:
        doc = {"format": FORMAT, "version": 1, "features": self.features, "prior": self.prior, "calibration": self.calibration,
               "router": self.router, "info": self.info, "booster": self.booster_text}  # fmt: skip
        return write_text_atomic(path, json.dumps(doc, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path | None = None) -> FusionModel:
        """The model file at `path` (the shipped model when None), checked field by field before LightGBM
        reads the trees: a damaged file is an InputError naming the file and the field, never a crash."""
        p = resolve(path)
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except OSError as e:
            raise InputError(f"{p}: cannot read learned fusion model: {e.strerror or e}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            where = f":{e.lineno}" if isinstance(e, json.JSONDecodeError) else ""
            msg = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8 text"
            raise InputError(f"{p}{where}: not a learned fusion model (invalid JSON: {msg})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise InputError(f"{p}: not a learned fusion model (no \"format\": \"{FORMAT}\"); train one with `hrt train-fusion`")
        for key in ("features", "booster"):
            if key not in doc:
                raise InputError(f"{p}: learned fusion model lacks field {key!r}")
        feats = doc["features"]
        if not isinstance(feats, list) or not feats or not all(isinstance(f, str) for f in feats):
            raise InputError(f"{p}: field 'features' must be a non-empty list of feature names")
        dup = sorted({f for f in feats if feats.count(f) > 1})
        if dup:
            raise InputError(f"{p}: field 'features' lists {', '.join(dup)} more than once")
        unknown = [f for f in feats if f not in ltr_features.FEATURE_NAMES]
        if unknown:
            raise InputError(f"{p}: features {', '.join(unknown)} are not computed by this toolkit version")
        problem = booster_problem(doc["booster"], feats)
        if problem:
            raise InputError(f"{p}: {problem}")
        # Optional sections, each checked by its own module's `problem` (None when sound).
        for key, check in (("calibration", calibration.problem), ("prior", _prior_problem), ("router", router_mod.problem)):
            if doc.get(key) is not None and (problem := check(doc[key])):
                raise InputError(f"{p}: field {key!r} is invalid ({problem})")
        info = doc.get("info") or {}
        if not isinstance(info, dict):
            raise InputError(f"{p}: field 'info' must be an object")
        model = cls(feats, doc["booster"], doc.get("calibration"), doc.get("router"), info, doc.get("prior"))
        try:
            model._booster = booster_mod.load(model.booster_text)
            n = model._booster.num_feature()
        except ValueError as e:  # booster_mod.BoosterError among them
            raise InputError(f"{p}: field 'booster' is not a valid LightGBM model ({str(e).strip()})") from None
        if n != len(feats):
            raise InputError(f"{p}: field 'booster' reads {n} features but field 'features' lists {len(feats)}")
        return model

    @classmethod
    def read(cls, path: str | Path | None = None) -> FusionModel:
        """`load`, once per process while the file stays the same (path, size, modification time): a service that
        prepares each search anew read, checked and parsed the shipped model again for every search (17 ms, against
        1 ms to find it here). Searches share the model read-only (LightGBM predicts under a shared lock)."""
        p = resolve(path)
        stat = p.stat()
        return _read(str(p), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)  # a lab switching between a few model files
def _read(path: str, size: int, mtime_ns: int) -> FusionModel:
    """`FusionModel.load`, keyed by the file's state as `store._checked_signature` keys the extension's: a file
    rewritten since is read again."""
    return FusionModel.load(path)


BOOSTER_END = "end of trees"
_BAD = "field 'booster' is damaged (retrain the model with `hrt train-fusion`): "


def booster_problem(text: Any, features: list[str]) -> str | None:
    """What is wrong with LightGBM model text `text` for a model reading `features`, or None.

    LightGBM aborts the process (or crashes) on a damaged model string instead of raising, so the text is
    checked first: the header, the `feature_names=` line (the model's `features`, in order), every tree
    block the `tree_sizes=` header announces (count, byte sizes, numbering) and the `end of trees` marker.
    """
    if not isinstance(text, str) or not text.startswith("tree\n"):
        return _BAD + "not a LightGBM model text: it must start with a 'tree' line"
    end = text.find(f"\n{BOOSTER_END}\n")
    if end < 0:
        return _BAD + f"no '{BOOSTER_END}' marker: the text is truncated"
    head_end = text.find("\nTree=")
    head = text[: end if head_end < 0 else head_end]
    lines = dict(ln.split("=", 1) for ln in head.splitlines() if "=" in ln)
    names = lines.get("feature_names")
    if names is None:
        return _BAD + "no feature_names= line"
    if names.split() != list(features):
        return (f"field 'features' ({len(features)} names) does not match the booster's feature_names= line "
                f"({len(names.split())} names) name for name, in order: the file was edited or mixed up")  # fmt: skip
    for key in ("num_class", "num_tree_per_iteration"):  # 0 was a division by zero inside LightGBM (review of trial AJ)
        if lines.get(key) != "1":
            return _BAD + f"{key}={lines.get(key)}: a ranking model has 1"
    if lines.get("max_feature_idx") != str(len(features) - 1):
        return _BAD + f"max_feature_idx={lines.get('max_feature_idx')} does not match {len(features)} features"
    if "tree_sizes" not in lines:
        return _BAD + "no tree_sizes= line"
    try:
        sizes = [int(x) for x in lines["tree_sizes"].split()]
    except ValueError:
        return _BAD + "tree_sizes= holds something other than numbers"
    n_trees = len(re.findall(r"^Tree=\d+$", text[:end], flags=re.M))
    if n_trees != len(sizes):
        return _BAD + f"tree_sizes= announces {len(sizes)} trees but {n_trees} Tree= blocks precede '{BOOSTER_END}'"
    tail = _tail_problem(text[end + len(BOOSTER_END) + 2 :])
    if tail:
        return _BAD + tail
    if not sizes:
        return None
    body = text[head_end + 1 : end + 1].encode("utf-8")
    if sum(sizes) != len(body) or min(sizes) <= 0:
        return _BAD + f"the tree blocks take {len(body)} bytes, tree_sizes= says {sum(sizes)}"
    off = 0
    for i, size in enumerate(sizes):
        if not body.startswith(f"Tree={i}\n".encode(), off):
            return _BAD + f"tree block {i} is not where tree_sizes= puts it"
        why = _tree_problem(body[off : off + size].decode("utf-8", "replace"), len(features))
        if why:
            return _BAD + f"tree {i}: {why}"
        off += size
    return None


# Arrays of a tree block and their lengths (n = num_leaves), as LightGBM's text parser reads them: it aborts the
# process on a length that differs, and follows feature and child indices without checking them (an index out
# of range read memory out of bounds, a child that points back looped forever: user trial AJ). Written by hand
# because LightGBM has no validating loader.
_INTERNAL = ("split_feature", "split_gain", "threshold", "decision_type", "left_child", "right_child",
             "internal_value", "internal_weight", "internal_count")
_LEAF = ("leaf_value", "leaf_weight", "leaf_count")


def _tree_problem(block: str, n_features: int) -> str | None:
    """What is wrong with one `Tree=` block of a model reading `n_features` features, or None: every array the
    right length and finite, feature indices in range, no categorical split (the trainer makes none), and the
    children form one tree (each internal node and each leaf reached exactly once, a child node numbered after
    its parent, as LightGBM numbers them)."""
    kv = dict(ln.split("=", 1) for ln in block.splitlines()[1:] if "=" in ln)
    try:
        leaves = int(kv.get("num_leaves", ""))
        arrays = {k: [float(x) for x in kv[k].split()] for k in (*_INTERNAL, *_LEAF) if k in kv}
    except ValueError:
        return "num_leaves= or an array holds something other than numbers"
    if not 1 <= leaves <= 1 << 17:
        return f"num_leaves={leaves} is out of range"
    if kv.get("num_cat", "0") != "0":
        return "a categorical split (num_cat is not 0), which this toolkit's models never have"
    if kv.get("is_linear", "0") != "0":  # its leaf_features were not checked, and an index out of range segfaulted
        return "a linear tree (is_linear), which this toolkit's models never have"
    need = ("leaf_value",) if leaves == 1 else ("split_feature", "threshold", "left_child", "right_child", "leaf_value")
    if missing := [k for k in need if k not in arrays]:
        return f"no {missing[0]}= line"
    for k, v in arrays.items():
        if leaves == 1 and k != "leaf_value":  # a one-leaf tree: LightGBM reads its leaf_value only
            continue
        n = leaves if k in _LEAF else leaves - 1
        if len(v) != n:
            return f"{k}= holds {len(v)} values, num_leaves={leaves} needs {n}"
        # LightGBM writes threshold=inf for a split that sends the missing values (NaN, e.g. vec_score of a
        # document the dense list did not return) one way and every value the other: legitimate, not damage.
        if not all(math.isfinite(x) or (k == "threshold" and math.isinf(x)) for x in v):
            return f"{k}= holds a value that is not a finite number"
    if leaves == 1:
        return None
    if any(f != int(f) or not 0 <= f < n_features for f in arrays["split_feature"]):
        return f"split_feature= names a feature outside 0..{n_features - 1}"
    if any(d != int(d) or int(d) & 1 for d in arrays.get("decision_type", [])):
        return "decision_type= holds a categorical or unknown split type"
    reached_nodes, reached_leaves = [0] * (leaves - 1), [0] * leaves
    for parent, pair in enumerate(zip(arrays["left_child"], arrays["right_child"], strict=True)):
        for c in pair:
            if c != int(c):
                return "left_child=/right_child= hold a number that is not an index"
            c = int(c)
            if c >= 0:
                if not parent < c < leaves - 1:
                    return f"node {parent} has child node {c}: children come after their parent, below {leaves - 1}"
                reached_nodes[c] += 1
            elif -c - 1 < leaves:
                reached_leaves[-c - 1] += 1
            else:
                return f"node {parent} has leaf {-c - 1}, beyond num_leaves={leaves}"
    if reached_nodes[1:] != [1] * (leaves - 2) or reached_leaves != [1] * leaves:
        return "its children do not form one tree (a node or leaf reached twice, or never)"
    return None


def _tail_problem(tail: str) -> str | None:
    """What is wrong with what follows `end of trees`: LightGBM crashes on a truncated parameters block."""
    start = tail.find("\nparameters:\n")
    stop = tail.find("\nend of parameters\n")
    if start < 0 or stop < start:
        return "its parameters block (up to 'end of parameters') is missing or truncated"
    params = [ln for ln in tail[start + len("\nparameters:\n") : stop].splitlines() if ln]
    bad = next((ln for ln in params if not re.fullmatch(r"\[[^\[\]:]+: [^\n]*\]", ln)), None)
    if bad is not None:
        return f"parameter line {bad[:40]!r} is not '[name: value]'"
    rest = tail[stop + len("\nend of parameters\n") :].strip()
    if rest:
        if not rest.startswith("pandas_categorical:"):
            return "unexpected text after 'end of parameters'"
        try:
            json.loads(rest[len("pandas_categorical:") :])
        except json.JSONDecodeError:
            return "its pandas_categorical: line is not valid JSON"
    return None


def _prior_problem(prior: Any) -> str | None:
    if not isinstance(prior, dict):
        return "expected an object {feature, scale} or null"
    feat = prior.get("feature", "rrf")
    if feat not in ltr_features.FEATURE_NAMES:
        return f"feature {feat!r} is not computed by this toolkit version"
    scale = prior.get("scale")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale)):
        return f"scale {scale!r} is not a finite number"
    if scale is not None and not 0 <= scale <= MAX_PRIOR_SCALE:  # 1e308 passed, then every score was NaN at run time
        return f"scale {scale!r} is outside [0, {MAX_PRIOR_SCALE:g}]"
    return None


MAX_PRIOR_SCALE = 1e6  # trained models use 0-2; far larger overflows the scores


def check_min_prob(model_path: str | None, min_prob: float) -> None:
    """InputError when `threshold.min_prob` > 0 but the model file gives no score_prob (no calibration)."""
    if min_prob > 0 and FusionModel.read(model_path).calibration is None:
        raise InputError(
            f"threshold.min_prob {min_prob} needs calibrated scores, but fusion.model {resolve(model_path)} has no "
            "calibration (trained with --holdout 0?): set threshold.min_prob to 0 or retrain with a holdout"
        )


def prior_score(feats: pl.DataFrame, prior: dict | None) -> np.ndarray:
    """The model's starting score before its trees: `scale` x 30 x the feature (plain RRF), or 0."""
    if not prior or not prior.get("scale"):
        return np.zeros(len(feats))
    return float(prior["scale"]) * 30.0 * feats[prior.get("feature", "rrf")].cast(pl.Float64).to_numpy()


def resolve(path: str | Path | None) -> Path:
    """The model file: `path`, or the shipped model when None."""
    p = SHIPPED_MODEL if path in (None, "") else Path(path).expanduser()
    if not p.is_file():
        hint = " (the shipped model is missing: reinstall the package)" if path in (None, "") else ""
        raise InputError(f"fusion.model: {p}: file not found{hint}")
    return p


def score(feats: pl.DataFrame, model: FusionModel) -> pl.DataFrame:
    """Ranked [qid, doc_id, chunk_id, score, rank, score_prob] for every query of `feats`.

    Ties (equal model scores) break by best list rank, then doc_id, so the order is deterministic.
    """
    if not len(feats):
        return pl.DataFrame(schema=SCORED_SCHEMA)
    s = feats.select("qid", "doc_id", "chunk_id", "best_rr").with_columns(pl.Series("score", model.predict(feats)))
    s = s.sort(["qid", "score", "best_rr", "doc_id"], descending=[False, True, True, False])
    s = s.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank"))
    prob = calibration.apply(model.calibration, calibration.inputs(s)) if model.calibration else np.full(len(s), np.nan)
    # A probability never rises down the model's own ranking: a calibrator fitted with collinear inputs (score,
    # gap to the top, log rank) could give rank 2 more than rank 1, and threshold.min_prob then dropped rank 1
    # and kept rank 2. Each row gets at most the probability of every row ranked above it in its query.
    s = s.with_columns(pl.Series("score_prob", prob).fill_nan(None))
    s = s.with_columns(pl.col("score_prob").cum_min().over("qid"))
    return s.select(list(SCORED_SCHEMA))


# The lists a model's features come from: (setting that switches the list off, feature name prefixes).
LIST_FEATURES = {
    "lexical": ("retrieval.lexical.enabled", ("lex_", "q_lex_")),
    "dense": ("retrieval.dense.enabled", ("vec_", "q_vec_")),
}
_WARNED: set[str] = set()  # the warnings below already given in this process (model file + what was found)


def _warn_once(key: str, message: str) -> None:
    """A UserWarning the first time `key` is seen: a lab re-scores the same model many times a minute."""
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, UserWarning, stacklevel=4)


def warn_disabled_lists(model: FusionModel, path: Path, settings: dict[str, Any] | None) -> None:
    """UserWarning (once per model file and set of lists) when the model reads features of a list that the
    config switches off: every candidate then looks "not retrieved" by it, which the model never saw in
    training, so it ranks worse than it should and its score_prob means nothing. Not an error: comparing
    the setting is a fair thing to do in the lab."""
    if not settings:
        return
    read = {name: [f for f in model.features if f.startswith(prefixes)] for name, (key, prefixes) in LIST_FEATURES.items()
            if settings.get(key) is False}  # fmt: skip
    read = {name: feats for name, feats in read.items() if feats}
    if not read:
        return
    what = "; ".join(f"the {name} list ({LIST_FEATURES[name][0]} is false) through {', '.join(feats[:4])}"
                     + (f" and {len(feats) - 4} more" if len(feats) > 4 else "") for name, feats in read.items())  # fmt: skip
    _warn_once(
        f"lists:{path}:{sorted(read)}",
        f"learned fusion model {path} reads features of {what}: it scores every candidate as not retrieved by that "
        "list, which it was not trained on, so its ranking may be worse than the lists alone and score_prob is not "
        "calibrated for this setting (switch the list back on, or use fusion.method rrf)",
    )


def training_overlap(model_path: str | None, dataset: str, split: str | None, qids: list[str],
                     texts: list[str] | None = None) -> tuple[int, str]:
    """(how many of `qids` the model was trained on, "dataset/split" it recorded) for a run of `dataset`'s
    queries: its scores on those are in-sample. A model file that lists its query ids is matched on them; an
    older one on the dataset's name and split. Given `texts`, a collection the model recorded `query_keys` of
    is found under any name (user trial P: a copy of the demo in another folder was never flagged)."""
    model = FusionModel.load(model_path)
    trained = model.info.get("trained_on") or {}
    if texts is not None and any(isinstance(r, dict) and isinstance(r.get("query_keys"), list) for r in trained.values()):
        # The recorded queries themselves, under any dataset name (and none of another collection's with the name).
        for name, r in trained.items():
            if isinstance(r, dict) and isinstance(r.get("query_keys"), list) and (n := overlap(r["query_keys"], qids, texts)):
                return n, f"{name}/{r.get('split', 'dev')}"
        return 0, ""
    rec = trained.get(dataset)
    if not isinstance(rec, dict):
        return 0, ""
    where = f"{dataset}/{rec.get('split', 'dev')}"
    if isinstance(rec.get("qids"), list):
        return len(set(map(str, qids)) & set(map(str, rec["qids"]))), where
    return (len(qids) if split == rec.get("split", "dev") else 0), where


def feature_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The prepare settings a model's features depend on (`config.prepare_settings`' retrieval and expansion
    fields), JSON-safe: what training records in the model file and `warn_other_settings` compares. Not the metadata
    filters: they choose whose documents compete (one user's memories), not the lists' shape, and a model is used
    under any of them (compared, every learned search of the shipped model warned "retrieval.filters None in
    training, {} here" once the field existed)."""
    return json.loads(json.dumps({k: v for k, v in settings.items()
                                  if k.startswith(("retrieval.", "expansion.")) and k != "retrieval.filters"}, default=str))


# Settings added to the config after models recorded theirs, with the value every earlier model ran: a record that
# lacks one was trained so (whatever the field's default is now), and is compared as such.
SETTINGS_BEFORE_RECORDED: dict[str, Any] = {"retrieval.lexical.query_term_frequency": False}


def warn_other_settings(model: FusionModel, path: Path, settings: dict[str, Any] | None) -> None:
    """UserWarning (once per model file and difference) when the features are made with other retrieval settings than the
    model was trained on (list depths, level chunk/document, expansion): its trees and score_prob read ranks
    and scores from lists of another shape. Models from before the settings were recorded are not checked."""
    trained = model.info.get("settings")
    if not isinstance(trained, dict) or not settings:
        return
    now = feature_settings(settings)
    trained = {**SETTINGS_BEFORE_RECORDED, **trained}
    diff = [f"{k} {trained.get(k)!r} in training, {now.get(k)!r} here" for k in sorted(set(trained) | set(now))
            if trained.get(k) != now.get(k) and not k.endswith(".enabled")]  # a switched-off list: warn_disabled_lists
    if diff:
        _warn_once(f"settings:{path}:{diff}",
                   f"learned fusion model {path} was trained on features from other retrieval settings ("
                   + "; ".join(diff[:4]) + (f"; and {len(diff) - 4} more" if len(diff) > 4 else "")
                   + "): its ranking and score_prob may not hold here")


# Prepare versions (`pipeline.PREPARE_VERSION`) whose change moved the features a model reads, and how. A model
# records the version it was trained at (`info.prepare_version`); one that records none predates them all.
FEATURE_CHANGES: dict[int, str] = {
    9: "BM25 no longer matches a query's stopwords (user trial BF), so every lex_, q_lex_, q_idf_ and coverage "
       "feature moved",
}


def warn_older_features(model: FusionModel, path: Path) -> None:
    """UserWarning (once per model file) when the toolkit computes the model's features otherwise than when it
    was trained: its trees split on values of another scale, so its ranking and score_prob may not hold."""
    trained = model.info.get("prepare_version")
    since = [why for version, why in sorted(FEATURE_CHANGES.items()) if not isinstance(trained, int) or version > trained]
    if since:
        _warn_once(f"features:{path}:{trained}",
                   f"learned fusion model {path} was trained by an older toolkit "
                   f"({'prepare version ' + str(trained) if isinstance(trained, int) else 'no prepare version recorded'})"
                   f" and its features have changed since: {'; '.join(since)}. Its ranking and score_prob may not hold:"
                   " re-train it with `hrt train-fusion`")


def warn_other_store(model: FusionModel, path: Path, index: dict[str, Any] | None) -> None:
    """UserWarning (once per model file and store setting) when the store's embedding model or index settings
    (chunking, stemmer, stopwords) are none the model learned from: its dense-score and BM25 features then come
    from another scale. Models that recorded no store (before provenance) are not checked."""
    seen = [rec["store"] for rec in (model.info.get("trained_on") or {}).values()
            if isinstance(rec, dict) and isinstance(rec.get("store"), dict)]
    if not seen or not index:
        return
    diff = [f"{k} {index[k]!r} here, {sorted({str(s.get(k)) for s in seen})} in training" for k in sorted(index)
            if index[k] is not None and all(s.get(k) != index[k] for s in seen)]
    if diff:
        _warn_once(f"store:{path}:{diff}",
                   f"learned fusion model {path} learned from stores built otherwise ({'; '.join(diff)}): its features "
                   "here come from another scale, so its ranking and score_prob may not hold (re-train it with "
                   "`hrt train-fusion` on stores like this one, or use the model-free `guarded-rrf` config)")


def scored_for(prep: Any, model_path: str | None) -> pl.DataFrame:
    """`score` of `prep`'s cached features under the model file, cached on `prep` until the features or the
    file change (a slider change then costs nothing here)."""
    p = resolve(model_path)
    stamp = f"learned:{p}:{p.stat().st_mtime_ns}"
    feats = ltr_features.of(prep)

    def build() -> pl.DataFrame:
        model = FusionModel.read(p)
        warn_disabled_lists(model, p, getattr(prep, "settings", None))
        warn_other_settings(model, p, getattr(prep, "settings", None))
        warn_other_store(model, p, getattr(prep, "index", None))
        warn_older_features(model, p)
        return score(feats, model)

    return prep.derived(stamp, (feats,), build)


def fuse(prep: Any, model_path: str | None, idx: fusion.FusionIndex | None = None) -> tuple[pl.DataFrame, float]:
    """(fused [qid, doc_id, chunk_id, score, rank, score_prob], seconds): the learned ranking in `fusion.fuse`'s
    shape, with the model's calibrated probability, which the blend carries to `attach_prob`, and with `idx` (the
    candidates' `fusion.index`) `fuse`'s integer codes. Cached on `prep` with the scores."""
    t = time.perf_counter()
    s = scored_for(prep, model_path)

    def build() -> pl.DataFrame:
        out = s.select("qid", "doc_id", "chunk_id", "score", "rank", "score_prob")
        return fusion.coded(out, idx) if idx is not None else out

    return prep.derived("learned_fused", (s, idx), build), time.perf_counter() - t


def attach_prob(ranked: pl.DataFrame) -> pl.DataFrame:
    """`ranked` (carrying `fuse`'s `score_prob`, the calibrated P(relevant) of each document under the learned model,
    through the stages after it) with `score_prob` last and never rising down the shown ranking. A later stage can
    place a document above ones the model preferred (the exact-token guard, a reranker's blend, priors); it then gets
    the highest probability of those below it, so the list reads top-down and `threshold.min_prob` cannot drop a
    result while keeping one placed under it. Raised, not lowered: a guarded hit the model gave 0.10 would otherwise
    pull every result under it down to 0.10. An empty list (the blend's empty frame) gets the column, null."""
    prob = pl.col("score_prob") if "score_prob" in ranked.columns else pl.lit(None, pl.Float64)
    ranked = ranked.select(pl.exclude("score_prob"), prob.alias("score_prob"))
    if fusion.in_rank_order(ranked):  # (as dedup returns it) each query's rows are a run, in rank order: half the time
        return ranked.with_columns(pl.col("score_prob").cum_max(reverse=True).over(pl.col("qid").rle_id()))
    return ranked.with_columns(pl.col("score_prob").cum_max(reverse=True).over("qid", order_by="rank"))
