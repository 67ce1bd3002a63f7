"""`hrt embed --engine ray`: a Ray Data pipeline (local Ray here) gives the local path's vectors, and the
store ingests them as precomputed vectors without embedding anything."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.embed_corpus import embed_corpus
from toolkit.loaders import load_corpus
from toolkit.store import Store

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"


@pytest.mark.long
def test_ray_pipeline_matches_local_vectors_and_ingests_as_precomputed(tmp_path):
    pytest.importorskip("ray")
    # 60 of the demo's documents (63 chunks; Ray hands the actor 32 at a time with --batch-size 8), so the
    # whole corpus is not embedded twice: Ray's own start-up is most of what is left.
    demo = tmp_path / "demo"
    demo.mkdir()
    lines = (DEMO / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (demo / "corpus.jsonl").write_text("".join(lines[:60]), encoding="utf-8")
    docs = load_corpus(demo)
    _, local = embed_corpus(docs, tmp_path / "local.parquet", engine="local")
    r = CliRunner().invoke(main, ["embed", str(demo), "--engine", "ray", "--actors", "1", "--batch-size", "8", "--out", str(tmp_path / "ray.parquet")])
    assert r.exit_code == 0, (r.output, repr(r.exception))
    ray_vecs = pl.read_parquet(tmp_path / "ray.parquet")
    assert ray_vecs["chunk_id"].sort().equals(local["chunk_id"].sort()) and ray_vecs["model"].unique().to_list() == [local["model"][0]]
    j = local.join(ray_vecs, on="chunk_id", suffix="_ray")
    np.testing.assert_allclose(np.stack(j["vector"].to_list()), np.stack(j["vector_ray"].to_list()), atol=1e-5)

    r = CliRunner().invoke(main, ["ingest", str(demo), "--store", str(tmp_path / "s.duckdb"), "--vectors", str(tmp_path / "ray.parquet")])
    assert r.exit_code == 0, r.output
    assert f"{len(local)} supplied" in r.output  # looked up, not run through a model
    with Store(tmp_path / "s.duckdb", read_only=True) as st:
        assert st.embedding_model == local["model"][0] and st.stats()["embeddings"] == len(local)
        # queries from the local model search the cluster-made vectors
        hits = st.dense_search(pl.DataFrame({"qid": ["q"], "text": ["deploy fails with ECONNREFUSED"]}), top_k=3, scope_filter=False)
        assert len(hits) == 3
