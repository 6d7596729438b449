"""spec/toml_text.py: every value written as inline TOML reads back as itself."""

import tomllib

from hypothesis import given
from hypothesis import strategies as st

from shardcron.spec.toml_text import toml_key, toml_string, toml_value

# What a job file's values are: TOML has no null, and NaN never equals itself.
scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(st.characters(exclude_categories=("Cs",))),  # lone surrogates are not text a file can hold
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(min_size=1), inner, max_size=4),
    max_leaves=12,
)


@given(values)
def test_a_value_reads_back_as_itself(value):
    assert tomllib.loads(f"k = {toml_value(value)}")["k"] == value


@given(st.text(st.characters(exclude_categories=("Cs",)), min_size=1), scalars)
def test_a_key_reads_back_as_itself(key, value):
    assert tomllib.loads(f"{toml_key(key)} = {toml_value(value)}") == {key: value}


def test_bare_keys_stay_bare_and_the_characters_toml_refuses_raw_are_escaped():
    assert [toml_key(k) for k in ("kind", "max_attempts", "x-1", "a.b", "")] == [
        "kind",
        "max_attempts",
        "x-1",
        '"a.b"',
        '""',
    ]
    assert toml_string("del \x7f, nul \x00, past the BMP 😀") == '"del \\u007f, nul \\u0000, past the BMP 😀"'
    assert toml_value({}) == "{}"
