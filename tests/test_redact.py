"""`redact.scrub` with the known key values: every spelling a server may echo, cuts that never leave part of
a key, and decoded answers whose numbers stay untouched."""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus

import pytest

from toolkit.redact import REDACTED, header_secrets, redact_data, redact_values, scrub

KEY = 'a/b+c=d e"f\\g&h'


@pytest.mark.parametrize("spelling", [
    KEY,
    json.dumps(KEY)[1:-1],                      # JSON-escaped
    json.dumps(KEY)[1:-1].replace("/", "\\/"),  # JSON-escaped the PHP way
    quote(KEY, safe=""),                        # percent-encoded
    quote(KEY, safe="").lower(),                # ... with lower-case hex
    quote(KEY),                                 # ... keeping "/"
    quote_plus(KEY),                            # form-encoded
    repr(KEY)[1:-1],                            # a Python repr, as in an exception
])
def test_every_spelling_of_a_known_key_is_removed(spelling):
    text = f"HTTP 401: invalid key <{spelling}> for this model"
    out = scrub(text, [KEY])
    assert out == f"HTTP 401: invalid key <{REDACTED}> for this model"
    assert redact_values(text, [KEY]) == out


def test_a_key_of_no_known_shape_needs_its_value():
    text = '{"error": "invalid key hunter2pass (header Bearer [redacted])"}'
    assert "hunter2pass" in scrub(text)  # no pattern recognises it: that was the defect
    assert "hunter2pass" not in scrub(text, ["hunter2pass"])
    assert scrub("HTTP 404: model bge-small not found", ["hunter2pass"]) == "HTTP 404: model bge-small not found"


def test_limit_cuts_after_scrubbing_and_never_leaves_a_piece_of_a_key():
    key = "hunter2pass"
    for start in range(0, 40):
        text = "x" * start + key + " tail" * 50
        out = scrub(text, [key], limit=30)
        assert len(out) <= 30 and "hunt" not in out and "pass" not in out, out
    # Replacements shrink the text, so what lay past the window moves into view: no partial key there either.
    long_key = "Kq" + "x" * 97 + "9"
    many = (long_key + " ") * 40
    for limit in range(10, 120, 7):
        out = scrub(many, [long_key], limit=limit)
        assert len(out) <= limit and "Kq" not in out, out
    assert scrub("short", [key], limit=30) == "short"


def test_header_secrets_takes_the_token_after_the_scheme():
    assert header_secrets({"Authorization": "Bearer hunter2pass"}) == ("hunter2pass",)
    assert header_secrets({"X-API-Key": "k1", "Content-Type": "application/json", "Accept": "x"}) == ("k1",)
    assert header_secrets({}) == ()


def test_redact_data_changes_strings_only():
    data = {"error": {"message": "invalid key 1234"}, "data": [{"index": 0, "embedding": [0.1234, 1234.0]}], "1234": 5}
    out = redact_data(data, ["1234"])
    assert out == {"error": {"message": f"invalid key {REDACTED}"}, "data": [{"index": 0, "embedding": [0.1234, 1234.0]}],
                   REDACTED: 5}
    assert redact_data(data, []) == data
