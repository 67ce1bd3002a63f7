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


def test_topics_frames_keep_their_columns_and_refuse_ids_no_judgement_can_name():
    """A pandas topics frame's `date` was dropped (the recency prior used "now" where the same topics as JSONL used
    their dates); float ids became "1.0"; a null id crashed the run; list and boolean ids became "['x']" and "True"."""
    import json

    import pandas as pd

    from toolkit.interop import queries_frame

    got = queries_frame(pd.DataFrame({"qid": ["q1"], "query": ["deploy"], "date": ["2020-01-02"], "team": ["infra"]}))
    assert json.loads(got["metadata"][0]) == {"date": "2020-01-02", "team": "infra"}
    for bad, match in (({"qid": [1.0, 2.0], "query": ["a", "b"]}, "column qid holds Float64"),
                       ({"qid": ["a", None], "query": ["a", "b"]}, "1 query id\\(s\\) are missing")):
        with pytest.raises(InputError, match=match):
            queries_frame(pd.DataFrame(bad))
    with pytest.raises(InputError, match="cannot read the frame"):
        queries_frame(pd.DataFrame({"qid": ["a", 2], "query": ["x", "y"]}))


def test_query_files_refuse_odd_ids_and_read_a_topic_title(tmp_path):
    from toolkit.loaders import load_queries

    f = tmp_path / "q.jsonl"
    for bad in ('{"_id": ["x"], "text": "a"}', '{"_id": true, "text": "a"}', '{"_id": 1.5, "text": "a"}'):
        f.write_text(bad + "\n")
        with pytest.raises(InputError, match=r"q\.jsonl:1: field `_id` must be a string or an integer"):
            load_queries(f)
    f.write_text('{"query_id": "301", "title": "international organized crime", "text": null}\n')
    assert load_queries(f).row(0)[:2] == ("301", "international organized crime")


def test_conflicting_grades_give_ranx_and_ir_measures_the_grade_the_toolkit_scores():
    import pandas as pd

    from toolkit.interop import qrels_frame, to_ranx

    frame = pd.DataFrame({"qid": ["a", "a"], "docno": ["x", "x"], "label": [2, 0]})
    with pytest.warns(UserWarning, match="judged with different grades.*the highest grade is used"):
        q = qrels_frame(frame)
    assert q.rows() == [("a", "x", 2)]
    pytest.importorskip("ranx")
    with pytest.warns(UserWarning):
        assert to_ranx(frame).to_dict() == {"a": {"x": 2}}


def test_pyterrier_ranks_count_from_one_and_a_frames_nan_metadata_is_null():
    import pandas as pd

    from toolkit.interop import run_frame

    got = run_frame(pd.DataFrame({"qid": ["q", "q"], "docno": ["a", "b"], "rank": [0, 1], "score": [2.0, 1.0]}))
    assert got["rank"].to_list() == [1, 2]
    (doc,) = load_corpus(pd.DataFrame({"_id": ["a"], "text": ["x"], "ratio": [float("nan")]}))
    assert doc["metadata"] == {}  # a missing value: not stored (it was NaN, typed as the text 'NaN')


def test_vectors_of_the_wrong_size_for_a_known_model_are_refused_at_ingest(tmp_path):
    """8-d vectors named as the packaged MiniLM's were stored, and only the first search refused them."""
    from toolkit.store import Store

    docs = [{"_id": "a", "text": "x", "vector": [0.1] * 8}]
    with Store(tmp_path / "s.duckdb") as st, pytest.raises(InputError, match="vectors of 8 numbers, but "
                                                                            "sentence-transformers/all-MiniLM-L6-v2 makes 384-d"):
        st.ingest(load_corpus(docs), model="sentence-transformers/all-MiniLM-L6-v2")


def test_an_embedding_field_that_is_not_a_vector_stays_metadata():
    """The review: `embedding: "text-embedding-3-small"` (a record naming its model) stopped the ingest."""
    (doc,) = load_corpus([{"id": "a", "text": "hello", "embedding": "text-embedding-3-small"}])
    assert "vector" not in doc and doc["metadata"] == {"embedding": "text-embedding-3-small"}


def test_topics_columns_without_a_json_form_or_with_non_dates_are_left_out_once(caplog):
    """The review: a Duration column refused the whole frame; a `created_at` column of non-dates warned per row."""
    import json
    import logging
    from datetime import timedelta

    import polars as pl

    from toolkit.interop import queries_frame

    frame = pl.DataFrame({"qid": [f"q{i}" for i in range(50)], "text": ["x"] * 50, "took": [timedelta(seconds=1)] * 50,
                          "created_at": ["soon"] * 50, "w": [float("nan")] * 50, "team": ["infra"] * 50})
    with caplog.at_level(logging.WARNING, logger="toolkit"):
        got = queries_frame(frame)
    assert json.loads(got["metadata"][0]) == {"team": "infra"}  # NaN: missing
    assert caplog.text.count("`took`") == 1 and caplog.text.count("`created_at`") == 1


def test_a_pyterrier_corpus_with_docno_ingests_whether_docno_is_a_column_or_the_index():
    """PyTerrier names a corpus's ids `docno` (its iterators and frames); a frame with them as a column, or as its
    named index, was refused with "missing document id" (the index was dropped on the way to records)."""
    import pandas as pd

    as_column = pd.DataFrame({"docno": ["d1", "d2"], "text": ["alpha", "beta"]})
    as_index = as_column.set_index("docno")
    for frame in (as_column, as_index, as_column.to_dict("records")):
        assert [d["doc_id"] for d in load_corpus(frame)] == ["d1", "d2"]
    with pytest.raises(InputError, match="row 0: missing document id .*`docno`"):  # an unnamed index is no id
        load_corpus(pd.DataFrame({"text": ["a"]}, index=["i0"]))


def test_an_engines_export_is_read_through_its_wrapper(tmp_path):
    """An Elasticsearch dump (`_id` beside `_source`) and a Weaviate export (`id` and `vector` beside `properties`)
    were refused ("no text field", the record has: _id, _index, _score, _source) until flattened by hand."""
    import json

    es = tmp_path / "es.jsonl"
    es.write_text("\n".join(json.dumps(r) for r in [
        {"_index": "docs", "_id": "a1", "_score": 1.0, "_source": {"title": "Deploy", "body": "ECONNREFUSED", "team": "infra"}},
        {"_index": "docs", "_id": "a2", "_score": 1.0, "_source": {"title": "Lunch", "body": "moved", "id": "app-2"}},
    ]) + "\n")
    got = load_corpus(es, text_field="_source.body")
    assert [(d["doc_id"], d["title"], d["text"], d["metadata"]) for d in got] == [
        ("a1", "Deploy", "ECONNREFUSED", {"team": "infra"}), ("a2", "Lunch", "moved", {"id": "app-2"})]
    assert load_corpus(es, text_field="body")[0]["text"] == "ECONNREFUSED"
    vec = [0.5] * 8
    (obj,) = load_corpus([{"class": "Note", "id": "w1", "vector": vec, "properties": {"text": "hello", "scope": "ops"}}])
    assert (obj["doc_id"], obj["text"], obj["scope"], obj["vector"], obj["metadata"]) == ("w1", "hello", "ops", vec, {})
    # A record with its text at the top keeps a `properties` field as metadata.
    (flat,) = load_corpus([{"id": "f", "text": "t", "properties": {"colour": "red"}}])
    assert flat["metadata"] == {"properties": {"colour": "red"}}
