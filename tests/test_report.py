import json

import polars as pl

from toolkit.loaders import load_corpus
from toolkit.report import build_report
from toolkit.store import Store


def test_report_tables_significance_breakdown_and_html(tmp_path, corpus_file, embedder):
    queries = pl.DataFrame(
        {
            "qid": ["q1", "q2", "q3"],
            "text": ["deploy fails with ECONNREFUSED", "retry backoff decision", "which SDK version is pinned"],
            "scope": [None, None, None],
            "metadata": [json.dumps({"style": "technical"}), json.dumps({"style": "paraphrase"}), json.dumps({"style": "technical"})],
        }
    )
    qrels = pl.DataFrame({"qid": ["q1", "q2", "q3"], "doc_id": ["d1", "d2", "d5"], "rel": [1, 1, 1]})
    with Store(tmp_path / "r.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(corpus_file))
        rep = build_report(
            st, queries, qrels, {"bm25": "bm25-only", "hybrid": "hybrid-rrf"}, baseline="bm25", group_by=["style"], latency_sample=2
        )
    assert rep.ab["system"].to_list() == ["bm25", "hybrid"]
    assert {"R@1", "R@5", "P@3", "nDCG@10", "latency_p50_ms"} <= set(rep.ab.columns)
    assert set(rep.significance["measure"]) >= {"nDCG@10", "R@5"}
    assert set(rep.breakdown["group"]) == {"technical", "paraphrase"}
    tech = rep.breakdown.filter((pl.col("group") == "technical") & (pl.col("measure") == "nDCG@10") & (pl.col("system") == "bm25"))
    assert tech["n"][0] == 2
    assert {"retrieve", "fuse", "total"} <= set(rep.latency["stage"])
    # Stages that did not run (no reranker, no expander, no dedup in these configs) are not listed.
    assert not {"rerank", "blend", "expansion", "dedup", "ltr_features"} & set(rep.latency["stage"])
    page = rep.write_html(tmp_path / "r.html").read_text()
    assert page.count("<table>") >= 4 and "Retrieval report" in page
    assert '<th scope="col">delta 95% low</th><th scope="col">delta 95% high</th>' in page  # the CI is shown
    assert '<th scope="col">p (Holm)</th>' in page
    # One compressed copy of plotly.js, each figure's data once: the page stays small.
    assert page.count("HRT_PLOTLY=") == 1 and page.count("<div id='fig") == len(rep.figures)
    assert len(page.encode()) < 2_500_000


def test_report_names_the_configs_and_pivots_group_tables(tmp_path, corpus_file, embedder):
    queries = pl.DataFrame(
        {
            "qid": ["q1", "q2", "q3"],
            "text": ["deploy fails with ECONNREFUSED", "retry backoff decision", "which SDK version is pinned"],
            "metadata": [json.dumps({"style": "technical"}), json.dumps({"style": "paraphrase"}), json.dumps({"style": "technical"})],
        }
    )
    qrels = pl.DataFrame({"qid": ["q1", "q2", "q3"], "doc_id": ["d1", "d2", "d5"], "rel": [1, 1, 1]})
    from toolkit.config import load_config

    tuned = load_config("hybrid-rrf").with_updates({"fusion.rrf_k": 20, "name": "rrf-k20"})
    with Store(tmp_path / "r.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(corpus_file))
        rep = build_report(st, queries, qrels, {"rrf": "hybrid-rrf", "k20": tuned}, baseline="rrf", group_by=["style"], latency_sample=0)
    diff = rep.config_diff()
    assert diff.columns == ["field", "rrf", "k20"]
    assert diff.filter(pl.col("field") == "fusion.rrf_k").row(0) == ("fusion.rrf_k", "60", "20")
    tables = rep.breakdown_tables()
    assert {f for f, _ in tables} == {"style"} and ("style", "nDCG@10") in tables
    table = tables[("style", "nDCG@10")]
    assert table.columns == ["group", "n", "rrf", "k20"] and table["group"].to_list() == ["paraphrase", "technical"]
    page = rep.to_html()
    top = page.index("Compared configs")
    assert top < page.index("A/B table") and "fusion.rrf_k" in page[top:page.index("A/B table")]
    assert "rrf_k: 20" in page  # the YAML of each config
