"""User trial AP: an ML engineer moving an existing retrieval stack into the toolkit and back out: records as other
tools export them (an Elasticsearch `_id` beside the application's id, vectors under `embedding`), topics frames with
extra columns, judgements and runs handed to ranx and ir_measures. Each test is a defect the trial found."""

from __future__ import annotations

import pytest

from toolkit.errors import InputError
from toolkit.loaders import load_corpus


def test_an_embedding_column_is_the_documents_vector_and_other_ids_stay_as_metadata():
    """A vector column named `embedding` (as `hrt export`'s own mappings name it) was kept as 8.6 KB of metadata
    per document and the text embedded again; `doc_id` and `id` beside an `_id` were thrown away."""
    vec = [0.1] * 8
    (doc,) = load_corpus([{"_id": "es-abc", "doc_id": "007", "id": 42, "text": "hello", "embedding": vec}])
    assert doc["doc_id"] == "es-abc" and doc["vector"] == vec
    assert doc["metadata"] == {"doc_id": "007", "id": 42}  # nothing else: the vector is not metadata
    with pytest.raises(InputError, match="fields `vector` and `embedding` both hold a vector"):
        load_corpus([{"_id": "a", "text": "x", "vector": vec, "embedding": vec}])
    with pytest.raises(InputError, match="field `embedding` has NaN"):
        load_corpus([{"_id": "a", "text": "x", "embedding": [float("nan")] * 8}])
