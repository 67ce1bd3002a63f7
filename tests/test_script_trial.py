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
        res = run_pipeline(st, q, "guarded-rrf")
        learned = run_pipeline(st, q, "default")
    per = {r["qid"]: r for r in res.per_query.iter_rows(named=True)}
    assert per["ja"]["route"] == "bm25-led" and per["ja"]["dense_weight"] == 0.25
    assert res.final.filter((pl.col("qid") == "ja") & (pl.col("rank") == 1))["doc_id"].item() == "ja/lb"
    assert per["en"]["dense_weight"] > 0.25  # English queries keep the rule
    # The learned `default` weighs no list by a gap: BM25's only match is first there too, and the most likely relevant.
    ja = learned.final.filter(pl.col("qid") == "ja").sort("rank")
    assert ja["doc_id"][0] == "ja/lb" and ja["score_prob"][0] > 0.5 > ja["score_prob"][1]


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


def _clusters(text: str) -> list[str]:
    import regex

    return regex.findall(r"\X", text)


def test_snippets_and_cuts_never_split_a_grapheme_cluster():
    """A snippet began inside `🇺🇸🇪🇸` and showed the flag of Sweden; others began with a lone skin tone, Arabic
    vowel mark or Thai vowel; `shorten` cut Devanagari conjuncts, decomposed Hangul and tag flags."""
    from toolkit.loaders import _cut_title
    from toolkit.render import shorten, shorten_middle, snippet

    pieces = ["🇺🇸🇪🇸🇯🇵", "👍🏽", "👨‍👩‍👧", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "क्षत्रिय", "की", "ที่นี่", "مَرْحَبًا", "한국어", "e\u0301"]
    text = " ".join(p * 3 for p in pieces) + " the deploy failed with ECONNREFUSED"
    import unicodedata

    whole = set(_clusters(text)) | set(_clusters(unicodedata.normalize("NFC", text)))  # snippets compose accents
    for limit in range(40, 160, 3):
        for body in (snippet(text, limit, "ECONNREFUSED"), shorten(text, limit), shorten_middle(text, limit)):
            assert set(_clusters(body.replace("…", ""))) <= whole | {" "}, (limit, body)
    for limit in range(1, 60):
        assert set(_clusters(_cut_title(text, limit))) <= whole | {" "}


def test_snippets_find_the_query_in_scripts_with_marks_and_full_width_letters():
    from toolkit.render import snippet

    pad = "ข้อความทั่วไปที่ไม่เกี่ยวข้อง " * 8
    cases = [("लिंक", pad + " पासवर्ड रीसेट लिंक भेजा गया"), ("مرحبا", pad + " قال مَرْحَبًا للفريق"),
             ("ECONNREFUSED", pad + " 接続エラー ＥＣＯＮＮＲＥＦＵＳＥＤ が出た"), ("รหัสผ่าน", pad + " ลืมรหัสผ่านแล้ว")]
    for query, text in cases:
        got = snippet(text, 80, query)
        assert got.startswith("…"), (query, got)
        shown = {"مرحبا": "مَرْحَبًا", "ECONNREFUSED": "ＥＣＯＮＮＲＥＦＵＳＥＤ"}.get(query, query)
        assert shown in got, (query, got)


def test_eval_table_columns_line_up_with_wide_run_names(tmp_path, corpus_file):
    from click.testing import CliRunner
    from conftest import write_beir

    from toolkit.cli import main
    from toolkit.terminal import display_width

    ds = write_beir(tmp_path / "ds", corpus_file)
    runs = []
    for name in ("BM25ラン.trec", "hybrid.trec"):
        r = CliRunner().invoke(main, ["run", "--dataset", str(ds), "--split", "test", "--config", "bm25-only",
                                      "--store", str(tmp_path / "s.duckdb"), "--out", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
        runs += ["--run", str(tmp_path / name)]
    out = CliRunner().invoke(main, ["eval", "--dataset", str(ds), "--split", "test", *runs]).stdout.splitlines()
    rows = [line for line in out[:3]]
    assert len({display_width(line) for line in rows}) == 1, rows  # header and both runs end in the same column


def test_a_decomposed_folder_name_is_found_by_its_composed_spelling(tmp_path):
    """macOS writes file names decomposed (NFD): `--scope 한국어` said no document has that scope, and `hrt delete
    한국어/메모.md` said no such id, for names that look identical."""
    import unicodedata

    from click.testing import CliRunner

    from toolkit.cli import main

    folder = tmp_path / unicodedata.normalize("NFD", "한국어")
    folder.mkdir(parents=True)
    (folder / unicodedata.normalize("NFD", "메모.md")).write_text("ECONNREFUSED on the payment gateway\n")
    (tmp_path / "other.md").write_text("ECONNREFUSED elsewhere\n")
    store = str(tmp_path.parent / "kr.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(tmp_path), "--store", store, "--no-embed"]).exit_code == 0
    r = CliRunner().invoke(main, ["search", "ECONNREFUSED", "--store", store, "--mode", "lexical", "--scope", "한국어"])
    assert r.exit_code == 0 and "no stored document has scope" not in r.stderr and "메모" in unicodedata.normalize("NFC", r.stdout)
    r = CliRunner().invoke(main, ["delete", "한국어/메모.md", "--store", store])
    assert r.exit_code == 0, r.output


def test_thai_pairs_are_of_letters_so_the_word_outranks_scattered_letters(tmp_path):
    """The review: pairs over letters and marks shrank to single letters, and a document of scattered letters
    (0.515) outranked the one holding the exact word (0.446)."""
    docs = [{"doc_id": "scattered", "text": "ทุกคน นั่ง ที่ ทาง นี้ และ ที่ นั่น"},
            {"doc_id": "right", "text": "เอกสารอยู่ที่นี่แล้วนะครับ"},
            {"doc_id": "other", "text": "ใบแจ้งหนี้ประจำเดือน"}]
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(docs, embed=False)
        got = st.lexical_search(pl.DataFrame({"qid": ["q"], "text": ["ที่นี่"]}), top_k=3)
    assert got.sort("rank")["doc_id"][0] == "right"


def test_hindi_vowel_signs_tell_words_apart(tmp_path):
    """BM25's accent stripping removed Devanagari vowel signs: काम ("work") and कम ("less") were one term."""
    docs = [{"doc_id": "work", "text": "आज बहुत काम है"}, {"doc_id": "less", "text": "आज पानी कम है"}]
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(docs, embed=False)
        got = st.lexical_search(pl.DataFrame({"qid": ["kaam", "kam"], "text": ["काम", "कम"]}), top_k=2)
    assert got.filter(pl.col("rank") == 1).sort("qid")["doc_id"].to_list() == ["work", "less"]  # kaam, kam
    assert got.filter(pl.col("qid") == "kam").height == 1  # "less" only


def test_a_store_of_the_previous_analysis_reindexes_only_the_scripts_it_changed(tmp_path):
    """The review: moving to a new analysis version re-indexed the whole BM25 index of any store with a curly quote."""
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest([{"doc_id": "a", "text": "café “résumé” notes"}], embed=False)
        st._set_meta("lexical_analysis", "3")
        assert not st.stale_text()
        rep = st.ingest([{"doc_id": "a", "text": "café “résumé” notes"}], embed=False)
        assert not rep.fts_rebuilt
        st._set_meta("lexical_analysis", "3")
        st.ingest([{"doc_id": "a", "text": "café “résumé” notes"}, {"doc_id": "b", "text": "อยู่ที่นี่"}], embed=False)
        assert st.lexical_analysis != "3" and not st.stale_text()


def test_the_api_finds_a_decomposed_scope_by_its_composed_spelling(tmp_path):
    """The CLI mapped `--scope` to the stored spelling; a query's scope given through the API stayed unmatched."""
    import unicodedata

    with Store(tmp_path / "s.duckdb") as st:
        st.ingest([{"doc_id": "m", "text": "ECONNREFUSED on the gateway", "scope": unicodedata.normalize("NFD", "한국어")}],
                  embed=False)
        got = st.lexical_search(pl.DataFrame({"qid": ["q"], "text": ["ECONNREFUSED"], "scope": ["한국어"]}), top_k=3)
    assert got["doc_id"].to_list() == ["m"]


def test_an_emoji_sequence_in_a_run_name_takes_the_two_columns_a_terminal_gives_it():
    """`display_width` summed a ZWJ family (three emoji and two joiners) as six columns and a flag as four, so an
    eval table with such a run name put its numbers four columns off; control characters still count one."""
    from toolkit.terminal import display_width, ljust

    assert [display_width(s) for s in ("👨\u200d👩\u200d👧", "🇫🇷", "👍🏽", "e\u0301", "日本", "a\tb")] == [2, 2, 2, 1, 4, 3]
    assert display_width(ljust("run 👨\u200d👩\u200d👧", 10)) == display_width(ljust("run", 10)) == 10
