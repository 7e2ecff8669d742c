"""kilolock.atrest sealing, envelope, key ring and stored rows: encrypted
versions decrypt only in their own row, under their own key, and every
failure is a typed error."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.python.failure import Failure
from zope.interface.verify import verifyObject

from kilolock.atrest.compression import (
    Base,
    Codec,
    CompressionPolicy,
    Snapshot,
    compress_full,
    sha256_hex,
)
from kilolock.atrest.envelope import (
    DataKey,
    SealedPayload,
    VersionIdentity,
    WrappedKey,
    associated_data,
)
from kilolock.atrest.errors import (
    AuthenticationFailed,
    CorruptVersion,
    KeyUnwrapFailed,
    StoredVersionUnreadable,
    UnknownKey,
    WrongBase,
)
from kilolock.atrest.interfaces import IKeyProvider
from kilolock.atrest.keyring import KeyEncryptionKey, KeyRing, LocalKeyProvider
from kilolock.atrest.sealing import new_data_key, open_sealed, seal
from kilolock.atrest.stored import (
    StoredPayload,
    decode_version,
    decrypt_stored,
    encode_version,
    encrypt_stored,
    iter_decode_version,
)
from tests.support.state_strategies import histories
from tests.support.stub_client import state_body

MARKER = "planted-marker-7f3a9c"


def ring(*ids: str, active: str | None = None) -> KeyRing:
    return KeyRing([KeyEncryptionKey(key_id, os.urandom(32)) for key_id in ids],
                   active or ids[0])


def identity_of(raw: bytes, serial: int = 7, tenant: str = "acme",
                path: str = "prod/network") -> VersionIdentity:
    return VersionIdentity(tenant, path, serial, sha256_hex(raw), len(raw))


def state_with(secret: str, serial: int = 7, extra: str = "") -> bytes:
    return state_body(serial, resources=[{
        "mode": "managed", "type": "aws_db_instance", "name": f"db{index}",
        "provider": 'provider["registry.terraform.io/hashicorp/aws"]',
        "instances": [{"schema_version": 0, "sensitive_attributes": [], "attributes": {
            "id": f"db-{index:08x}", "password": secret, "note": extra}}]}
        for index in range(20)])


def base_of(raw: bytes) -> Base:
    return Base(raw, sha256_hex(raw))


def snapshot_of(raw: bytes) -> Snapshot:
    return Snapshot(base_of(raw), len(compress_full(raw, 3)), 0)


def unwrap(keys: KeyRing, stored: StoredPayload) -> bytes:
    assert stored.data_key is not None
    return keys.unwrap(WrappedKey.from_bytes(stored.data_key))


KEYS = ring("2026-12", "2025-06")
STATE = state_with(MARKER)
NEXT = state_with(MARKER, serial=8, extra="changed")


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=2048), st.binary(max_size=64))
def test_seal_and_open_round_trip_any_bytes(plaintext: bytes, associated: bytes) -> None:
    """What is sealed opens to exactly the same bytes with the same key and
    associated data, and the sealed form is the plaintext plus 29 bytes."""
    data_key = new_data_key()
    sealed = seal(data_key, plaintext, associated)
    assert len(sealed) == len(plaintext) + 1 + 12 + 16
    assert open_sealed(data_key, sealed, associated) == plaintext


@settings(max_examples=30, deadline=None)
@given(histories())
def test_encrypted_versions_round_trip_full_and_delta(history: tuple[bytes, bytes]) -> None:
    """Compress then encrypt: a snapshot and a delta against it decrypt and
    decode byte-exact with their unwrapped data keys."""
    first, second = history
    stored = encode_version(first, identity_of(first), None, KEYS.generate())
    assert decode_version(stored, identity_of(first), None, unwrap(KEYS, stored)) == first
    chosen = encode_version(second, identity_of(second, 8), snapshot_of(first), KEYS.generate())
    assert chosen.encrypted and chosen.key_id == "2026-12"
    assert decode_version(chosen, identity_of(second, 8), base_of(first),
                          unwrap(KEYS, chosen)) == second


@pytest.mark.parametrize("codec", list(Codec))
def test_every_codec_round_trips_encrypted(codec: Codec) -> None:
    """Identity, zstd and zstd-delta payloads all seal and open."""
    raw = os.urandom(600) if codec is Codec.IDENTITY else NEXT
    snapshot = snapshot_of(STATE) if codec is Codec.ZSTD_DELTA else None
    policy = CompressionPolicy(snapshot_ratio=1.0)
    stored = encode_version(raw, identity_of(raw), snapshot, KEYS.generate(), policy)
    assert stored.codec is codec
    base = base_of(STATE) if snapshot else None
    assert decode_version(stored, identity_of(raw), base, unwrap(KEYS, stored)) == raw


@pytest.mark.parametrize("compressible", [True, False])
def test_no_plaintext_marker_appears_in_what_is_stored(compressible: bool) -> None:
    """The state's secret is in no stored column, compressed or not."""
    raw = STATE if compressible else MARKER.encode() + os.urandom(4096)
    stored = encode_version(raw, identity_of(raw), None, KEYS.generate())
    assert stored.codec is (Codec.ZSTD if compressible else Codec.IDENTITY)
    assert stored.data_key is not None
    for column in (stored.payload, stored.data_key):
        assert MARKER.encode() not in column
        assert b"password" not in column


def test_ciphertexts_swapped_between_two_rows_fail_authentication() -> None:
    """Payload and wrapped key moved together into a row of another state,
    tenant or serial: each fails with L{AuthenticationFailed}, typed."""
    stored = encode_version(STATE, identity_of(STATE), None, KEYS.generate())
    data_key = unwrap(KEYS, stored)
    for other in (identity_of(STATE, path="prod/other"), identity_of(STATE, tenant="evil"),
                  identity_of(STATE, serial=8), identity_of(NEXT)):
        with pytest.raises(AuthenticationFailed):
            decode_version(stored, other, None, data_key)


def test_a_delta_repointed_at_another_base_fails_authentication() -> None:
    """The base's sha256 is bound: a delta handed another snapshot never
    decrypts; handed none, it is L{WrongBase}."""
    stored = encode_version(NEXT, identity_of(NEXT, 8), snapshot_of(STATE), KEYS.generate(),
                            CompressionPolicy(snapshot_ratio=1.0))
    assert stored.codec is Codec.ZSTD_DELTA
    other_base = base_of(state_with("another-secret"))
    with pytest.raises(AuthenticationFailed):
        decode_version(stored, identity_of(NEXT, 8), other_base, unwrap(KEYS, stored))
    with pytest.raises(WrongBase):
        decode_version(stored, identity_of(NEXT, 8), None, unwrap(KEYS, stored))


def test_the_codec_is_bound() -> None:
    """A row whose codec column was changed does not decrypt."""
    stored = encode_version(STATE, identity_of(STATE), None, KEYS.generate())
    altered = StoredPayload(Codec.IDENTITY, stored.payload, stored.data_key)
    with pytest.raises(AuthenticationFailed):
        decode_version(altered, identity_of(STATE), None, unwrap(KEYS, stored))


def test_wrong_key_material_and_unknown_key_ids_are_typed_errors() -> None:
    """Another key file: the same id with other material is
    L{KeyUnwrapFailed}; an id it lacks is L{UnknownKey}."""
    stored = encode_version(STATE, identity_of(STATE), None, KEYS.generate())
    assert stored.data_key is not None
    wrapped = WrappedKey.from_bytes(stored.data_key)
    with pytest.raises(KeyUnwrapFailed):
        ring("2026-12").unwrap(wrapped)
    with pytest.raises(UnknownKey) as raised:
        ring("2027-01").unwrap(wrapped)
    assert raised.value.key_id == "2026-12" and raised.value.status == 502


def test_a_wrapped_key_relabelled_with_another_key_id_does_not_unwrap() -> None:
    """The KEK id is the wrap's associated data: a wrapped key cannot claim
    to be under another KEK of the same ring."""
    wrapped = KEYS.wrap(new_data_key())
    with pytest.raises(KeyUnwrapFailed):
        KEYS.unwrap(WrappedKey("2025-06", wrapped.wrapped))


def test_a_data_key_from_another_row_fails_authentication() -> None:
    """Each version has its own data key: another row's key does not open it."""
    stored = encode_version(STATE, identity_of(STATE), None, KEYS.generate())
    with pytest.raises(AuthenticationFailed):
        decode_version(stored, identity_of(STATE), None, KEYS.generate().plaintext)


@pytest.mark.parametrize("cut", [0, 1, 5, 13, 28])
def test_truncated_payloads_and_wrapped_keys_are_typed_errors(cut: int) -> None:
    """Cut anywhere, a payload or a wrapped key is a typed error, never a crash."""
    stored = encode_version(STATE, identity_of(STATE), None, KEYS.generate())
    assert stored.data_key is not None
    data_key = unwrap(KEYS, stored)
    short = StoredPayload(stored.codec, stored.payload[:cut], stored.data_key)
    with pytest.raises(StoredVersionUnreadable):
        decode_version(short, identity_of(STATE), None, data_key)
    with pytest.raises(StoredVersionUnreadable):
        KEYS.unwrap(WrappedKey.from_bytes(stored.data_key[:cut]))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_flipped_bit_is_a_typed_error(data: st.DataObject) -> None:
    """One bit flipped anywhere in the payload or in the wrapped key: the
    version is refused with a typed error."""
    stored = encode_version(STATE, identity_of(STATE), None, KEYS.generate())
    assert stored.data_key is not None
    column = data.draw(st.sampled_from(["payload", "data_key"]))
    blob = bytearray(stored.payload if column == "payload" else stored.data_key)
    position = data.draw(st.integers(0, len(blob) * 8 - 1))
    blob[position // 8] ^= 1 << (position % 8)
    with pytest.raises(StoredVersionUnreadable):
        if column == "payload":
            decode_version(StoredPayload(stored.codec, bytes(blob), stored.data_key),
                           identity_of(STATE), None, unwrap(KEYS, stored))
        else:
            KEYS.unwrap(WrappedKey.from_bytes(bytes(blob)))


def test_rewrap_changes_only_the_wrapped_key() -> None:
    """Rotation: once a new KEK is active, rewrapping gives a new C{data_key}
    under it; the payload is untouched and still decrypts after the old KEK
    left the key file."""
    old, new = KeyEncryptionKey("old", os.urandom(32)), KeyEncryptionKey("new", os.urandom(32))
    stored = encode_version(STATE, identity_of(STATE), None, KeyRing([old], "old").generate())
    assert stored.data_key is not None
    rotating = KeyRing([old, new], "new")
    rewrapped = rotating.rewrap(WrappedKey.from_bytes(stored.data_key))
    assert rewrapped.key_id == "new"
    assert rotating.rewrap(rewrapped) is rewrapped
    after = StoredPayload(stored.codec, stored.payload, rewrapped.to_bytes())
    assert after.key_id == "new"
    rotated = KeyRing([new], "new")
    assert decode_version(after, identity_of(STATE), None, rotated.unwrap(rewrapped)) == STATE
    with pytest.raises(UnknownKey):
        rotated.unwrap(WrappedKey.from_bytes(stored.data_key))


def test_envelope_layouts_are_compact_and_versioned() -> None:
    """The wrapped key is format byte, id length, id, 60 bytes; the payload
    format byte, nonce, ciphertext with tag."""
    wrapped = KEYS.wrap(new_data_key())
    blob = wrapped.to_bytes()
    assert blob[:2] == bytes((1, len("2026-12"))) and blob[2:9] == b"2026-12"
    assert len(blob) == 2 + 7 + 60 and WrappedKey.from_bytes(blob) == wrapped
    sealed = seal(new_data_key(), b"x" * 10, b"")
    assert sealed[0] == 1 and SealedPayload.from_bytes(sealed).nonce == sealed[1:13]
    for bad in (b"\x02" + blob[1:], b"\x01\x07" + b"2026-1\xff" + blob[9:], b"\x01\x00x"):
        with pytest.raises(CorruptVersion):
            WrappedKey.from_bytes(bad)


def test_associated_data_tells_every_identity_apart() -> None:
    """Length-prefixed fields: moving bytes between adjacent fields changes
    the associated data."""
    one = associated_data(VersionIdentity("ab", "c", 1, "f" * 64, 2), "zstd", None)
    two = associated_data(VersionIdentity("a", "bc", 1, "f" * 64, 2), "zstd", None)
    three = associated_data(VersionIdentity("ab", "c", 1, "f" * 64, 2), "zstd", "")
    assert one != two and one == three


def test_the_local_provider_answers_with_fired_deferreds() -> None:
    """The key file provider implements L{IKeyProvider}; its Deferreds have
    fired already, with results or with the typed errors."""
    provider = LocalKeyProvider(KEYS)
    assert verifyObject(IKeyProvider, provider)
    assert provider.active_key_id() == "2026-12"
    assert list(provider.key_ids()) == ["2026-12", "2025-06"]
    results: list[object] = []
    provider.generate_data_key().addCallback(results.append)
    generated = results.pop()
    assert isinstance(generated, DataKey)
    provider.unwrap_data_key(generated.wrapped).addCallback(results.append)
    assert results.pop() == generated.plaintext
    provider.rewrap_data_key(generated.wrapped).addCallback(results.append)
    assert results.pop() is generated.wrapped
    provider.unwrap_data_key(WrappedKey("gone", b"x" * 60)).addErrback(results.append)
    failure = results.pop()
    assert isinstance(failure, Failure) and failure.check(UnknownKey)


def test_a_key_ring_checks_its_keys() -> None:
    """Duplicate ids, short keys and an active id that is not a key are refused."""
    secret = os.urandom(32)
    with pytest.raises(ValueError, match="two keys"):
        KeyRing([KeyEncryptionKey("a", secret), KeyEncryptionKey("a", os.urandom(32))], "a")
    with pytest.raises(ValueError, match="32 bytes"):
        KeyRing([KeyEncryptionKey("a", secret[:16])], "a")
    with pytest.raises(ValueError, match="active"):
        KeyRing([KeyEncryptionKey("a", secret)], "b")
    assert repr(KeyEncryptionKey("a", secret)) == "KeyEncryptionKey(key_id='a')"


def test_encrypting_and_decrypting_a_stored_row_keeps_its_compressed_bytes() -> None:
    """The migrations seal and open payloads as they are: a delta encrypted
    later decodes like one encrypted at write time, and decrypting gives the
    very bytes that were sealed."""
    policy = CompressionPolicy(snapshot_ratio=1.0)
    plain = encode_version(NEXT, identity_of(NEXT, 8), snapshot_of(STATE), None, policy)
    assert plain.codec is Codec.ZSTD_DELTA and not plain.encrypted
    sealed = encrypt_stored(plain, identity_of(NEXT, 8), sha256_hex(STATE), KEYS.generate())
    key = unwrap(KEYS, sealed)
    assert decode_version(sealed, identity_of(NEXT, 8), base_of(STATE), key) == NEXT
    opened = decrypt_stored(sealed, identity_of(NEXT, 8), sha256_hex(STATE), key)
    assert opened.payload == plain.payload and not opened.encrypted
    with pytest.raises(AuthenticationFailed):
        decrypt_stored(sealed, identity_of(NEXT, 9), sha256_hex(STATE), key)
    with pytest.raises(ValueError):
        encrypt_stored(sealed, identity_of(NEXT, 8), sha256_hex(STATE), KEYS.generate())


def test_a_streamed_encrypted_version_is_authenticated_before_the_first_piece() -> None:
    """Streaming an encrypted row decrypts (and authenticates) the payload
    before returning the iterator: a moved row fails before any byte."""
    stored = encode_version(STATE, identity_of(STATE), None, KEYS.generate())
    key = unwrap(KEYS, stored)
    assert b"".join(iter_decode_version(stored, identity_of(STATE), None, key, 1000)) == STATE
    with pytest.raises(AuthenticationFailed):
        iter_decode_version(stored, identity_of(STATE, tenant="evil"), None, key)
