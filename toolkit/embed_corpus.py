"""`hrt embed`: chunk a corpus and embed its chunks into a vectors file that `hrt ingest --vectors` loads.

Embedding is the step that outgrows one machine first. With `engine="ray"` the chunk table becomes a Ray
Dataset and `map_batches` sends it through a pool of actors, each holding one copy of the model (loaded
once per actor, not per batch); the vectors come back to the driver and are written as Parquet. So a
cluster does the embedding, and one machine keeps the store. `engine="local"` is the same computation in
this process (the reference the Ray path is tested against).

Chunks are cut exactly as `Store.ingest` cuts them (same settings, same "title\\ntext" body, same sha1), so
the store finds every vector by its text hash and computes nothing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from .chunking import chunk_body, chunk_text
from .errors import ToolkitError, install_hint

CHUNK_COLUMNS = ("doc_id", "chunk_id", "text_hash", "body")


def chunk_table(docs: list[dict[str, Any]], chunk_size: int = 1000, chunk_overlap: int = 150) -> pl.DataFrame:
    """[doc_id, chunk_id, text_hash, body]: one row per chunk, as the store will chunk the documents."""
    rows = []
    for d in docs:
        for c in chunk_text(d["text"], chunk_size, chunk_overlap) or []:
            body = chunk_body(d["title"], c.text)
            rows.append((d["doc_id"], f"{d['doc_id']}#{c.ord}", hashlib.sha1(body.encode("utf-8")).hexdigest(), body))
    return pl.DataFrame(rows, schema=dict.fromkeys(CHUNK_COLUMNS, pl.Utf8), orient="row")


class EmbedActor:
    """A Ray Data actor: builds the embedder once, then embeds each batch of bodies it is handed."""

    def __init__(self, model: str | None, backend: str, batch_size: int) -> None:
        from .embed import make_embedder

        self.emb = make_embedder(model, backend, batch_size=batch_size)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        vecs = self.emb.embed([str(t) for t in batch["body"]])
        return {"text_hash": batch["text_hash"], "vector": vecs}


def _embed_ray(unique: pl.DataFrame, *, model: str | None, backend: str, batch_size: int, actors: int,
               address: str | None) -> pl.DataFrame:
    try:
        import ray
    except ImportError as e:
        raise ToolkitError(f"--engine ray needs Ray: {install_hint('ray[data]', 'ray')}") from e
    started = False
    if not ray.is_initialized():
        # address None: a throw-away local Ray on this machine; "auto" or ray://host:10001: a running cluster.
        for attempt in range(3):
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False,
                         **({} if address else {"num_cpus": max(actors, 1)}))
                break
            except Exception as e:
                # Ray gives a new node 30 s (fixed) to register; a busy machine can miss it: start again.
                if address or attempt == 2 or "timed out during startup" not in str(e):
                    raise
                ray.shutdown()
        started = True
    try:
        ds = ray.data.from_arrow(unique.select("text_hash", "body").to_arrow())
        out = ds.map_batches(
            EmbedActor,
            fn_constructor_kwargs={"model": model, "backend": backend, "batch_size": batch_size},
            batch_size=batch_size * 4,
            batch_format="numpy",
            concurrency=actors,
        ).to_arrow_refs()
        tables = ray.get(out)
    finally:
        if started:
            ray.shutdown()
    import pyarrow as pa

    tbl = pa.concat_tables(tables)
    return pl.DataFrame({"text_hash": tbl.column("text_hash").to_pylist(),
                         "vector": np.asarray(tbl.column("vector").to_pylist(), dtype=np.float32)})


def embed_corpus(
    docs: list[dict[str, Any]],
    out: str | Path,
    *,
    engine: str = "local",
    model: str | None = None,
    backend: str = "auto",
    chunk_size: int = 1000,
    chunk_overlap: int = 150,
    batch_size: int = 64,
    actors: int = 2,
    address: str | None = None,
) -> tuple[Path, pl.DataFrame]:
    """Chunk `docs`, embed every distinct chunk body, and write the vectors file. Returns (path, frame)."""
    from .embed import embedder_model_id, make_embedder
    from .vectors import write_vectors

    if engine not in ("local", "ray"):
        raise ToolkitError(f"engine {engine!r}: use local or ray")
    chunks = chunk_table(docs, chunk_size, chunk_overlap)
    unique = chunks.unique("text_hash", keep="first", maintain_order=True)
    if engine == "local":
        emb = make_embedder(model, backend, batch_size=batch_size)
        vecs = pl.DataFrame({"text_hash": unique["text_hash"], "vector": emb.embed(unique["body"].to_list())})
    else:
        vecs = _embed_ray(unique, model=model, backend=backend, batch_size=batch_size, actors=actors, address=address)
    frame = chunks.join(vecs, on="text_hash", how="left").select("doc_id", "chunk_id", "text_hash", "vector")
    model_id = embedder_model_id(model, backend)
    meta = {"chunk_size": chunk_size, "chunk_overlap": chunk_overlap, "engine": engine, "backend": backend}
    return write_vectors(frame, out, model_id, meta), frame.with_columns(pl.lit(model_id).alias("model"))
