"""hybrid-retrieval-toolkit: tune BM25 + dense retrieval, fusion, guarded reranking and dedup in one DuckDB file."""

__version__ = "0.1.0"
