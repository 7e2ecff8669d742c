"""kilolock.atrest.keyfile: the key file is checked strictly when read, and
every refusal names the file and the rule, never a secret."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from kilolock.atrest.errors import KeyFileError
from kilolock.atrest.keyfile import load_key_file, parse_key_file

ONE = base64.b64encode(bytes(range(32))).decode()
TWO = base64.b64encode(bytes(range(32, 64))).decode()
SHORT = base64.b64encode(bytes(24)).decode()


def key(key_id: str, secret: str) -> str:
    return f'[[keys]]\nid = "{key_id}"\nsecret = "{secret}"\n'


def test_a_key_file_with_two_keys_gives_a_ring_with_the_active_one(tmp_path: Path) -> None:
    """Two keys, the newer active: both unwrap, the active one wraps."""
    path = tmp_path / "keys.toml"
    path.write_text(f'# rotation in progress\nactive = "2026-12"\n\n'
                    f'{key("2026-12", ONE)}\n{key("2025-06", TWO)}')
    ring = load_key_file(path)
    assert ring.active_key_id == "2026-12"
    assert ring.key_ids() == ["2026-12", "2025-06"]
    assert ring.generate().wrapped.key_id == "2026-12"


@pytest.mark.parametrize(("text", "message"), [
    ("active = 'a'\nkeys = [", "is not valid TOML"),
    (f'{key("a", ONE)}', "names no active key"),
    (f'active = "b"\n{key("a", ONE)}', "the active key 'b' is not one of its keys"),
    ('active = "a"\n', "has no keys"),
    ('active = "a"\nkeys = []\n', "has no keys"),
    (f'active = "a"\nextra = 1\n{key("a", ONE)}', "unknown settings ['extra']"),
    ('active = "a"\nkeys = ["x"]\n', "keys[0] is not a table"),
    (f'active = "a"\n{key("a", ONE)}created = 2026\n', "unknown fields ['created']"),
    (f'active = "a b"\n{key("a b", ONE)}', "id must be 1 to 64 letters"),
    (f'active = "a"\n{key("a", ONE)}{key("a", TWO)}', "two keys have the id 'a'"),
    (f'active = "a"\n{key("a", ONE)}{key("b", ONE)}', "keys 'a' and 'b' have the same secret"),
    ('active = "a"\n[[keys]]\nid = "a"\n', "key 'a' has no secret"),
    (f'active = "a"\n{key("a", "not base64!")}', "key 'a': the secret is not valid base64"),
    (f'active = "a"\n{key("a", SHORT)}', "the secret is 24 bytes; AES-256 needs exactly 32"),
], ids=["toml", "no-active", "active-unknown", "no-keys", "empty-keys", "unknown-setting",
        "not-a-table", "unknown-field", "bad-id", "duplicate-id", "duplicate-secret",
        "no-secret", "not-base64", "short-secret"])
def test_a_bad_key_file_is_refused_with_a_clear_message(text: str, message: str) -> None:
    """Every rule has its own message, prefixed with where the file is."""
    with pytest.raises(KeyFileError) as raised:
        parse_key_file(text, "'/etc/kilolock/keys.toml'")
    assert str(raised.value).startswith("'/etc/kilolock/keys.toml'")
    assert message in str(raised.value)
    for secret in (ONE, TWO):
        assert secret not in str(raised.value)


def test_an_unreadable_key_file_names_its_path(tmp_path: Path) -> None:
    """A missing file is a L{KeyFileError} naming it (a startup error)."""
    with pytest.raises(KeyFileError, match=r"cannot read the key file .*missing\.toml"):
        load_key_file(tmp_path / "missing.toml")


def test_secrets_may_carry_surrounding_whitespace() -> None:
    """A secret pasted with a trailing newline still reads (base64 is strict
    inside, lenient around)."""
    ring = parse_key_file(f'active = "a"\n[[keys]]\nid = "a"\nsecret = """\n{ONE}\n"""\n')
    assert ring.key_ids() == ["a"]
