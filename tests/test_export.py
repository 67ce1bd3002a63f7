"""Engine exports: documented JSON shapes, numbers carried, and honest 'not carried over' lists."""

from __future__ import annotations

import json

import pytest

from toolkit.config import list_presets, load_config
from toolkit.errors import InputError
from toolkit.export import ENGINES, export_config, write_export


def check_opensearch(p: dict) -> None:
    (proc,) = p["phase_results_processors"]
    (name,) = proc
    assert name in ("normalization-processor", "score-ranker-processor")
    if name == "score-ranker-processor":
        comb = proc[name]["combination"]
        assert comb["technique"] == "rrf" and isinstance(comb["rank_constant"], int)
    else:
        assert proc[name]["normalization"]["technique"] in ("min_max", "l2", "z_score")
        w = proc[name]["combination"]["parameters"]["weights"]
        assert len(w) == 2 and abs(sum(w) - 1) < 1e-6


def check_elasticsearch(p: dict) -> None:
    (kind,) = p["retriever"]
    body = p["retriever"][kind]
    assert kind in ("rrf", "linear") and len(body["retrievers"]) == 2 and body["rank_window_size"] >= 1
    if kind == "rrf":
        assert isinstance(body["rank_constant"], int)
    for r in body["retrievers"]:
        if "retriever" in r:
            assert isinstance(r["weight"], float)
            if kind == "linear":
                assert r["normalizer"] == "minmax"


def check_weaviate(p: dict) -> None:
    assert 0 <= p["alpha"] <= 1 and p["fusionType"] in ("rankedFusion", "relativeScoreFusion") and p["limit"] > 0


def check_lancedb(p: dict) -> None:
    assert p["query_type"] == "hybrid"
    assert p["reranker"]["class"] in ("RRFReranker", "LinearCombinationReranker", "CrossEncoderReranker")


CHECKS = {"opensearch": check_opensearch, "elasticsearch": check_elasticsearch, "weaviate": check_weaviate, "lancedb": check_lancedb}


@pytest.mark.parametrize("preset", list_presets())
@pytest.mark.parametrize("engine", list(CHECKS))
def test_every_preset_exports_a_documented_shape(preset, engine):
    res = export_config(load_config(preset), engine)
    CHECKS[engine](res.payload)
    json.dumps(res.payload)


def test_numbers_and_not_carried_lists():
    qmd = load_config("qmd")
    os_ = export_config(qmd, "opensearch").payload["phase_results_processors"][0]["score-ranker-processor"]
    assert os_["combination"]["rank_constant"] == 60
    assert "top-rank bonus" in export_config(qmd, "elasticsearch").not_carried
    assert "top-rank bonus" not in export_config(load_config("hybrid-rrf"), "elasticsearch").not_carried
    conv = load_config("hybrid-rrf").with_updates({"fusion.method": "convex", "fusion.alpha": 0.7})
    assert export_config(conv, "weaviate").payload == {"alpha": 0.7, "fusionType": "relativeScoreFusion", "limit": 5}
    w = export_config(conv, "opensearch").payload["phase_results_processors"][0]["normalization-processor"]
    assert w["combination"]["parameters"]["weights"] == [0.3, 0.7]
    k30 = load_config("hybrid-rrf").with_updates({"fusion.rrf_k": 30})
    assert any("k=30" in x for x in export_config(k30, "weaviate").not_carried)
    assert export_config(k30, "lancedb").payload["reranker"]["kwargs"]["K"] == 30
    weighted = k30.with_updates({"fusion.lexical_weight": 3.0})
    rs = export_config(weighted, "elasticsearch").payload["retriever"]["rrf"]["retrievers"]
    assert [r["weight"] for r in rs] == [0.75, 0.25]


def test_write_export_and_toolkit_round_trip(tmp_path):
    cfg = load_config("qmd")
    res = write_export(cfg, "opensearch", tmp_path / "os.json")
    assert json.loads((tmp_path / "os.json").read_text()) == res.payload
    assert "top-rank bonus" in (tmp_path / "os.json.README.md").read_text()
    write_export(cfg, "toolkit", tmp_path / "qmd.yaml")
    assert load_config(tmp_path / "qmd.yaml") == cfg
    with pytest.raises(InputError, match="unknown engine"):
        export_config(cfg, "solr")
    assert ENGINES[0] == "toolkit"
