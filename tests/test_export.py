"""Engine exports: complete requests, numbers carried, honest 'not carried over' lists, minimum versions and
analyzer notes; the bodies built through the engines' own Python clients and published schemas (extras:
skipped only when the client is absent), and the LanceDB module run for real."""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml

from toolkit.config import list_presets, load_config
from toolkit.errors import InputError
from toolkit.export import ENGINES, export_config, write_export

VECTOR = [0.1, -0.2, 0.3]
HYBRID = ["hybrid-rrf", "qmd"]
CONVEX = load_config("hybrid-rrf").with_updates({"name": "convex", "fusion.method": "convex", "fusion.alpha": 0.7})
WEIGHTED = load_config("hybrid-rrf").with_updates({"name": "weighted", "fusion.rrf_k": 30, "fusion.lexical_weight": 3.0})
CASES = [load_config(p) for p in HYBRID] + [CONVEX, WEIGHTED]


def fill(obj, text="deploy fails", vector=VECTOR):
    """The payload with its placeholders filled in, as a developer sends it."""
    if isinstance(obj, dict):
        return {k: fill(v, text, vector) for k, v in obj.items()}
    if isinstance(obj, list):
        return [fill(v, text, vector) for v in obj]
    if obj == "{{query_vector}}":
        return vector
    if isinstance(obj, str):
        return obj.replace("{{query}}", text).replace("{{index}}", "docs")
    return obj


@pytest.mark.parametrize("preset", list_presets())
@pytest.mark.parametrize("engine", [e for e in ENGINES if e != "toolkit"])
def test_every_preset_exports_with_version_and_analyzer_note(preset, engine):
    cfg = load_config(preset)
    res = export_config(cfg, engine)
    bm25 = "does not reproduce" if cfg.retrieval.lexical.enabled else "runs no BM25"
    assert res.min_version and bm25 in res.analyzer_note and "stem" in res.analyzer_note
    if engine == "lancedb":
        compile(res.payload, "export.py", "exec")
        assert "LinearCombinationReranker" not in res.payload
    else:
        json.dumps(res.payload)
        assert res.payload["min_version"] == res.min_version


def test_numbers_versions_and_not_carried_lists():
    qmd = load_config("qmd")
    os_ = export_config(qmd, "opensearch").payload
    proc = os_["search_pipeline"]["body"]["phase_results_processors"][0]["score-ranker-processor"]
    assert proc["combination"]["rank_constant"] == 60
    assert os_["search"]["request"].endswith("search_pipeline=hrt-qmd")
    assert "top-rank bonus" in export_config(qmd, "elasticsearch").not_carried
    assert "top-rank bonus" not in export_config(load_config("hybrid-rrf"), "elasticsearch").not_carried
    w = export_config(CONVEX, "weaviate").payload["hybrid"]
    assert (w["alpha"], w["fusion_type"], w["query_properties"], w["limit"]) == (0.7, "RELATIVE_SCORE", ["text"], 5)
    n = export_config(CONVEX, "opensearch").payload["search_pipeline"]["body"]["phase_results_processors"][0]["normalization-processor"]
    assert n["combination"]["parameters"]["weights"] == [0.3, 0.7]
    assert any("k=30" in x for x in export_config(WEIGHTED, "weaviate").not_carried)
    # Weaviate's rankedFusion weighs the lists by alpha, the LanceDB module by the toolkit's weights.
    for engine in ("weaviate", "lancedb"):
        assert not any("weights" in x for x in export_config(WEIGHTED, engine).not_carried), engine
    assert export_config(WEIGHTED, "weaviate").payload["hybrid"]["alpha"] == 0.25
    rs = export_config(WEIGHTED, "elasticsearch").payload["search"]["body"]["retriever"]["rrf"]["retrievers"]
    assert [r["weight"] for r in rs] == [0.75, 0.25]
    assert export_config(WEIGHTED, "elasticsearch").min_version.startswith("9.2")
    assert export_config(WEIGHTED, "opensearch").min_version.startswith("3.1")
    assert export_config(load_config("hybrid-rrf"), "opensearch").min_version.startswith("2.19")
    assert export_config(CONVEX, "elasticsearch").min_version.startswith("8.18")
    assert "RRF_K = 30" in export_config(WEIGHTED, "lancedb").payload


def test_the_default_presets_own_stages_are_named_when_an_engine_cannot_run_them():
    """A user trial: exporting `default` said "everything carried over" while no engine payload applies its
    per-query dense weight, its exact-token guard or its collapse of identical copies."""
    for engine in ("opensearch", "elasticsearch", "weaviate", "lancedb"):
        lost = " | ".join(export_config("guarded-rrf", engine).not_carried)  # a preset name is accepted too
        for stage in ("per-query dense weight", "exact-token guard", "byte-identical documents collapsed"):
            assert stage in lost, (engine, stage)
        lost = " | ".join(export_config("default", engine).not_carried)  # the learned default: its model too
        for stage in ("learned fusion", "exact-token guard", "byte-identical documents collapsed"):
            assert stage in lost, (engine, stage)
    assert not any("guard" in x for x in export_config("hybrid-rrf", "lancedb").not_carried)
    # The pipeline id goes into a URL path: a config name with spaces becomes a slug.
    named = load_config("qmd").with_updates({"name": "my tuned config"})
    assert export_config(named, "opensearch").payload["search"]["request"].endswith("search_pipeline=hrt-my-tuned-config")


def test_written_format_follows_the_extension(tmp_path):
    cfg = load_config("qmd")
    res = write_export(cfg, "opensearch", tmp_path / "os.json")
    assert json.loads((tmp_path / "os.json").read_text()) == res.payload
    readme = (tmp_path / "os.json.README.md").read_text()
    assert "top-rank bonus" in readme and "Minimum engine version: 2.19" in readme and "Analyzer" in readme
    write_export(cfg, "elasticsearch", tmp_path / "es.yaml")
    assert yaml.safe_load((tmp_path / "es.yaml").read_text())["search"]["body"]["size"] == cfg.output.n
    write_export(cfg, "toolkit", tmp_path / "qmd.json")
    json.loads((tmp_path / "qmd.json").read_text())  # JSON, not YAML, in a .json file
    assert load_config(tmp_path / "qmd.json") == cfg
    write_export(cfg, "toolkit", tmp_path / "qmd.yaml")
    assert load_config(tmp_path / "qmd.yaml") == cfg
    write_export(cfg, "lancedb", tmp_path / "lance_qmd.py")
    with pytest.raises(InputError, match="Python module"):
        write_export(cfg, "lancedb", tmp_path / "lance.json")
    with pytest.raises(InputError, match="unknown engine"):
        export_config(cfg, "solr")


# ---------------------------------------------------------------- Elasticsearch: the official client
# Keys each retriever takes, from the Elasticsearch specification (elastic/elasticsearch-specification,
# specification/_types/Retriever.ts: RetrieverBase, StandardRetriever, KnnRetriever, RRFRetriever,
# RRFRetrieverContainer, LinearRetriever, InnerRetriever).
_BASE = {"filter", "min_score", "_name"}
ES_KEYS = {
    "standard": _BASE | {"query", "search_after", "terminate_after", "sort", "collapse"},
    "knn": _BASE | {"field", "query_vector", "query_vector_builder", "k", "num_candidates", "similarity", "rescore_vector", "visit_percentage"},
    "rrf": _BASE | {"retrievers", "rank_constant", "rank_window_size", "query", "fields"},
    "linear": _BASE | {"retrievers", "rank_window_size", "query", "fields", "normalizer"},
}


def _check_retriever(container: dict) -> None:
    (kind,) = container
    body = container[kind]
    assert set(body) <= ES_KEYS[kind], (kind, set(body) - ES_KEYS[kind])
    for sub in body.get("retrievers", []):
        if kind == "linear":
            assert set(sub) <= {"retriever", "weight", "normalizer"} and sub["normalizer"] in ("minmax", "l2_norm", "none")
            _check_retriever(sub["retriever"])
        elif "retriever" in sub:  # RRFRetrieverContainer with a weight
            assert set(sub) == {"retriever", "weight"}
            _check_retriever(sub["retriever"])
        else:
            _check_retriever(sub)


@pytest.mark.parametrize("cfg", CASES, ids=lambda c: c.name)
def test_elasticsearch_body_through_the_official_client(cfg):
    es = pytest.importorskip("elasticsearch")
    sent = []
    client = es.Elasticsearch("http://localhost:9200")
    client.perform_request = lambda method, path, **kw: sent.append((method, path, kw.get("body")))
    search = fill(export_config(cfg, "elasticsearch").payload["search"])
    method, path = search["request"].split(" ")
    client.search(index=path.split("/")[1], **search["body"])  # the client rejects unknown body keys (TypeError)
    assert sent == [(method, path, search["body"])]
    _check_retriever(search["body"]["retriever"])


# ---------------------------------------------------------------- OpenSearch: published protobuf schema + client
def _proto_shape(q: dict) -> dict:
    """REST query JSON -> the field-explicit shape of OpenSearch's protobuf schema (opensearch-protobufs)."""
    (kind,) = q
    if kind == "hybrid":
        return {"hybrid": {**{k: v for k, v in q["hybrid"].items() if k != "queries"}, "queries": [_proto_shape(x) for x in q["hybrid"]["queries"]]}}
    (fld,) = q[kind]
    args = dict(q[kind][fld])
    if kind == "match":
        args["query"] = {"string": args["query"]}
    return {kind: {"field": fld, **args}}


@pytest.mark.parametrize("cfg", CASES, ids=lambda c: c.name)
def test_opensearch_requests_against_the_protobuf_schema_and_client(cfg):
    pytest.importorskip("opensearch.protobufs")
    osp = pytest.importorskip("opensearchpy")
    from google.protobuf.json_format import MessageToDict, ParseDict
    from opensearch.protobufs.schemas import common_pb2

    payload = fill(export_config(cfg, "opensearch").payload)
    body = payload["search"]["body"]
    msg = ParseDict({"size": body["size"], "query": _proto_shape(body["query"])}, common_pb2.SearchRequestBody())  # unknown keys raise
    got = MessageToDict(msg, preserving_proto_field_name=True)
    assert got["query"]["hybrid"]["queries"][1]["knn"]["vector"] == pytest.approx(VECTOR)
    assert int(got["query"]["hybrid"]["pagination_depth"]) == body["query"]["hybrid"]["pagination_depth"]

    sent = []
    client = osp.OpenSearch("http://localhost:9200")
    client.transport.perform_request = lambda method, url, **kw: sent.append((method, url, kw.get("params"), kw.get("body")))
    pipe = payload["search_pipeline"]
    client.search_pipeline.put(id=pipe["request"].rsplit("/", 1)[1], body=pipe["body"])
    client.search(index="docs", body=body, params={"search_pipeline": f"hrt-{cfg.name}"})
    assert sent[0][:2] == ("PUT", pipe["request"].split(" ")[1]) and sent[0][3] == pipe["body"]
    assert sent[1][1] == "/docs/_search" and sent[1][2]["search_pipeline"] == f"hrt-{cfg.name}"
    (proc,) = pipe["body"]["phase_results_processors"]
    (name,) = proc
    assert name in ("normalization-processor", "score-ranker-processor")


# ---------------------------------------------------------------- Weaviate: the v4 client's query builder
@pytest.mark.parametrize("cfg", CASES, ids=lambda c: c.name)
def test_weaviate_hybrid_through_the_client_query_builder(cfg):
    pytest.importorskip("weaviate")
    from weaviate.classes.query import HybridFusion
    from weaviate.collections.grpc.query import _QueryGRPC
    from weaviate.util import _ServerVersion

    h = fill(export_config(cfg, "weaviate").payload["hybrid"])
    builder = _QueryGRPC(_ServerVersion(1, 32, 0), "Docs", None, None, True, True, True)
    req = builder.hybrid(query=h["query"], alpha=h["alpha"], vector=h["vector"], properties=h["query_properties"],
                         fusion_type=HybridFusion[h["fusion_type"]], limit=h["limit"])
    hs = req.hybrid_search
    assert hs.query == "deploy fails" and hs.alpha == pytest.approx(h["alpha"]) and list(hs.properties) == ["text"]
    assert hs.fusion_type == (1 if h["fusion_type"] == "RANKED" else 2) and req.limit == cfg.output.n
    assert len(hs.vectors) or len(hs.vector_bytes) or len(hs.vector)  # the vector went into the request


# ---------------------------------------------------------------- LanceDB: the module, run
# Each list cut at its own top_k, as the toolkit cuts it (the module runs two searches, one window each).
UNEVEN = WEIGHTED.with_updates({"name": "uneven", "retrieval.lexical.top_k": 2, "retrieval.dense.top_k": 4})


@pytest.mark.parametrize("cfg", [load_config("hybrid-rrf"), CONVEX, WEIGHTED, UNEVEN], ids=lambda c: c.name)
def test_lancedb_module_runs_and_fuses_like_the_toolkit(cfg, tmp_path):
    lancedb = pytest.importorskip("lancedb")
    import numpy as np
    import polars as pl

    from toolkit.fusion import fuse

    path = write_export(cfg, "lancedb", tmp_path / "lance_export.py") and tmp_path / "lance_export.py"
    spec = importlib.util.spec_from_file_location("lance_export", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(0)
    texts = ["deploy failed with ECONNREFUSED", "deploy retry backoff", "team lunch on thursday", "deploy pinned sdk version",
             "rate limit backoff", "pool size production deploy"]
    vecs = rng.normal(size=(len(texts), 8)).astype("float32")
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    db = lancedb.connect(str(tmp_path / "db"))
    rows = [{"doc_id": f"d{i}", "scope": "", "text": t, "vector": v.tolist()} for i, (t, v) in enumerate(zip(texts, vecs, strict=True))]
    tbl = db.create_table("docs", rows)
    from lancedb.index import FTS

    tbl.create_index("text", config=FTS(stem=True, remove_stop_words=True, language="English"))
    qv = vecs[3] + 0.1 * vecs[0]
    got = mod.search(tbl, "deploy", qv, limit=6)
    # The same two lists, fused by the toolkit's own fusion stage.
    fts = tbl.search("deploy", query_type="fts").limit(cfg.retrieval.lexical.top_k).to_pandas()
    vec = tbl.search(qv.tolist()).distance_type("cosine").limit(cfg.retrieval.dense.top_k).to_pandas()
    cands = pl.concat([
        pl.DataFrame({"qid": "q", "list_id": "orig:lex", "variant": "orig", "retriever": "lex", "doc_id": fts["doc_id"].tolist(),
                      "chunk_id": fts["doc_id"].tolist(), "rank": list(range(1, len(fts) + 1)), "score": fts["_score"].astype(float).tolist()}),
        pl.DataFrame({"qid": "q", "list_id": "orig:vec", "variant": "orig", "retriever": "vec", "doc_id": vec["doc_id"].tolist(),
                      "chunk_id": vec["doc_id"].tolist(), "rank": list(range(1, len(vec) + 1)), "score": (1 - vec["_distance"]).astype(float).tolist()}),
    ])
    weights = pl.DataFrame({"qid": ["q", "q"], "list_id": ["orig:lex", "orig:vec"], "weight": [cfg.fusion.lexical_weight, cfg.fusion.dense_weight]})
    ours = fuse(cands, weights, cfg.fusion).sort("rank")["doc_id"].to_list()
    assert got["doc_id"].tolist() == ours[:6]


def test_tuned_bm25_parameters_reach_the_index_or_are_named():
    """A user trial: k1 0.9 / b 0.4 were exported into a mapping without them (engine defaults 1.2 / 0.75),
    and nothing said so. OpenSearch and Elasticsearch get a BM25 similarity on the text field; Weaviate and
    the LanceDB module list them as not carried."""
    tuned = load_config("qmd").with_updates({"retrieval.lexical.k1": 0.9, "retrieval.lexical.b": 0.4})
    for engine in ("opensearch", "elasticsearch"):
        body = export_config(tuned, engine).payload["index"]["body"]
        assert body["settings"]["index"]["similarity"]["hrt_bm25"] == {"type": "BM25", "k1": 0.9, "b": 0.4}, engine
        assert body["mappings"]["properties"]["text"]["similarity"] == "hrt_bm25", engine
        plain = export_config("qmd", engine).payload["index"]["body"]
        assert "similarity" not in plain["mappings"]["properties"]["text"], engine
    for engine in ("weaviate", "lancedb"):
        assert any("BM25 k1=0.9, b=0.4" in x for x in export_config(tuned, engine).not_carried), engine
        assert not any("BM25 k1" in x for x in export_config("qmd", engine).not_carried), engine


def test_the_analyzer_note_says_which_query_term_frequency_scores_repeats_as_the_engine():
    """A user trial: a query repeating a word (`error error error code`) scored as `error code` in the toolkit and
    with `error` three times in Elasticsearch and OpenSearch. Each export's note says how the engine counts it and
    which `retrieval.lexical.query_term_frequency` matches; the mapping itself is the same either way."""
    lucene = load_config("qmd").with_updates({"retrieval.lexical.query_term_frequency": True})
    for engine in ("opensearch", "elasticsearch", "weaviate"):
        off, on = export_config("qmd", engine), export_config(lucene, engine)
        assert "Repeated query words:" in off.analyzer_note and "set it to true" in off.analyzer_note, engine
        assert "query_term_frequency: true" in on.analyzer_note and "set it to true" not in on.analyzer_note, engine
        assert off.payload == on.payload and off.not_carried == on.not_carried, engine
    assert "not checked" in export_config("qmd", "lancedb").analyzer_note
    assert "Repeated" not in export_config("vector-only", "opensearch").analyzer_note  # no BM25, nothing to say

# ---------------------------------------------------------------- user trial: overwrites, single lists, windows, analyzers
def test_export_refuses_to_write_over_the_config_it_exports(tmp_path, monkeypatch):
    """A user trial: `hrt export --config victim.yaml --engine opensearch --out victim.yaml` replaced the tuned
    config with the payload. The same file (by any path) is refused; another existing file is overwritten."""
    from click.testing import CliRunner

    from toolkit.cli import main
    from toolkit.config import save_config

    monkeypatch.chdir(tmp_path)
    save_config(load_config("qmd"), tmp_path / "victim.yaml")
    before = (tmp_path / "victim.yaml").read_text()
    r = CliRunner().invoke(main, ["export", "--config", "victim.yaml", "--engine", "opensearch", "--out", "victim.yaml"])
    assert r.exit_code != 0 and "victim.yaml" in r.output and "Traceback" not in r.output
    with pytest.raises(InputError, match="victim.yaml"):
        write_export(load_config("victim.yaml"), "toolkit", tmp_path / "sub" / ".." / "victim.yaml", source="./victim.yaml")
    with pytest.raises(InputError, match="victim.yaml"):  # a config given as a path is its own source
        write_export(str(tmp_path / "victim.yaml"), "elasticsearch", "victim.yaml")
    (tmp_path / "tuned.README.md").write_text(before)  # nor may the caveats file land on the config
    with pytest.raises(InputError, match="README"):
        write_export("tuned.README.md", "weaviate", "tuned")
    assert not (tmp_path / "tuned").exists() and (tmp_path / "tuned.README.md").read_text() == before
    assert (tmp_path / "victim.yaml").read_text() == before and not (tmp_path / "sub").exists()
    (tmp_path / "old.json").write_text("{}")  # a previous export is replaced, as tutorials re-export each run
    r = CliRunner().invoke(main, ["export", "--config", "qmd", "--engine", "opensearch", "--out", "old.json"])
    assert r.exit_code == 0 and "search_pipeline" in json.loads((tmp_path / "old.json").read_text())


BM25_ONLY, VECTOR_ONLY = load_config("bm25-only"), load_config("vector-only")
LEX_OFF = load_config("qmd").with_updates({"name": "qmd-dense", "retrieval.lexical.enabled": False})
DENSE_OFF = load_config("qmd").with_updates({"name": "qmd-bm25", "retrieval.dense.enabled": False,
                                             "retrieval.lexical.k1": 0.9})
SINGLE = [BM25_ONLY, VECTOR_ONLY, LEX_OFF, DENSE_OFF]


@pytest.mark.parametrize("cfg", SINGLE, ids=lambda c: c.name)
def test_single_retriever_configs_export_the_plain_query(cfg):
    """A user trial: bm25-only was exported as a hybrid request with a zero-weight knn leg and a dense_vector
    mapping (and a 9.2 minimum version), while its note said to run the plain query."""
    lexical = cfg.retrieval.lexical.enabled
    es = export_config(cfg, "elasticsearch")
    body, props = es.payload["search"]["body"], es.payload["index"]["body"]["mappings"]["properties"]
    assert "retriever" not in body and ("query" in body) == lexical and ("knn" in body) == (not lexical)
    assert set(props) == ({"text"} if lexical else {"embedding"})
    assert es.min_version.startswith("7.0" if lexical else "8.4")
    os_ = export_config(cfg, "opensearch")
    q = os_.payload["search"]["body"]["query"]
    assert "search_pipeline" not in os_.payload and list(q) == (["match"] if lexical else ["knn"])
    assert set(os_.payload["index"]["body"]["mappings"]["properties"]) == ({"text"} if lexical else {"embedding"})
    assert os_.min_version.startswith("1.0" if lexical else "2.17")
    if cfg.retrieval.lexical.k1 != 1.2:  # the BM25 similarity is kept
        assert os_.payload["index"]["body"]["settings"]["index"]["similarity"]["hrt_bm25"]["k1"] == 0.9
    wv = export_config(cfg, "weaviate").payload
    assert "hybrid" not in wv and ("bm25" if lexical else "near_vector") in wv and "hybrid" not in wv["graphql"]
    assert ("MODE = 'fts'" if lexical else "MODE = 'vector'") in export_config(cfg, "lancedb").payload
    for engine in ("elasticsearch", "opensearch", "weaviate", "lancedb"):
        assert export_config(cfg, engine).notes[0].endswith("plain BM25 query" if lexical else "plain vector query")

    # The bodies as the clients send them.
    esc = pytest.importorskip("elasticsearch")
    client, sent = esc.Elasticsearch("http://localhost:9200"), []
    client.perform_request = lambda method, path, **kw: sent.append(kw.get("body"))
    client.search(index="docs", **fill(body))
    assert sent == [fill(body)]
    pytest.importorskip("weaviate")
    from weaviate.collections.grpc.query import _QueryGRPC
    from weaviate.util import _ServerVersion

    builder = _QueryGRPC(_ServerVersion(1, 32, 0), "Docs", None, None, True, True, True)
    if lexical:
        b = fill(wv["bm25"])
        req = builder.bm25(query=b["query"], properties=b["query_properties"], limit=b["limit"])
        assert req.bm25_search.query == "deploy fails" and req.limit == cfg.output.n
    else:
        req = builder.near_vector(**fill(wv["near_vector"]))
        assert req.limit == cfg.output.n and req.HasField("near_vector")


@pytest.mark.parametrize("cfg", [BM25_ONLY, VECTOR_ONLY], ids=lambda c: c.name)
def test_lancedb_single_retriever_module_runs_the_one_search(cfg, tmp_path):
    lancedb = pytest.importorskip("lancedb")
    path = tmp_path / f"lance_{cfg.name.replace('-', '_')}.py"
    write_export(cfg, "lancedb", path)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    texts = ["deploy failed", "deploy retry", "team lunch"]
    rows = [{"doc_id": f"d{i}", "scope": "a", "text": t, "vector": [float(i == j) for j in range(4)]} for i, t in enumerate(texts)]
    tbl = lancedb.connect(str(tmp_path / "db")).create_table("docs", rows)
    if cfg.retrieval.lexical.enabled:
        tbl.create_index("text", config=mod.fts_config())
        got = mod.search(tbl, "deploy")
        assert sorted(got["doc_id"]) == ["d0", "d1"]  # BM25 matches only: no vector leg adds the rest
    else:
        got = mod.search(tbl, None, [0.0, 1.0, 0.0, 0.0])
        assert got["doc_id"].tolist()[0] == "d1" and got["_relevance_score"].iloc[0] == pytest.approx(1.0)
    assert len(mod.search(tbl, "deploy", [0.0, 1.0, 0.0, 0.0], scope="b")) == 0  # the scope column is read


def test_windows_candidates_and_size_fit_the_engines_limits():
    """A user trial: dense.top_k 6000 gave num_candidates 12000 (ES allows 10,000); output.n 50 over an RRF
    window of 10 gave rank_window_size 10 with size 50 (ES requires rank_window_size >= size); and each list's
    own top_k was replaced by the larger one without a word."""
    deep = load_config("hybrid-rrf").with_updates({"retrieval.dense.top_k": 6000})
    es = export_config(deep, "elasticsearch")
    knn = es.payload["search"]["body"]["retriever"]["rrf"]["retrievers"][1]["knn"]
    assert (knn["k"], knn["num_candidates"]) == (6000, 10_000) and any("capped" in x and "10000" in x for x in es.notes)
    assert not any("capped" in x for x in export_config("hybrid-rrf", "elasticsearch").notes)

    wide = load_config("hybrid-rrf").with_updates({"retrieval.lexical.top_k": 10, "retrieval.dense.top_k": 10, "output.n": 50})
    es = export_config(wide, "elasticsearch")
    body = es.payload["search"]["body"]
    assert body["retriever"]["rrf"]["rank_window_size"] >= body["size"] == 50
    assert any("rank_window_size raised to size 50" in x for x in es.notes)

    uneven = load_config("hybrid-rrf").with_updates({"retrieval.lexical.top_k": 20, "retrieval.dense.top_k": 100})
    es = export_config(uneven, "elasticsearch")
    assert es.payload["search"]["body"]["retriever"]["rrf"]["retrievers"][1]["knn"]["k"] == 100
    os_ = export_config(uneven, "opensearch")
    assert os_.payload["search"]["body"]["query"]["hybrid"]["queries"][1]["knn"]["embedding"]["k"] == 100
    for res in (es, os_):  # one window for the BM25 list: said
        assert any("lexical.top_k 20" in x and "unified" in x for x in res.notes), res.engine
    assert not any("unified" in x for x in export_config("hybrid-rrf", "opensearch").notes)
    lance = export_config(uneven, "lancedb").payload  # two searches: each its own window
    assert "FTS_WINDOW = 20" in lance and "VECTOR_WINDOW = 100" in lance


def test_opensearch_minimum_version_covers_every_part_of_the_payload():
    """A user trial: weighted RRF claimed 3.0 (weights in score-ranker-processor came in 3.1), convex 2.10 while
    its mapping's top-level space_type needs 2.17 and its pagination_depth 2.19."""
    weighted = export_config(WEIGHTED, "opensearch")
    assert weighted.min_version.startswith("3.1") and "weights" in weighted.payload["search_pipeline"]["body"][
        "phase_results_processors"][0]["score-ranker-processor"]["combination"]["parameters"]
    convex = export_config(CONVEX, "opensearch")
    assert convex.min_version.startswith("2.19") and "pagination_depth" in convex.payload["search"]["body"]["query"]["hybrid"]
    (per_part,) = [x for x in convex.notes if x.startswith("minimum version per part")]
    assert "space_type 2.17" in per_part and "pagination_depth 2.19" in per_part and "hybrid query 2.10" in per_part
    zscore = CONVEX.with_updates({"fusion.normalization": "zscore"})
    assert export_config(zscore, "opensearch").min_version.startswith("3.0")


@pytest.mark.parametrize(("stemmer", "stopwords", "analyzer", "filters"), [
    ("none", "none", "standard", None),
    ("none", "english", "hrt_text", ["lowercase", "hrt_stop"]),
    ("porter", "none", "hrt_text", ["lowercase", "porter_stem"]),
    ("porter", "english", "english", None),
    (None, None, "english", None),
])
def test_the_analyzer_follows_the_configs_stemmer_and_stopwords(stemmer, stopwords, analyzer, filters):
    """A user trial: stemmer none / stopwords none still exported the `english` analyzer (and FTS(stem=True,
    remove_stop_words=True)), with a note reading "stems (none), drops none stopwords"."""
    cfg = load_config("qmd").with_updates({"retrieval.lexical.stemmer": stemmer, "retrieval.lexical.stopwords": stopwords})
    for engine in ("opensearch", "elasticsearch"):
        res = export_config(cfg, engine)
        body = res.payload["index"]["body"]
        assert body["mappings"]["properties"]["text"]["analyzer"] == analyzer, engine
        custom = body.get("settings", {}).get("index", {}).get("analysis", {}).get("analyzer", {})
        assert (custom["hrt_text"]["filter"] if custom else None) == filters, engine
        assert f"`{analyzer}` analyzer" in res.analyzer_note and "(none)" not in res.analyzer_note
        assert "drops none" not in res.analyzer_note
    if (stemmer, stopwords) == ("none", "none"):
        assert "does not stem, keeps stopwords" in export_config(cfg, "opensearch").analyzer_note
    lance = export_config(cfg, "lancedb")
    assert f"STEM = {stemmer != 'none'}" in lance.payload and f"REMOVE_STOP_WORDS = {stopwords != 'none'}" in lance.payload
    assert f"FTS(stem={stemmer != 'none'}, remove_stop_words={stopwords != 'none'}" in lance.analyzer_note


def test_the_configs_vector_dimensions_reach_the_mappings_or_are_a_named_placeholder():
    """A user trial: `dimensions: 256` with an http model exported `"dims": "{{dims}}"`, and the notes named only
    {{query}} and {{query_vector}} as placeholders."""
    http = {"retrieval.dense.provider": "http", "retrieval.dense.url": "http://localhost:8080/v1",
            "retrieval.dense.model": "my-embedder"}
    sized = load_config("hybrid-rrf").with_updates(http | {"retrieval.dense.dimensions": 256})
    assert export_config(sized, "elasticsearch").payload["index"]["body"]["mappings"]["properties"]["embedding"]["dims"] == 256
    assert export_config(sized, "opensearch").payload["index"]["body"]["mappings"]["properties"]["embedding"]["dimension"] == 256
    assert "DIMS = 256" in export_config(sized, "lancedb").payload
    for engine in ("elasticsearch", "opensearch"):
        res = export_config(sized, engine)
        assert "{{dims}}" not in json.dumps(res.payload) and not any("{{dims}}" in x for x in res.notes), engine
        unsized = export_config(load_config("hybrid-rrf").with_updates(http), engine)
        assert "{{dims}}" in json.dumps(unsized.payload), engine
        (holes,) = [x for x in unsized.notes if x.startswith("placeholders")]
        assert all(h in holes for h in ("{{dims}}", "{{query}}", "{{query_vector}}", "{{index}}")), engine


def test_the_lancedb_module_names_every_column_it_reads():
    """The module reads `scope` (search(..., scope=...)): its docstring lists the column."""
    src = export_config("hybrid-rrf", "lancedb").payload
    doc = src.split('"""', 2)[1]
    assert "where(" in src and "scope (str" in doc
