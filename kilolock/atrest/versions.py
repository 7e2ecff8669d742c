"""What a store calls to write and read a version's bytes: L{VersionCodec}.

It gets data keys from the L{IKeyProvider} (Deferreds) and runs the
CPU-bound work of L{kilolock.atrest.stored} through a runner the store
injects: inline for small states, a thread pool for large ones (the store
passes e.g. C{lambda work: deferToThreadPool(reactor, pool, work)}).  No
reactor is imported here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from attrs import frozen
from twisted.internet.defer import Deferred, FirstError, gatherResults, maybeDeferred, succeed
from twisted.python.failure import Failure

from kilolock.atrest.compression import (
    DEFAULT_POLICY,
    Base,
    Codec,
    CompressionPolicy,
    Newest,
    Snapshot,
)
from kilolock.atrest.envelope import DataKey, VersionIdentity, WrappedKey
from kilolock.atrest.errors import StoredVersionUnreadable
from kilolock.atrest.interfaces import IKeyProvider
from kilolock.atrest.stored import StoredPayload, decode_version, encode_version

_T = TypeVar("_T")


class Runner(Protocol):
    """Runs C{work} somewhere and fires with its result (or its failure)."""

    def __call__(self, work: Callable[[], _T], /) -> Deferred[_T]: ...


def run_inline(work: Callable[[], _T]) -> Deferred[_T]:
    """The runner for small payloads: right here, already fired."""
    return maybeDeferred(work)


@frozen
class StoredRow:
    """A version row as a store read it: its payload columns and identity."""

    stored: StoredPayload
    identity: VersionIdentity


@frozen
class ChainEnds:
    """What decoding a chain of rows gives: the raw bytes of its last row,
    of its first when that row is a full snapshot (else None), and of the
    version the last row is a delta against (None for a full last row)."""

    last: bytes
    first_full: bytes | None = None
    before_last: bytes | None = None


def _first_failure(failure: Failure) -> Failure:
    error = failure.value
    return error.subFailure if isinstance(error, FirstError) else failure


class VersionCodec:
    """Compress-then-encrypt on write, decrypt-then-decompress on read.

    C{provider} None means encryption off: rows are written unencrypted and
    an encrypted row cannot be read.  Payloads of C{large_size} raw bytes or
    more go to C{run_large}.
    """

    def __init__(self, provider: IKeyProvider | None,
                 policy: CompressionPolicy = DEFAULT_POLICY,
                 run_large: Runner = run_inline, large_size: int = 1024 * 1024) -> None:
        self.provider = provider
        self.policy = policy
        self._run_large = run_large
        self._large_size = large_size

    def _run(self, size: int, work: Callable[[], _T]) -> Deferred[_T]:
        return (self._run_large if size >= self._large_size else run_inline)(work)

    def encode(self, raw: bytes, identity: VersionIdentity, snapshot: Snapshot | None,
               newest: Newest | None = None) -> Deferred[StoredPayload]:
        """Fires with the columns to insert for C{raw}: a delta against
        C{newest} or C{snapshot} where the policy says so, sealed under a
        fresh data key when encryption is on."""
        def work(data_key: DataKey | None) -> Deferred[StoredPayload]:
            return self._run(len(raw), lambda: encode_version(
                raw, identity, snapshot, data_key, self.policy, newest))

        if self.provider is None:
            return work(None)
        return self.provider.generate_data_key().addCallback(work)

    def data_key(self) -> Deferred[DataKey | None]:
        """Fires with a fresh data key for L{encode_with}, or None when
        encryption is off."""
        if self.provider is None:
            return succeed(None)
        return self.provider.generate_data_key()  # type: ignore[return-value]

    def encode_with(self, raw: bytes, identity: VersionIdentity,
                    data_key: DataKey | None) -> StoredPayload:
        """L{encode} of a full snapshot with C{data_key} (from L{data_key}),
        here and now (blocking: call it in a thread for large states)."""
        return encode_version(raw, identity, None, data_key, self.policy)

    def _data_key(self, row: StoredRow) -> Deferred[bytes | None]:
        if row.stored.data_key is None:
            return succeed(None)
        if self.provider is None:
            raise StoredVersionUnreadable(
                "the version is encrypted and no encryption keys are configured")
        wrapped = WrappedKey.from_bytes(row.stored.data_key)
        return self.provider.unwrap_data_key(wrapped)  # type: ignore[return-value]

    def decode(self, row: StoredRow, chain: Sequence[StoredRow] = (),
               start: Base | None = None) -> Deferred[bytes]:
        """Fires with the raw bytes of C{row}, checked against its sha256.

        A delta's base is decoded first: C{chain} is the rows from its
        snapshot (or from the first delta after C{start}, a version whose
        raw bytes the caller holds) to the one before C{row}, oldest first.
        Fails with the typed errors of L{kilolock.atrest.errors}."""
        return self.decode_chain([*chain, row], start).addCallback(lambda ends: ends.last)

    def decode_chain(self, rows: Sequence[StoredRow],
                     start: Base | None = None) -> Deferred[ChainEnds]:
        """Fires with the L{ChainEnds} of C{rows}, oldest first: each a delta
        against the one before it, the first full or a delta against
        C{start}.  Every link's size is checked, and the sha256 of each row
        whose bytes the ends hold (the last, the one before it, a full
        first); the links in between are not hashed: a damaged one makes
        the last fail its check.  Encrypted links are each authenticated."""
        keys = maybeDeferred(lambda: gatherResults([self._data_key(each) for each in rows],
                                                   consumeErrors=True))
        keys.addErrback(_first_failure)

        def work(data_keys: list[bytes | None]) -> Deferred[ChainEnds]:
            def decode() -> ChainEnds:
                base, first_full, before = start, None, None
                raw = b""
                kept = {len(rows) - 2, len(rows) - 1, *([0] if start is None else [])}
                for index, (each, data_key) in enumerate(zip(rows, data_keys, strict=True)):
                    delta = base is not None and each.stored.codec is Codec.ZSTD_DELTA
                    before = base.raw if delta and base is not None else None
                    raw = decode_version(each.stored, each.identity, base, data_key,
                                         verify=index in kept)
                    if base is None:
                        first_full = raw
                    base = Base(raw, each.identity.sha256)
                return ChainEnds(raw, first_full, before)
            return self._run(sum(each.identity.size for each in rows), decode)

        return keys.addCallback(work)
