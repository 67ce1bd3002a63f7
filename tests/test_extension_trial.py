"""User trial AZ: the extension author. An embedder of your own (a Python object) is checked when the Store is
made, its vectors are kept as the dense search reads them, a store it built is never searched with another model
without a word nor sent to the model hub; hand-built candidates are checked; a config file is named after itself."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import DOCS

from toolkit.cli import main
from toolkit.config import FusionConfig, load_config
from toolkit.errors import InputError, StoreError, ToolkitError
from toolkit.fusion import fuse, list_weights
from toolkit.loaders import load_corpus
from toolkit.pipeline import run_pipeline
from toolkit.store import Store


class HashEmbedder:
    """A researcher's own model: words hashed into 64 buckets. It returns a list of lists (not an array), of
    vectors that are not unit length, and has no `backend`."""

    model_id = "az/hash-64"
    dim = 64

    def embed(self, texts, *, progress=False):
        out = []
        for t in texts:
            v = [0.0] * 64
            for w in t.lower().split():
                v[int(hashlib.md5(w.encode()).hexdigest(), 16) % 64] += 3.0
            out.append(v)
        return out


@pytest.fixture(scope="module")
def hashed(tmp_path_factory):
    d = tmp_path_factory.mktemp("az")
    (d / "c.jsonl").write_text("".join(json.dumps(x) + "\n" for x in DOCS))
    with Store(d / "h.duckdb", embedder=HashEmbedder()) as st:
        st.ingest(load_corpus(d / "c.jsonl"))
    return d / "h.duckdb"


def test_vectors_of_your_own_embedder_are_kept_unit_length_and_searched(hashed):
    with Store(hashed, embedder=HashEmbedder()) as st:
        assert (st.embedding_model, st.embedding_backend, st.embedding_dim) == ("az/hash-64", "custom", 64)
        vecs = np.asarray([r[0] for r in st.con.execute("SELECT vec FROM embeddings").fetchall()])
        assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)  # a cosine, not 499
        res = run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": ["retry backoff retries"]}), load_config("vector-only"))
        assert res.final["doc_id"][0] == "d2"
        assert res.trace.filter(pl.col("stage") == "fuse")["score"].max() <= 1.0 + 1e-9


def test_a_store_of_your_own_embedder_is_not_searched_with_another_model(hashed):
    from toolkit.embed import make_embedder

    with Store(hashed, embedder=make_embedder(None)) as st, \
            pytest.raises(StoreError, match=r"built with embedding model 'az/hash-64' \(dim 64\); you asked for "
                                            r"'sentence-transformers/all-MiniLM-L6-v2'"):
        run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": ["a query never embedded"]}), load_config("vector-only"))
    t0 = time.perf_counter()
    with Store(hashed) as st, pytest.raises(StoreError, match=r"made by an embedder of your own \(backend 'custom'\): open "
                                                               r"the store with that embedder"):
        run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": ["another new query"]}), load_config("vector-only"))
    assert time.perf_counter() - t0 < 10  # not a minute of retries against the model hub
    r = CliRunner().invoke(main, ["search", "deploy", "--store", str(hashed)])
    assert r.exit_code == 2 and "--mode lexical" in r.output
    r = CliRunner().invoke(main, ["search", "deploy", "--store", str(hashed), "--mode", "lexical"])
    assert r.exit_code == 0 and r.output.startswith("1. ")


def test_an_embedder_without_a_model_id_or_embed_is_refused_when_the_store_is_made(tmp_path):
    class NoId:
        def embed(self, texts):
            return np.ones((len(texts), 3))

    class NoEmbed:
        model_id = "x/y"

    with pytest.raises(ToolkitError, match=r"embedder NoId: needs a `model_id` string"):
        Store(tmp_path / "a.duckdb", embedder=NoId())
    with pytest.raises(ToolkitError, match=r"embedder NoEmbed \('x/y'\): needs a method `embed"):
        Store(tmp_path / "a.duckdb", embedder=NoEmbed())
    assert not (tmp_path / "a.duckdb").exists()

    class Short(HashEmbedder):
        model_id = "az/short"

        def embed(self, texts, *, progress=False):
            return super().embed(texts)[:-1]

    with Store(tmp_path / "b.duckdb", embedder=Short()) as st, \
            pytest.raises(ToolkitError, match=r"returned an array of shape \(5, 64\) for 6 texts"):
        st.ingest([{"doc_id": d["_id"], "text": d["text"]} for d in DOCS])


def test_hand_built_candidates_are_checked():
    base = {"qid": ["q"], "list_id": ["orig:mine"], "variant": ["orig"], "retriever": ["mine"], "doc_id": ["a"],
            "chunk_id": ["a#0"], "rank": [1], "score": [1.0]}
    # The weights a config gives each list (what `rescore` does): a "mine" list was weighted as a dense one.
    with pytest.raises(InputError, match=r"list 'orig:mine' has retriever 'mine': fusion weighs lex \(BM25\) and vec"):
        list_weights(pl.DataFrame(base), None, FusionConfig(dense_weight=0.3))
    with pytest.raises(InputError, match=r"candidates: missing column\(s\) retriever"):
        list_weights(pl.DataFrame({k: v for k, v in base.items() if k != "retriever"}), None, FusionConfig())
    with pytest.raises(InputError, match=r"candidates: missing column\(s\) chunk_id, score"):
        fuse(pl.DataFrame({k: v for k, v in base.items() if k not in ("chunk_id", "score")}), None, FusionConfig())
    fused = fuse(pl.DataFrame(base), None, FusionConfig())  # explicit weights (none: 1 each) need no retriever kind
    assert fused["doc_id"].to_list() == ["a"]


def test_a_config_file_is_named_after_itself(tmp_path, monkeypatch):
    (tmp_path / "rr.yaml").write_text("extends: default\nfusion: {rrf_k: 20}\n")
    (tmp_path / "child.yaml").write_text("extends: rr.yaml\noutput: {max_chars: 1500}\n")
    (tmp_path / "qmd.yaml").write_text("extends: qmd\nfusion: {rrf_k: 20}\n")
    assert load_config(tmp_path / "rr.yaml").name == "rr"
    assert load_config(tmp_path / "child.yaml").name == "child"  # not its parent's: two run tags, two configs
    assert load_config(tmp_path / "qmd.yaml").name == "qmd-custom"  # a file named like a preset is not the preset
    assert load_config({"extends": "default", "fusion": {"rrf_k": 20}}).name == "default-custom"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"rr: neither a config file nor a preset \(did you mean the file rr.yaml\?\)"):
        load_config("rr")
    assert Path("rr.yaml").is_file()


class OverlapReranker:
    """A researcher's own reranker: the share of the query's words in the passage."""

    name = "az/overlap"

    def __init__(self) -> None:
        self.calls = 0

    def score(self, query, documents):
        self.calls += 1
        q = set(query.lower().split())
        return [len(q & set(d.lower().split())) / max(len(q), 1) for d in documents]


def test_a_python_reranker_is_a_provider_the_config_names(hashed):
    """Only HTTP, a cross-encoder or a file could rerank; the workaround put scores under a config that said
    `provider: none`, so the config no longer described the run (user trial AZ)."""
    from toolkit.session import Session

    q = pl.DataFrame({"qid": ["q1", "q2"], "text": ["deploy failed ECONNREFUSED", "retry backoff"]})
    cfg = load_config("qmd").with_updates({"rerank.provider": "python", "rerank.top_n": 5})
    rr = OverlapReranker()
    with Store(hashed, embedder=HashEmbedder()) as st:
        res = run_pipeline(st, q, cfg, reranker=rr)
        assert rr.calls == 2 and res.per_query["reranker"].to_list() == ["ok", "ok"]
        assert res.final.filter(pl.col("flags").list.contains("reranked")).height > 0
        again = OverlapReranker()
        run_pipeline(st, q, cfg, reranker=again)
        assert again.calls == 0  # its scores are cached under its name, as any provider's
        with pytest.raises(InputError, match=r"rerank.provider is python: pass the reranker object"):
            run_pipeline(st, q, cfg)
        with pytest.raises(InputError, match=r"a reranker object was given but rerank.provider is 'none'"):
            run_pipeline(st, q, load_config("hybrid-rrf"), reranker=rr)
        with pytest.raises(InputError, match=r"reranker object: needs a `name` string"):
            run_pipeline(st, q, cfg, reranker=object())
        s = Session(st, q, pl.DataFrame({"qid": ["q1", "q2"], "doc_id": ["d1", "d2"], "rel": [1, 1]}), config=cfg,
                    reranker=OverlapReranker())  # the baseline (bm25-only) prepares without it
        assert s.result.per_query["reranker"].to_list() == ["ok", "ok"]
        assert s.set("rerank.blend", "replace") and s.config.rerank.provider == "python"
    py = hashed.parent / "py.yaml"
    py.write_text("extends: bm25-only\nrerank: {provider: python}\n")
    r = CliRunner().invoke(main, ["search", "deploy", "--store", str(hashed), "--config", str(py)])
    assert r.exit_code == 2 and "the CLI cannot take one: use cross-encoder, http or file there" in r.output


def test_the_lancedb_module_keeps_tied_lists_tied_as_the_toolkit(tmp_path):
    """The exported fusion had kept the rank fallback for a list with no spread after the toolkit dropped it:
    under convex fusion the export and `hrt search` then ranked differently (review)."""
    import importlib.util

    from toolkit.export import write_export
    from toolkit.fusion import normalized_scores

    for norm in ("minmax", "zscore"):
        cfg = load_config("hybrid-rrf").with_updates({"name": f"c-{norm}", "fusion.method": "convex", "fusion.normalization": norm})
        path = tmp_path / f"lance_{norm}.py"
        write_export(cfg, "lancedb", path)
        spec = importlib.util.spec_from_file_location(f"lance_{norm}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        tied = pl.DataFrame({"qid": "q", "list_id": "orig:lex", "variant": "orig", "retriever": "lex", "doc_id": ["a", "b", "c"],
                             "chunk_id": ["a", "b", "c"], "rank": [1, 2, 3], "score": [2.0, 2.0, 2.0]})
        assert mod._normalize([2.0, 2.0, 2.0]) == normalized_scores(tied, norm).to_list() == [1.0, 1.0, 1.0]
        assert mod._normalize([3.0, 1.0]) == pytest.approx(normalized_scores(tied.head(2).with_columns(
            pl.Series("score", [3.0, 1.0])), norm).to_list())


def test_python_rerankers_of_one_name_and_two_cache_keys_are_two_rerankers(hashed):
    """The stage cache was keyed by `name` and the score cache by `cache_key`: a second reranker of the same name
    got the first one's results without being asked (review)."""
    q = pl.DataFrame({"qid": ["q1"], "text": ["the deploy failed after the v2.14.3 upgrade of the SDK"]})
    cfg = load_config("bm25-only").with_updates({"rerank.provider": "python", "rerank.top_n": 5, "rerank.blend": "replace"})

    class Keyed(OverlapReranker):
        name = "az/keyed"

        def __init__(self, key: str, sign: float) -> None:
            super().__init__()
            self.cache_key, self.sign = key, sign

        def score(self, query, documents):
            return [self.sign * s for s in super().score(query, documents)]

    one, two = Keyed("az/keyed@1", 1.0), Keyed("az/keyed@2", -1.0)
    with Store(hashed, embedder=HashEmbedder()) as st:
        a = run_pipeline(st, q, cfg, reranker=one)
        b = run_pipeline(st, q, cfg, reranker=two)
    assert one.calls == 1 and two.calls == 1
    assert a.final["doc_id"].to_list() != b.final["doc_id"].to_list()


def test_a_session_refuses_a_reranker_no_config_of_it_uses(hashed):
    from toolkit.session import Session

    with Store(hashed, embedder=HashEmbedder()) as st, pytest.raises(
            InputError, match=r"a reranker object was given but neither the config \('none'\) nor the baseline uses it"):
        Session(st, pl.DataFrame({"qid": ["q1"], "text": ["deploy"]}), pl.DataFrame({"qid": ["q1"], "doc_id": ["d1"], "rel": [1]}),
                config="hybrid-rrf", reranker=OverlapReranker())


def test_an_embedder_returning_nan_is_named(tmp_path):
    class Nan(HashEmbedder):
        model_id = "az/nan"

        def embed(self, texts, *, progress=False):
            v = np.asarray(super().embed(texts))
            v[1, 0] = np.nan
            return v

    with Store(tmp_path / "n.duckdb", embedder=Nan()) as st, pytest.raises(
            ToolkitError, match=r"embedder 'az/nan' returned a vector with NaN or infinite values \(text 2 of 6"):
        st.ingest([{"doc_id": d["_id"], "text": d["text"]} for d in DOCS])
