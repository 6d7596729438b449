"""Token secrets, their hashes, and the token file: what it accepts, and errors that name the line."""

import hashlib

import pytest

from shardcron.api.tokens import (
    SECRET_PREFIX,
    TokenBook,
    TokenFileError,
    hash_secret,
    new_secret,
    parse_token_file,
    secret_matches,
    token_line,
)
from shardcron.errors import ConfigError
from shardcron.rules.scopes import ALL_NAMESPACES, Role, Token

SECRET_A, SECRET_B = "sct_alpha-secret", "sct_beta-secret"
HASH_A, HASH_B = hash_secret(SECRET_A), hash_secret(SECRET_B)


def test_new_secrets_are_long_random_and_recognisable():
    secrets_ = {new_secret() for _ in range(100)}
    assert len(secrets_) == 100
    assert all(s.startswith(SECRET_PREFIX) and len(s) == len(SECRET_PREFIX) + 43 for s in secrets_)


def test_hash_is_sha256_of_the_utf8_secret():
    assert hash_secret("é") == "sha256:" + hashlib.sha256("é".encode()).hexdigest()
    assert hash_secret("abc") == "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


@pytest.mark.parametrize("secret, matches", [(SECRET_A, True), (SECRET_B, False), ("", False), (SECRET_A + " ", False)])
def test_secret_matches(secret, matches):
    assert secret_matches(secret, HASH_A) is matches


def test_file_maps_tokens_to_role_and_namespaces():
    book = parse_token_file(f"""
# name  hash  role  namespaces
ci      {HASH_A}  write  team-a,team-b

ops\t{HASH_B}\tADMIN\t*
""")
    assert len(book) == 2
    assert book.identify(SECRET_A) == Token("ci", HASH_A, Role.WRITE, frozenset({"team-a", "team-b"}))
    assert book.identify(SECRET_B) == Token("ops", HASH_B, Role.ADMIN, frozenset({ALL_NAMESPACES}))
    assert book.identify("sct_unknown") is None
    assert book.identify(HASH_A) is None  # the stored hash is not a credential


def test_a_legacy_file_of_bare_tokens_keeps_full_power():
    book = parse_token_file("# the file before namespaces\nplain-old-token\n")
    tok = book.identify("plain-old-token")
    assert tok.role is Role.ADMIN and tok.everywhere
    assert tok.name == "legacy-" + hash_secret("plain-old-token")[7:15]
    assert "plain" not in tok.name


@pytest.mark.parametrize(
    "tok",
    [
        Token("ci", HASH_A, Role.WRITE, frozenset({"team-b", "team-a"})),
        Token("ops@example.com", HASH_B, Role.ADMIN, frozenset({ALL_NAMESPACES})),
    ],
)
def test_token_line_round_trips(tok):
    assert parse_token_file(token_line(tok)).identify(SECRET_A if tok.secret_hash == HASH_A else SECRET_B) == tok


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "tokens.txt holds no token"),
        ("# only a comment\n\n", "tokens.txt holds no token"),
        (
            f"ci {HASH_A} write",
            "tokens.txt line 1: expected NAME sha256:HASH ROLE NAMESPACES (4 fields), "
            "or one legacy token; got 3 fields",
        ),
        (f"\n\nci {HASH_A} write team-a extra", "line 3: expected NAME sha256:HASH ROLE NAMESPACES (4 fields)"),
        (f"-ci {HASH_A} write team-a", "line 1: the name '-ci' must be 1 to 64 letters"),
        (f"{'n' * 65} {HASH_A} write team-a", "line 1: the name"),
        (f"ci {HASH_A.upper()} write team-a", "line 1: the second field must be sha256: and 64 lowercase hex"),
        (f"ci {HASH_A[:-1]} write team-a", "line 1: the second field must be sha256:"),
        (f"ci {HASH_A} writer team-a", "line 1: role 'writer' is not one of read, write, admin"),
        (f"ci {HASH_A} write Team-A", "line 1: namespaces: 'Team-A' must be lowercase letters"),
        (f"ci {HASH_A} write team-a,", "line 1: namespaces: 'team-a,' holds an empty name"),
        (f"ci {HASH_A} write *,team-a", "line 1: namespaces: '*,team-a': '*' already means every namespace"),
        (f"ci {HASH_A} read a\nci {HASH_B} read b", "line 2: the name 'ci' is already used on line 1"),
        (
            f"ci {HASH_A} read a\n#\nbot {HASH_A} write b",
            "line 3: the same secret as line 1 ('ci'); one secret, one identity",
        ),
        (f"{SECRET_A}\nci {HASH_A} read a", "line 2: the same secret as line 1"),
    ],
)
def test_file_errors_name_the_line(text, says):
    with pytest.raises(TokenFileError) as e:
        parse_token_file(text, "tokens.txt")
    assert says in str(e.value)
    assert isinstance(e.value, ConfigError)  # the CLI prints it on one line, no traceback


@pytest.mark.parametrize("line", [f"ci {SECRET_A} write team-a", f"ci {SECRET_A} write Team"])
def test_an_error_never_repeats_a_secret_pasted_into_the_file(line):
    with pytest.raises(TokenFileError) as e:
        parse_token_file(line, "tokens.txt")
    assert SECRET_A not in str(e.value)


def test_book_of_tokens():
    book = TokenBook.of([Token("a", HASH_A, Role.READ, frozenset({"x"}))])
    assert book.identify(SECRET_A).name == "a" and book.identify(SECRET_B) is None
