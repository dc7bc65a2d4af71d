"""Java .properties parsing: separators, comments, continuations, escapes, encodings."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.config.properties import (
    PropertiesSyntaxError,
    decode_properties,
    format_properties,
    load_properties,
    parse_properties,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a=b", {"a": "b"}),
        ("a:b", {"a": "b"}),
        ("a b", {"a": "b"}),
        ("a = b", {"a": "b"}),
        ("a\t:\t b", {"a": "b"}),
        ("a\fb", {"a": "b"}),
        ("a    b c  ", {"a": "b c  "}),  # trailing blanks of a value are kept
        ("a = = b", {"a": "= b"}),  # only one separator is skipped
        ("a=b=c", {"a": "b=c"}),
        ("a:b:c", {"a": "b:c"}),
        ("key", {"key": ""}),
        ("key   ", {"key": ""}),
        ("key=", {"key": ""}),
        ("=value", {"": "value"}),
        ("   indented.key = v", {"indented.key": "v"}),
    ],
)
def test_separators(text, expected):
    assert parse_properties(text) == expected


def test_comments_and_blank_lines():
    text = "# comment\n! also a comment\n   # indented comment\n\n   \t\nk=v # not a comment\n"
    assert parse_properties(text) == {"k": "v # not a comment"}


def test_line_endings():
    assert parse_properties("a=1\r\nb=2\rc=3\nd=4") == {"a": "1", "b": "2", "c": "3", "d": "4"}


def test_continuation_joins_lines_and_drops_leading_blanks():
    assert parse_properties("a=one,\\\n    two,\\\n\tthree\nb=x") == {"a": "one,two,three", "b": "x"}


def test_continuation_with_crlf():
    assert parse_properties("a=1\\\r\n  2\r\nb=3") == {"a": "12", "b": "3"}


def test_even_number_of_backslashes_does_not_continue():
    assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}


def test_odd_number_of_backslashes_continues():
    assert parse_properties("a=x\\\\\\\ny") == {"a": "x\\y"}


def test_comment_line_never_continues():
    assert parse_properties("# comment \\\nk=v") == {"k": "v"}


def test_continued_line_starting_with_hash_is_content():
    assert parse_properties("k=a\\\n  #b") == {"k": "a#b"}


def test_backslash_at_end_of_text_is_dropped():
    assert parse_properties("k=v\\") == {"k": "v"}


def test_continuation_into_blank_line_ends_value():
    assert parse_properties("k=v\\\n\nj=w") == {"k": "v", "j": "w"}


def test_continuation_of_key():
    assert parse_properties("lo\\\n  ng.key=1") == {"long.key": "1"}


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"k=a\tb\nc\rd\fe", {"k": "a\tb\nc\rd\fe"}),
        (r"k=\u0041\u00e9\u4E2D", {"k": "Aé中"}),
        (r"k=\uD83D\uDE00", {"k": "😀"}),  # surrogate pair from two escapes
        (r"my\ key=v", {"my key": "v"}),
        (r"a\=b=c", {"a=b": "c"}),
        (r"a\:b:c", {"a:b": "c"}),
        (r"k=\\server\share", {"k": "\\servershare"}),  # \\ is a backslash, \s is just s
        (r"k=\ leading", {"k": " leading"}),
        (r"\#notcomment=1", {"#notcomment": "1"}),
        (r"k=c:\\temp", {"k": "c:\\temp"}),
        (r"k=\q\z", {"k": "qz"}),
    ],
)
def test_escapes(text, expected):
    assert parse_properties(text) == expected


@pytest.mark.parametrize("bad", [r"k=\u12", r"k=\uZZZZ", r"k=\u12G4", "a=1\nb=\\u00"])
def test_malformed_unicode_escape(bad):
    with pytest.raises(PropertiesSyntaxError) as exc:
        parse_properties(bad, source="server.properties")
    assert "Malformed \\uxxxx encoding" in str(exc.value)
    assert "server.properties:" in str(exc.value)
    assert exc.value.line == bad.count("\n") + 1


def test_duplicate_key_last_wins():
    assert parse_properties("k=1\nk=2") == {"k": "2"}


def test_decode_utf8_bom_and_latin1_fallback():
    assert decode_properties("\ufeffk=é".encode()) == "k=é"
    assert decode_properties("k=é".encode("iso-8859-1")) == "k=é"
    assert parse_properties("\ufeffk=v") == {"k": "v"}


def test_load_properties(tmp_path):
    path = tmp_path / "server.properties"
    path.write_bytes("# c\nlog.dirs=/data/ä\nnum.partitions = 3\n".encode())
    assert load_properties(path) == {"log.dirs": "/data/ä", "num.partitions": "3"}


def test_load_properties_latin1_file(tmp_path):
    path = tmp_path / "old.properties"
    path.write_bytes("k=caf\xe9".encode("iso-8859-1"))
    assert load_properties(path) == {"k": "café"}


def test_format_escapes_special_characters():
    text = format_properties({"a key": " v=1:#!\\\n", "k": "tail  "})
    assert parse_properties(text) == {"a key": " v=1:#!\\\n", "k": "tail  "}
    assert text.startswith("a\\ key=\\ v\\=1\\:\\#\\!\\\\\\n\n")


_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)


@given(st.dictionaries(_text, _text, max_size=8))
def test_format_then_parse_round_trips(props):
    assert parse_properties(format_properties(props)) == props
