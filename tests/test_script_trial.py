"""User trial AQ: a support team whose knowledge base is in Japanese, Chinese, Thai, Arabic, Hebrew and Hindi,
mixed with English names and emoji, read in narrow terminals and by screen readers. Each test is a defect the
trial found."""

from __future__ import annotations

import polars as pl

from toolkit.pipeline import run_pipeline
from toolkit.store import Store

JA = [
    {"doc_id": "ja/lb", "text": "ロードバランサーの設定を変更したら、ヘルスチェックが失敗するようになった。"},
    {"doc_id": "ja/ramen", "text": "社員食堂の今週のラーメンは味噌と醤油です。"},
    {"doc_id": "ja/pw", "text": "パスワードを再設定するには管理画面から申請してください。"},
    {"doc_id": "en/lb", "text": "Load balancer health checks fail after the config change."},
    {"doc_id": "en/menu", "text": "The canteen serves ramen on Fridays."},
]


def test_an_english_model_does_not_lead_a_query_in_another_script(tmp_path, embedder):
    """`default` put BM25's only match for ロードバランサー 4th: the English MiniLM's cosines on Japanese are noise,
    and the dense-gap rule read a clear winner in them (dense weight 2.53, "dense-led")."""
    with Store(tmp_path / "s.duckdb", embedder=embedder) as st:
        st.ingest(JA)
        q = pl.DataFrame({"qid": ["ja", "en"], "text": ["ロードバランサー", "load balancer health check"]})
        res = run_pipeline(st, q, "default")
    per = {r["qid"]: r for r in res.per_query.iter_rows(named=True)}
    assert per["ja"]["route"] == "bm25-led" and per["ja"]["dense_weight"] == 0.25
    assert res.final.filter((pl.col("qid") == "ja") & (pl.col("rank") == 1))["doc_id"].item() == "ja/lb"
    assert per["en"]["dense_weight"] > 0.25  # English queries keep the rule


def test_bm25_finds_a_thai_word_inside_a_sentence(tmp_path):
    """Thai is written without spaces: a whole run was one token, so `รหัสผ่าน` inside a sentence never matched
    (and the note said no document holds it)."""
    docs = [{"doc_id": "th/pw", "text": "วิธีรีเซ็ตรหัสผ่านสำหรับพนักงานใหม่"},
            {"doc_id": "th/bill", "text": "ใบแจ้งหนี้ประจำเดือนส่งทางอีเมล"},
            {"doc_id": "en/pw", "text": "How to reset a password for new staff."}]
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(docs, embed=False)
        got = st.lexical_search(pl.DataFrame({"qid": ["a", "b"], "text": ["รหัสผ่าน", "ใบแจ้งหนี้"]}), top_k=3)
    assert got.filter(pl.col("rank") == 1).sort("qid")["doc_id"].to_list() == ["th/pw", "th/bill"]
