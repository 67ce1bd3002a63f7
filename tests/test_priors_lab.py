"""The lab's priors widgets: one per priors field, fed with the store's typed fields, and they re-score live."""

from __future__ import annotations

import polars as pl

from toolkit.lab import Lab
from toolkit.store import Store

DOCS = [
    {"doc_id": "m1", "source": "m1", "scope": None, "title": "", "text": "the deploy key lives in vault", "metadata": {"date": "2023-01-01", "hits": 1}},
    {"doc_id": "m2", "source": "m2", "scope": None, "title": "", "text": "the deploy key moved to the secrets manager", "metadata": {"date": "2024-05-31", "tier": "P0"}},
    {"doc_id": "m3", "source": "m3", "scope": None, "title": "", "text": "lunch is on thursday", "metadata": {}},
]
QUERIES = pl.DataFrame({"qid": ["q"], "text": ["where is the deploy key"], "metadata": ['{"date": "2024-06-01"}']})
QRELS = pl.DataFrame({"qid": ["q"], "doc_id": ["m2"], "rel": [1]})


def test_priors_widgets_exist_and_rescore(tmp_path):
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(DOCS, embed=False)
        assert st.value_fields() == {"date": "date", "hits": "number", "tier": "text"}
        lab = Lab(st, QUERIES, QRELS, config="bm25-only", baseline=None, measures=("MRR@10",), live_figures=False, debounce_s=30.0)
        ctl = lab.controls
        assert {k for k in ctl if k.startswith("priors.")} == {
            "priors.recency_field", "priors.recency_half_life_days", "priors.recency_floor", "priors.priority_field",
            "priors.use_field", "priors.use_weight", "priors.combine", "priors.add_weight"}
        assert [o[1] for o in ctl["priors.recency_field"].options] == [None, "date"]
        assert [o[1] for o in ctl["priors.use_field"].options] == [None, "hits"]
        assert ctl["priors.recency_half_life_days"].disabled and ctl["priors.add_weight"].disabled
        assert lab.metrics["MRR@10"] == 0.5  # BM25 alone puts the older note first

        ctl["priors.recency_field"].value = "date"
        lab.flush()
        assert lab.config.priors.recency_field == "date" and not ctl["priors.recency_half_life_days"].disabled
        assert lab.metrics["MRR@10"] == 1.0
        assert "priors" in lab.result.trace["stage"].to_list()
        lists = lab.session.stage_lists("q")  # the drill-down shows the priors stage, each factor in its flags
        assert lists["stage"].unique(maintain_order=True).to_list()[-2:] == ["priors", "final"]
        assert lists.filter(pl.col("stage") == "priors")["flags"].to_list()[0][0].startswith("recency=")
        assert lab.set("priors.recency_half_life_days", 7.0) and ctl["priors.recency_half_life_days"].value == 7.0
        ctl["priors.priority_field"].value = "tier"
        ctl["priors.combine"].value = "add"
        lab.flush()
        assert (lab.config.priors.priority_field, lab.config.priors.combine) == ("tier", "add")
        assert not ctl["priors.add_weight"].disabled
        assert lab.set("priors.use_field", "access_count")  # a field this store lacks: neutral, and the picker shows it
        assert "access_count" in [o[1] for o in ctl["priors.use_field"].options]
