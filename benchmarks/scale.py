"""How the toolkit grows with the corpus: ingest, disk, memory, lexical and dense throughput, HNSW, the lab.

For each size (chunks; default 10k, 100k, 1M) one run builds a corpus, ingests it into a fresh store with
precomputed vectors, and measures, on a fixed set of 1,000 queries:

- ingest time, split into the lexical part (documents, chunks, BM25 index) and the vector load;
- store size on disk, and peak memory (max RSS of the process that measured this size: one subprocess each);
- batched lexical queries/s (`Store.lexical_search`) against bm25s on the same texts (index built once);
- batched exact dense queries/s (`Store.dense_search`) against numpy brute force on the same vectors;
- the store's HNSW index (`Store.build_vector_index`: usearch, batched over all cores, int8 graph re-ranked
  on the exact vectors): build time, top-10 queries/s at two ef_search values with recall@10 against exact
  search, and numpy brute force top-10 on the same vectors as the peer;
- `prepare` (candidate lists for a hybrid RRF config) and the live `rescore` of one slider change.

The corpus: real text first (every chunk of the shared collections, each as one document, with the vectors
their stores hold), then a generated remainder with the real corpus's vocabulary and length distribution:
words drawn from the real unigram distribution (Zipfian, so BM25 posting lists have realistic lengths),
lengths drawn from the real chunk lengths, and each vector made from the real ones (`--vectors`: `interp`, a
point between a real chunk and one of its near neighbours, the default; `noise`, a real vector plus isotropic
noise, the worst case for a graph index; see `generate_vectors`). The corpus is written to Parquet + .npy by a
process of its own, and the measuring process reads it through the toolkit's loader, so its peak memory is
the toolkit's.
Queries: 1,000 real queries of the shared collections (scope dropped), embedded once.

    .venv/bin/python benchmarks/scale.py --stores /tmp/stores --workdir /tmp/scale               # 10k, 100k, 1M
    .venv/bin/python benchmarks/scale.py --sizes 10000 --stores /tmp/stores --workdir /tmp/scale # smoke run

`--stores DIR` holds one ingested store per shared collection (`hrt ingest ../shared/datasets/NAME --store
DIR/NAME.duckdb`; opened read-only). Markdown goes to stdout (and `--markdown FILE`), the growth plots to
`--html FILE` (plotly, log-log). Timings are medians of `--repeats` runs after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
COLLECTIONS = ["locomo", "cacm", "vaswani", "msmarco-dl19-5k"]
SHARED = HERE.parents[1] / "shared" / "datasets"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def median_time(fn: Any, repeats: int) -> tuple[float, Any]:
    """Median wall time of `repeats` calls after one untimed warm-up, and the last result."""
    out = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


class StepPeaks:
    """Peak resident memory per step, sampled every 20 ms by a thread: the process's max RSS says how high
    memory went, this says in which step (the wall). Reads /proc/self/statm (Linux)."""

    def __init__(self) -> None:
        self.step = "start"
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def at(self, step: str) -> None:
        self._sample()
        self.step = step

    def _sample(self) -> None:
        with open("/proc/self/statm") as f:
            mb = int(f.read().split()[1]) * self._page_mb
        self.peaks[self.step] = max(self.peaks.get(self.step, 0.0), mb)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._sample()

    def stop(self) -> dict[str, float]:
        self._sample()
        self._stop.set()
        self._thread.join()
        return {k: round(v) for k, v in self.peaks.items()}


# ------------------------------------------------------------------------------------------ material
def build_material(stores: Path, workdir: Path, n_queries: int, datasets: Path = SHARED) -> Path:
    """Real chunks with their vectors, and the query set with its vectors (once, kept in `workdir`)."""
    from toolkit.loaders import Dataset
    from toolkit.store import Store

    out = workdir / "material"
    if (out / "DONE").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    parts, queries = [], []
    for name in COLLECTIONS:
        path = stores / f"{name}.duckdb"
        if not path.exists():
            raise SystemExit(f"{path}: missing; ingest the collection first (see --help)")
        with Store(path, read_only=True) as st:
            df = st.con.execute(
                "SELECT c.chunk_id, CASE WHEN d.title <> '' THEN d.title || chr(10) || c.text ELSE c.text END AS text, "
                "e.vec FROM chunks c JOIN documents d USING (doc_id) JOIN embeddings e USING (chunk_id) ORDER BY c.chunk_id"
            ).pl()
        parts.append(df.with_columns((pl.lit(f"{name}:") + pl.col("chunk_id")).alias("chunk_id")))
        q = Dataset.open(datasets / name).queries()
        queries.append(q.select((pl.lit(f"{name}:") + pl.col("qid")).alias("qid"), "text"))
    real = pl.concat(parts)
    vecs = np.asarray(real["vec"].to_list(), dtype=np.float32)
    np.save(out / "real_vecs.npy", vecs)
    real.select("chunk_id", "text").write_parquet(out / "real.parquet")
    allq = pl.concat(queries)
    pick = np.linspace(0, len(allq) - 1, min(n_queries, len(allq))).round().astype(int)
    qs = allq[pick.tolist()]
    from toolkit.embed import SentenceTransformerEmbedder

    qv = SentenceTransformerEmbedder().embed(qs["text"].to_list())
    qs.write_parquet(out / "queries.parquet")
    np.save(out / "query_vecs.npy", qv)
    (out / "DONE").write_text("")
    log(f"material: {len(real):,} real chunks, {len(qs):,} queries")
    return out


def generate_vectors(rvec: np.ndarray, n: int, rng: np.random.Generator, how: str) -> np.ndarray:
    """`n` vectors made from the real ones (L2-normalised).

    interp: a point on the segment between a real chunk's vector and one of its 20 nearest real neighbours
    (uniform position) plus a little noise: new text "between" two related chunks, so the generated points
    keep the real data's neighbourhoods. noise: a real vector plus isotropic Gaussian noise (norm ~0.35), ~37
    copies of each real chunk at 1M, each cluster a full-dimensional cloud whose top-10 order against a
    query is decided by the noise alone: the worst case for a graph index (the first session's generator).
    """
    idx = rng.integers(0, len(rvec), size=n)
    if how == "noise":
        v = rvec[idx] + rng.normal(0.0, 0.35 / np.sqrt(rvec.shape[1]), size=(n, rvec.shape[1])).astype(np.float32)
    elif how == "interp":
        nn = np.empty((len(rvec), 20), dtype=np.int64)
        for s in range(0, len(rvec), 2048):
            sims = rvec[s : s + 2048] @ rvec.T
            nn[s : s + 2048] = np.argpartition(-sims, 21, axis=1)[:, 1:21]
        other = nn[idx, rng.integers(0, 20, size=n)]
        lam = rng.uniform(0.0, 1.0, size=(n, 1)).astype(np.float32)
        v = lam * rvec[idx] + (1 - lam) * rvec[other]
        v += rng.normal(0.0, 0.05 / np.sqrt(rvec.shape[1]), size=v.shape).astype(np.float32)
    else:
        raise ValueError(f"unknown vector generator {how!r}")
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.astype(np.float32)


def generate_corpus(material: Path, n: int, seed: int = 0, vectors: str = "interp") -> tuple[pl.DataFrame, np.ndarray]:
    """`n` documents of one chunk each: the real chunks first, then generated ones (see the module doc)."""
    real = pl.read_parquet(material / "real.parquet")
    rvec = np.load(material / "real_vecs.npy")
    take = min(n, len(real))
    texts = real["text"].to_list()[:take]
    vecs = [rvec[:take]]
    rest = n - take
    if rest > 0:
        rng = np.random.default_rng(seed)
        tokens = pl.Series(texts).str.to_lowercase().str.extract_all(r"[a-z0-9_]+")
        lengths = tokens.list.len().to_numpy()
        lengths = lengths[lengths > 0]
        counts = tokens.explode().value_counts(sort=True)
        words = counts["" if "" in counts.columns else counts.columns[0]].to_numpy()
        p = counts["count"].to_numpy().astype(np.float64)
        p /= p.sum()
        lens = rng.choice(lengths, size=rest)
        flat = rng.choice(len(words), size=int(lens.sum()), p=p)
        ends = np.cumsum(lens)
        starts = ends - lens
        wl = words.tolist()
        texts += [
            " ".join(wl[i] for i in flat[s:e]) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)
        ]
        vecs.append(generate_vectors(rvec, rest, rng, vectors))
    ids = [f"d{i:07d}" for i in range(n)]
    return pl.DataFrame({"doc_id": ids, "title": [""] * n, "text": texts}), np.concatenate(vecs)


def corpus_files(workdir: Path, n: int) -> tuple[Path, Path]:
    return workdir / f"corpus-{n}.parquet", workdir / f"vecs-{n}.npy"


def write_corpus(material: Path, workdir: Path, n: int, vectors: str) -> None:
    """The generated corpus as a user would hand it over: a Parquet corpus and a vector file (own process)."""
    t0 = time.perf_counter()
    corpus, vecs = generate_corpus(material, n, vectors=vectors)
    corpus_path, vecs_path = corpus_files(workdir, n)
    corpus.write_parquet(corpus_path)
    np.save(vecs_path, vecs)
    Path(f"{corpus_path}.json").write_text(json.dumps({"seconds": time.perf_counter() - t0}))


# ------------------------------------------------------------------------------------------ one size
def measure(
    size: int, material: Path, workdir: Path, repeats: int, bm25s_max: int, memory_limit: str | None
) -> dict[str, Any]:
    """Everything for one corpus size (run in its own process, so its max RSS is this size's peak)."""
    from throughput import Bm25sIndex, DenseMatrix, numpy_dense

    from toolkit.config import load_config
    from toolkit.loaders import load_corpus
    from toolkit.pipeline import prepare, rescore
    from toolkit.store import IndexSettings, Store

    r: dict[str, Any] = {"chunks": size}
    steps = StepPeaks()
    # The corpus was written by another process (`write_corpus`), so this process's peak memory is the
    # toolkit's: the loader's documents, ingest, the indexes and the queries, not the generator's arrays.
    corpus_path, vecs_path = corpus_files(workdir, size)
    r["generate_s"] = json.loads(Path(f"{corpus_path}.json").read_text())["seconds"]
    vecs = np.load(vecs_path, mmap_mode="r")
    queries = pl.read_parquet(material / "queries.parquet")
    qv = np.load(material / "query_vecs.npy")
    path = workdir / f"scale-{size}.duckdb"
    for p in (path, Path(f"{path}.wal")):
        p.unlink(missing_ok=True)

    steps.at("load corpus")
    docs = list(load_corpus(corpus_path))  # what `hrt ingest corpus.parquet` reads
    texts = [d["text"] for d in docs]
    # Each document is one chunk (the chunk size exceeds every text), so a chunk's vector is its document's.
    settings = IndexSettings(chunk_size=100_000, chunk_overlap=0)
    with Store(path, memory_limit=memory_limit) as st:
        steps.at("ingest: lexical")
        t0 = time.perf_counter()
        st.ingest(docs, settings=settings, embed=False)
        r["ingest_lexical_s"] = time.perf_counter() - t0
        steps.at("ingest: supply vectors (harness)")
        t0 = time.perf_counter()
        supply_vectors(st, texts, vecs)
        steps.at("ingest: vectors")
        st.ingest(docs, settings=settings)  # embeds nothing: every chunk's vector is in the embedding cache
        r["ingest_vectors_s"] = time.perf_counter() - t0
    del docs, texts
    r["store_mb"] = sum(p.stat().st_size for p in (path, Path(f"{path}.wal")) if p.exists()) / 2**20
    log(
        f"{size:,}: ingested in {r['ingest_lexical_s'] + r['ingest_vectors_s']:.1f} s ({r['store_mb']:.0f} MB)"
    )

    qframe = queries.with_columns(pl.lit(None, pl.Utf8).alias("scope"))
    with Store(path, memory_limit=memory_limit) as st:
        steps.at("lexical search")
        r["lexical_s"], _ = median_time(lambda: st.lexical_search(qframe, top_k=100), repeats)
        r["lexical_qps"] = len(qframe) / r["lexical_s"]
        log(f"{size:,}: lexical {r['lexical_qps']:.0f} q/s")
        steps.at("dense exact search")
        r["dense_s"], exact = median_time(lambda: st.dense_search(qframe, top_k=100, vectors=qv), repeats)
        r["dense_qps"] = len(qframe) / r["dense_s"]
        log(f"{size:,}: dense exact {r['dense_qps']:.0f} q/s")

        steps.at("HNSW build")
        t0 = time.perf_counter()
        st.build_vector_index()
        r["hnsw_build_s"] = time.perf_counter() - t0
        steps.at("HNSW search")
        for ef, tag in EF_SEARCH:
            r[f"{tag}_s"], approx = median_time(
                lambda ef=ef: st.dense_search(qframe, top_k=10, vectors=qv, index="hnsw", ef_search=ef),
                repeats,
            )
            r[f"{tag}_qps"] = len(qframe) / r[f"{tag}_s"]
            r[f"{tag}_recall10"] = recall_at(exact, approx, 10)
            log(
                f"{size:,}: HNSW (built {r['hnsw_build_s']:.1f} s) ef_search {ef}: {r[f'{tag}_qps']:.0f} q/s, "
                f"recall@10 {r[f'{tag}_recall10']:.3f}"
            )

        cfg = load_config("hybrid-rrf")
        # Query vectors come from the embedding cache, as in any second run over the same queries.
        supply_vectors(st, qframe["text"].to_list(), qv)
        steps.at("prepare")
        t0 = time.perf_counter()
        prep = prepare(st, qframe, cfg, use_cache=False)
        r["prepare_s"] = time.perf_counter() - t0
        changes = [cfg.with_updates({"fusion.lexical_weight": w}) for w in (0.5, 1.5, 2.0, 3.0, 1.0)]
        steps.at("rescore")
        times = []
        rescore(prep, cfg)
        for c in changes * max(1, repeats):
            t0 = time.perf_counter()
            rescore(prep, c, trace=False)
            times.append(time.perf_counter() - t0)
        r["rescore_ms"] = statistics.median(times) * 1000
        log(f"{size:,}: prepare {r['prepare_s']:.1f} s, rescore {r['rescore_ms']:.0f} ms")
        del prep
        # The toolkit's own high-water mark, before the peers below add theirs to this process.
        r["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        r["step_peak_mb"] = steps.stop()

        # The peer gets the same vectors as a float32 matrix (DenseMatrix.from_store goes through Python lists:
        # about 30 GB at a million chunks, which is what killed the first 1M run).
        dm = st._dense_matrix()
        m = DenseMatrix(
            dm["vecs"],
            dm["starts"],
            dm["doc_ids"].gather(dm["starts"]).to_numpy(),
            dm["doc_scope_code"],
            dm["scope_names"],
        )
        del dm
    files = (path, Path(f"{path}.wal"), Path(f"{path}.hnsw"))
    r["store_mb_with_hnsw"] = sum(p.stat().st_size for p in files if p.exists()) / 2**20
    qs = np.full(len(qframe), -1)
    # The toolkit's cell budget per score block, for the peer too (its default 1,024 queries is 4 GB at 1M).
    nb = max(1, 32_000_000 // size)
    r["numpy_s"], _ = median_time(lambda m=m: numpy_dense(m, qv, qs, 100, block=nb), repeats)
    r["numpy_qps"] = len(qframe) / r["numpy_s"]
    r["numpy10_s"], _ = median_time(lambda m=m: numpy_dense(m, qv, qs, 10, block=nb), repeats)
    r["numpy10_qps"] = len(qframe) / r["numpy10_s"]
    del m
    log(f"{size:,}: numpy {r['numpy_qps']:.0f} q/s")
    if size <= bm25s_max:
        corpus = pl.read_parquet(corpus_path)
        docs_b = [
            {"doc_id": d, "title": "", "text": t, "scope": None}
            for d, t in zip(corpus["doc_id"].to_list(), corpus["text"].to_list(), strict=True)
        ]
        del corpus
        t0 = time.perf_counter()
        bm = Bm25sIndex.build(docs_b, {None}, "numpy", None)
        r["bm25s_index_s"] = time.perf_counter() - t0
        texts = qframe["text"].to_list()
        r["bm25s_s"], _ = median_time(lambda: bm.retrieve(texts, [None] * len(texts), 100), repeats)
        r["bm25s_qps"] = len(texts) / r["bm25s_s"]
        log(f"{size:,}: bm25s {r['bm25s_qps']:.0f} q/s")
    for p in (*files, corpus_path, vecs_path, Path(f"{corpus_path}.json")):
        p.unlink(missing_ok=True)
    return r


def supply_vectors(st: Any, texts: list[str], vecs: np.ndarray) -> None:
    """Precomputed vectors into the store's embedding cache (keyed by model and text hash), where ingest and
    query embedding look before they compute anything: the vectors are supplied, not embedded."""
    from toolkit.store import sha1

    seen: set[str] = set()
    for s in range(0, len(texts), 100_000):  # in batches: one 1M-row list column would double the peak
        hashes = [sha1(t) for t in texts[s : s + 100_000]]
        keep = [i for i, h in enumerate(hashes) if h not in seen]  # repeated texts (the same question twice)
        seen.update(hashes)
        frame = pl.DataFrame(
            {"text_hash": [hashes[i] for i in keep], "vec": np.asarray(vecs[s : s + 100_000])[keep]},
            schema={"text_hash": pl.Utf8, "vec": pl.List(pl.Float32)},
        ).unique("text_hash", keep="first")
        st.con.register("supplied", frame)
        st.con.execute(
            "INSERT INTO embedding_cache SELECT ?, text_hash, vec FROM supplied", [st.embedder().model_id]
        )
        st.con.unregister("supplied")


def recall_at(exact: pl.DataFrame, approx: pl.DataFrame, k: int) -> float:
    """Mean share of each query's exact top k that the approximate top k holds."""
    e = exact.filter(pl.col("rank") <= k).select("qid", "doc_id")
    a = approx.filter(pl.col("rank") <= k).select("qid", "doc_id")
    hit = e.join(a, on=["qid", "doc_id"], how="semi").group_by("qid").len()
    per = e.group_by("qid").len().join(hit, on="qid", how="left", suffix="_hit")
    return float((per["len_hit"].fill_null(0) / per["len"]).mean())


# ------------------------------------------------------------------------------------------ report
EF_SEARCH = ((128, "hnsw"), (512, "hnsw512"))  # (ef_search, result key prefix): a fast one and the default
TARGETS_1M = {
    "ingest (s)": ("ingest_s", "<=", 900),
    "peak memory (MB)": ("peak_rss_mb", "<=", 8192),
    "lexical q/s": ("lexical_qps", ">=", 200),
    "HNSW q/s (ef 128)": ("hnsw_qps", ">=", 500),
    "HNSW recall@10 (ef 128)": ("hnsw_recall10", ">=", 0.95),
    "HNSW q/s (ef 512, the default)": ("hnsw512_qps", ">=", 500),
    "HNSW recall@10 (ef 512, the default)": ("hnsw512_recall10", ">=", 0.95),
    "rescore (ms)": ("rescore_ms", "<=", 300),
}


def report(rows: list[dict[str, Any]]) -> str:
    def f(x: Any, nd: int = 0) -> str:
        return "—" if x is None else f"{x:,.{nd}f}"

    out = [
        "| chunks | ingest: lexical + vectors (s) | store (MB; + HNSW) | peak RSS (MB) | lexical q/s (bm25s; ratio) | "
        "dense exact q/s (numpy; ratio) | HNSW build (s) | numpy top-10 q/s | HNSW ef 128: q/s / recall@10 | "
        "HNSW ef 512: q/s / recall@10 | "
        "prepare (s) | rescore (ms) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        bm = r.get("bm25s_qps")
        lex = (
            f"{f(r['lexical_qps'])} ({f(bm)}; {bm / r['lexical_qps']:.2f}x)"
            if bm
            else f"{f(r['lexical_qps'])} (not run)"
        )
        out.append(
            f"| {r['chunks']:,} | {f(r['ingest_lexical_s'], 1)} + {f(r['ingest_vectors_s'], 1)} | "
            f"{f(r['store_mb'])}; {f(r['store_mb_with_hnsw'])} | {f(r['peak_rss_mb'])} | {lex} | "
            f"{f(r['dense_qps'])} ({f(r['numpy_qps'])}; {r['numpy_qps'] / r['dense_qps']:.2f}x) | "
            f"{f(r['hnsw_build_s'], 1)} | {f(r.get('numpy10_qps'))} | {f(r['hnsw_qps'])} / {r['hnsw_recall10']:.3f} | "
            f"{f(r['hnsw512_qps'])} / {r['hnsw512_recall10']:.3f} | {f(r['prepare_s'], 1)} | "
            f"{f(r['rescore_ms'], 1)} |"
        )
    big = max(rows, key=lambda r: r["chunks"])
    if big.get("step_peak_mb"):
        out += ["", f"Peak resident memory by step at {big['chunks']:,} chunks (MB, sampled every 20 ms):", ""]
        out += [f"- {k}: {v:,}" for k, v in big["step_peak_mb"].items()]
    if big["chunks"] >= 1_000_000:
        big = {**big, "ingest_s": big["ingest_lexical_s"] + big["ingest_vectors_s"]}
        out += ["", f"Targets at {big['chunks']:,} chunks:", ""]
        for label, (key, op, want) in TARGETS_1M.items():
            v = big[key]
            ok = v <= want if op == "<=" else v >= want
            shown = f"{v:.3f}" if v < 10 else f"{v:,.0f}"
            out.append(f"- {label}: {shown} (target {op} {want:,}) {'met' if ok else 'MISSED'}")
    return "\n".join(out)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    x = [r["chunks"] for r in rows]
    panels = {
        "ingest (s)": {
            "lexical": "ingest_lexical_s",
            "vectors": "ingest_vectors_s",
            "HNSW build": "hnsw_build_s",
        },
        "queries / s": {
            "lexical (ours)": "lexical_qps",
            "bm25s": "bm25s_qps",
            "dense exact (ours)": "dense_qps",
            "numpy": "numpy_qps",
            "numpy top-10": "numpy10_qps",
            "HNSW ef 128": "hnsw_qps",
            "HNSW ef 512": "hnsw512_qps",
        },
        "memory and disk (MB)": {
            "peak RSS": "peak_rss_mb",
            "store": "store_mb",
            "store + HNSW": "store_mb_with_hnsw",
        },
        "pipeline": {"prepare (s)": "prepare_s", "rescore (ms)": "rescore_ms"},
    }
    fig = make_subplots(rows=2, cols=2, subplot_titles=list(panels))
    for i, series in enumerate(panels.values()):
        for name, key in series.items():
            pts = [(c, r.get(key)) for c, r in zip(x, rows, strict=True) if r.get(key)]
            if pts:
                fig.add_trace(
                    go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], name=name, mode="lines+markers"),
                    row=i // 2 + 1,
                    col=i % 2 + 1,
                )
    fig.update_xaxes(type="log", title_text="chunks")
    fig.update_yaxes(type="log")
    fig.update_layout(height=800, title="Growth with corpus size (log-log)")
    fig.write_html(path, include_plotlyjs="cdn")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--stores", default="/tmp/stores")
    ap.add_argument("--workdir", default="/tmp/scale")
    ap.add_argument("--datasets", default=str(SHARED), help="The shared collections (BEIR layout), for the queries.")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bm25s-max", type=int, default=1_000_000, help="Largest size the bm25s peer runs at.")
    ap.add_argument(
        "--memory-limit", default="4GB", help="DuckDB memory limit of the store (spills past it)."
    )
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--html", default=None)
    ap.add_argument(
        "--one", type=int, default=None, help=argparse.SUPPRESS
    )  # child process: one size, JSON out
    ap.add_argument("--gen", type=int, default=None, help=argparse.SUPPRESS)  # child process: write one corpus
    ap.add_argument("--vectors", choices=["interp", "noise"], default="interp", help="How generated vectors are made (generate_vectors).")
    args = ap.parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    material = build_material(Path(args.stores), workdir, args.queries, Path(args.datasets))
    if args.gen is not None:
        write_corpus(material, workdir, args.gen, args.vectors)
        return
    if args.one is not None:
        print(
            json.dumps(measure(args.one, material, workdir, args.repeats, args.bm25s_max, args.memory_limit))
        )
        return
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        log(f"size {size:,}: load average {os.getloadavg()[0]:.2f}")
        base = ["--stores", args.stores, "--workdir", args.workdir, "--datasets", args.datasets, "--queries", str(args.queries)]
        subprocess.run([sys.executable, __file__, "--gen", str(size), "--vectors", args.vectors, *base], check=True)
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                str(size),
                "--stores",
                args.stores,
                "--workdir",
                args.workdir,
                "--datasets",
                args.datasets,
                "--queries",
                str(args.queries),
                "--repeats",
                str(args.repeats),
                "--bm25s-max",
                str(args.bm25s_max),
                "--memory-limit",
                args.memory_limit,
            ],
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
        rows.append(json.loads(child.stdout.strip().splitlines()[-1]))
        (workdir / "scale.json").write_text(json.dumps(rows, indent=1))
    md = report(rows)
    print(md)
    if args.markdown:
        Path(args.markdown).write_text(md + "\n")
    if args.html:
        plot(rows, Path(args.html))


if __name__ == "__main__":
    main()
