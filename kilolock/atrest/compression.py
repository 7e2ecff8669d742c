"""Compressing one version's bytes, and getting exactly those bytes back.

Three codecs (the C{codec} column of a version row):

  - C{identity}: the raw bytes (rows written before compression, and bytes
    that zstd does not shrink, such as an OpenTofu encrypted envelope);
  - C{zstd}: one standard zstd frame, its content size in the header and no
    frame checksum (the version's sha256 is checked instead);
  - C{zstd-delta}: the version compressed with the raw bytes of an earlier
    version of the same state (its base) as zstd's prefix (what C{zstd
    --patch-from} does).  The payload is a zstd skippable frame holding the
    first 8 bytes of the base's sha256, then the zstd frame, so C{zstd -d
    --patch-from BASE} reads it as it is, and a delta handed the wrong base is
    refused.

A delta is made against the state's newest version (a chain: each version
a delta against the one before it), or, when that chain is as long as the
policy allows, against the chain's full snapshot; a read decodes the chain
from its snapshot to the version, each link checked by its own sha256.  When
to start a new snapshot and how long a chain may grow are
L{CompressionPolicy}'s rules (see C{docs/at-rest.md}).  Every decode checks
the size and the sha256 the row records for the version before returning
anything.
"""

from __future__ import annotations

import enum
import hashlib
import io
import struct
import sys
from collections.abc import Iterator

from attrs import field, frozen

from kilolock.atrest.errors import CorruptVersion, WrongBase

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

_P = zstd.CompressionParameter

#: A skippable frame (magic 0x184D2A5B, little-endian) of 8 bytes: the first
#: 8 bytes of the base's sha256.
_BASE_MAGIC = struct.pack("<II", 0x184D2A5B, 8)
_BASE_HEADER = len(_BASE_MAGIC) + 8

#: Input is fed to zstd in pieces of this size, so no second copy of a large
#: state is ever made.
_CHUNK = 1 << 20

#: zstd's own default limit for a decoder's window (128 MiB); frames of larger
#: inputs need a window as large as their content plus their base.
_DEFAULT_WINDOW_LOG = 27
_MAX_WINDOW_LOG = 31

#: zstd takes a prefix of 8 bytes or more; a delta pays off from a few dozen.
MIN_BASE_SIZE = 64


class Codec(enum.Enum):
    """How a version's payload holds its bytes (the value is the column text)."""

    IDENTITY = "identity"
    ZSTD = "zstd"
    ZSTD_DELTA = "zstd-delta"


@frozen
class Base:
    """A base version's raw bytes and their sha256 (lowercase hex)."""

    raw: bytes = field(repr=lambda raw: f"<{len(raw)} bytes>")
    sha256: str


@frozen
class Snapshot:
    """The newest full snapshot of a state, offered to a write as its base.

    C{stored_size} is the length of that snapshot's compressed payload;
    C{versions_since} counts the versions the state has after it (0 when the
    snapshot is the current version).
    """

    base: Base
    stored_size: int
    versions_since: int


@frozen
class Newest:
    """The newest version of a state when it is a delta, offered to a write
    as the base of the next link of its chain: its raw bytes and sha256, and
    C{links}, the payloads a read of it decodes (2 or more: its snapshot and
    the deltas up to it)."""

    base: Base
    links: int


@frozen
class CompressionPolicy:
    """Levels and the snapshot rule (the figures behind them: docs/at-rest.md).

    Snapshots are compressed at C{level}, deltas at C{delta_level}: on
    Terraform states zstd's fastest level makes the smallest deltas.

    A new version is written as a delta against the snapshot offered when it
    is smaller than C{snapshot_ratio} times the snapshot's own payload and the
    snapshot has fewer than C{max_versions_since} versions after it; otherwise
    it becomes a new full snapshot.  States of C{large_size} bytes or more are
    always full snapshots at C{large_level}: a delta would hold their base in
    memory a second time, and zstd is fast enough for their size anyway.

    The delta's base is the newest version (the next link of its chain) while
    a read of the new version would decode at most C{max_links} payloads
    (past that, a new snapshot) and at most C{chain_bytes} bytes of output
    (links times the state's size; past that, the delta goes against the
    chain's snapshot: mid-sized states get short chains and deltas against
    their snapshot).  A chain's deltas hold only what
    changed since the version before, so a history of small changes costs a
    few hundred bytes per version; the limits bound what a read of a version
    whose bytes this process does not hold decodes.
    """

    level: int = 3
    delta_level: int = 1
    large_level: int = 1
    large_size: int = 8 * 1024 * 1024
    snapshot_ratio: float = 0.2
    max_versions_since: int = 64
    max_links: int = 64
    chain_bytes: int = 4 * 1024 * 1024


DEFAULT_POLICY = CompressionPolicy()


@frozen
class Compressed:
    """A version's payload before encryption; C{base_sha256} is set for
    deltas; C{links} counts the payloads a read of it decodes (1: full)."""

    codec: Codec
    data: bytes = field(repr=lambda data: f"<{len(data)} bytes>")
    base_sha256: str | None = None
    links: int = 1


def sha256_hex(raw: bytes) -> str:
    """The lowercase hex sha256 that version rows record."""
    return hashlib.sha256(raw).hexdigest()


def _window_log(total: int) -> int:
    """The smallest window (log2) that reaches back over C{total} bytes."""
    return min(max(total - 1, 1).bit_length(), _MAX_WINDOW_LOG)


def _feed(compressor: zstd.ZstdCompressor, raw: bytes) -> bytes:
    compressor.set_pledged_input_size(len(raw))
    view = memoryview(raw)
    pieces = [compressor.compress(view[start:start + _CHUNK])
              for start in range(0, len(raw), _CHUNK)]
    pieces.append(compressor.flush())
    return b"".join(pieces)


def compress_full(raw: bytes, level: int) -> bytes:
    """One zstd frame of C{raw} (content size recorded, no checksum)."""
    options: dict[int, int] = {
        _P.compression_level: level, _P.checksum_flag: 0, _P.content_size_flag: 1}
    return _feed(zstd.ZstdCompressor(options=options), raw)


def compress_delta(raw: bytes, base: Base, level: int) -> bytes:
    """C{raw} as a delta against C{base}: the base's fingerprint, then a zstd
    frame that uses the base's bytes as prefix.  Inputs of 8 MiB and more use
    long-distance matching, which finds unchanged stretches far back.
    C{base} must be at least L{MIN_BASE_SIZE} bytes (ValueError)."""
    if len(base.raw) < MIN_BASE_SIZE:
        raise ValueError(f"a delta base needs at least {MIN_BASE_SIZE} bytes")
    total = len(base.raw) + len(raw)
    options: dict[int, int] = {
        _P.compression_level: level, _P.checksum_flag: 0, _P.content_size_flag: 1,
        _P.dict_id_flag: 0, _P.window_log: max(_window_log(total), 10)}
    if total >= 8 * 1024 * 1024:
        options[_P.enable_long_distance_matching] = 1
    prefix = zstd.ZstdDict(base.raw, is_raw=True).as_prefix
    frame = _feed(zstd.ZstdCompressor(options=options, zstd_dict=prefix), raw)
    return _BASE_MAGIC + bytes.fromhex(base.sha256)[:8] + frame


def _usable_base(base: Base, policy: CompressionPolicy = DEFAULT_POLICY) -> bool:
    """Whether a delta can be made against C{base}: zstd takes a prefix of
    L{MIN_BASE_SIZE} bytes or more, and a base of the policy's large size
    would be held in memory a second time."""
    return MIN_BASE_SIZE <= len(base.raw) < policy.large_size


def _delta_base(raw: bytes, snapshot: Snapshot | None, policy: CompressionPolicy = DEFAULT_POLICY,
               newest: Newest | None = None) -> tuple[Base, int] | None:
    """What C{raw} would be a delta against, and the payloads a read of it
    would then decode; None when it must be a full snapshot.  The one place
    that decides whether a delta is tried: every base it answers is one
    L{compress_delta} takes.

    The base is C{newest} (the next link of its chain) while the chain is
    shorter than the policy's links and bytes allow and C{newest} is a
    usable base (a state of a few dozen bytes is not); else the snapshot."""
    if (snapshot is None or len(raw) >= policy.large_size
            or not _usable_base(snapshot.base, policy)
            or snapshot.versions_since >= policy.max_versions_since
            or (newest is not None and newest.links >= policy.max_links)):
        return None
    if (newest is not None and _usable_base(newest.base, policy)
            and (newest.links + 1) * len(raw) <= policy.chain_bytes):
        return newest.base, newest.links + 1
    return snapshot.base, 2


def compress_version(raw: bytes, snapshot: Snapshot | None,
                     policy: CompressionPolicy = DEFAULT_POLICY,
                     newest: Newest | None = None) -> Compressed:
    """The payload to store for C{raw}, following C{policy}.

    C{snapshot} is the newest full snapshot of the same state, or None (the
    first version, a snapshot that could not be read, or no wish for a
    delta); C{newest} the state's newest version when it is a delta on that
    snapshot's chain (None: the snapshot is the newest).  Any version of the
    state is a correct base: an older one only makes the delta larger.
    Whatever the bytes offered, a version is stored: as a delta where
    L{_delta_base} finds one and it is small enough, else full.
    """
    chosen = _delta_base(raw, snapshot, policy, newest)
    if chosen is not None:
        assert snapshot is not None
        base, links = chosen
        delta = compress_delta(raw, base, policy.delta_level)
        if len(delta) <= policy.snapshot_ratio * snapshot.stored_size:
            return Compressed(Codec.ZSTD_DELTA, delta, base.sha256, links)
    large = len(raw) >= policy.large_size
    full = compress_full(raw, policy.large_level if large else policy.level)
    if len(full) >= len(raw):
        return Compressed(Codec.IDENTITY, raw)
    return Compressed(Codec.ZSTD, full)


def base_fingerprint(data: bytes) -> bytes:
    """The 8 bytes of its base's sha256 that a delta payload starts with."""
    if len(data) < _BASE_HEADER or not data.startswith(_BASE_MAGIC):
        raise CorruptVersion("the delta payload does not start with its base's fingerprint")
    return data[len(_BASE_MAGIC):_BASE_HEADER]


def _frame(codec: Codec, data: bytes, base: Base | None) -> tuple[bytes, bytes | None]:
    """The zstd frame of a payload and the prefix it needs (None for C{zstd})."""
    if codec is Codec.ZSTD:
        return data, None
    if base is None:
        raise WrongBase("a zstd-delta payload needs its base version")
    if base_fingerprint(data) != bytes.fromhex(base.sha256)[:8]:
        raise WrongBase("the delta was made against another base version")
    return data[_BASE_HEADER:], base.raw


def _decompressor(frame: bytes, size: int, prefix: bytes | None) -> zstd.ZstdDecompressor:
    """A decompressor for C{frame}, once its header declares C{size} bytes;
    its window may reach over the frame's content and its prefix, no more."""
    try:
        declared = zstd.get_frame_info(frame).decompressed_size
    except zstd.ZstdError as error:
        raise CorruptVersion(f"the payload is not a zstd frame ({error})") from None
    if declared != size:
        raise CorruptVersion(f"the zstd frame holds {declared} bytes, the version {size}")
    window = max(_window_log(size + len(prefix or b"")), _DEFAULT_WINDOW_LOG)
    zstd_dict = None if prefix is None else zstd.ZstdDict(prefix, is_raw=True).as_prefix
    return zstd.ZstdDecompressor(
        zstd_dict=zstd_dict, options={zstd.DecompressionParameter.window_log_max: window})


def _finished(decompressor: zstd.ZstdDecompressor) -> None:
    """Refuse a frame that did not end, or that other bytes follow."""
    if not decompressor.eof or decompressor.unused_data:
        raise CorruptVersion("the zstd frame is truncated or followed by other bytes")


def _check(size: int, sha256: str, length: int, digest: str) -> None:
    if length != size:
        raise CorruptVersion(f"the payload holds {length} bytes, the version {size}")
    if digest != sha256:
        raise CorruptVersion("the decoded bytes do not match the version's sha256")


def decompress_version(codec: Codec, data: bytes, size: int, sha256: str,
                       base: Base | None = None, verify: bool = True) -> bytes:
    """The raw bytes of a version from its payload, checked against the
    C{size} and C{sha256} its row records.

    A C{zstd-delta} payload needs its C{base} (decoded first, its C{sha256}
    trusted here); a base whose sha256 is not the one the delta was made
    against raises L{WrongBase}.  Any other mismatch raises
    L{CorruptVersion}.  With C{verify} False only the size is checked: for
    a link of a chain whose bytes serve only as the next link's base (the
    sha256 of the version read is checked, and any damage in between makes
    it fail).
    """
    if not verify:
        return _unverified(codec, data, size, base)
    if codec is Codec.IDENTITY:
        _check(size, sha256, len(data), sha256_hex(data))
        return data
    # Pieces into a BytesIO: its buffer grows in place and becomes the
    # result without a copy, so a large version costs its size once (zstd's
    # one-shot decompress joins output blocks: twice).
    out = io.BytesIO()
    for piece in iter_decompress_version(codec, data, size, sha256, base):
        out.write(piece)
    return out.getvalue()


def _unverified(codec: Codec, data: bytes, size: int, base: Base | None) -> bytes:
    """The raw bytes of a payload, checked against C{size} only."""
    if codec is Codec.IDENTITY:
        raw = data
    else:
        out = io.BytesIO()
        for piece in _pieces(codec, data, size, base, _CHUNK):
            out.write(piece)
        raw = out.getvalue()
    if len(raw) != size:
        raise CorruptVersion(f"the payload holds {len(raw)} bytes, the version {size}")
    return raw


def _pieces(codec: Codec, data: bytes, size: int, base: Base | None,
            chunk: int) -> Iterator[bytes]:
    if codec is Codec.IDENTITY:
        view = memoryview(data)
        yield from (bytes(view[start:start + chunk]) for start in range(0, len(data), chunk))
        return
    frame, prefix = _frame(codec, data, base)
    decompressor = _decompressor(frame, size, prefix)
    pending, produced = frame, 0
    while not decompressor.eof:
        try:
            piece = decompressor.decompress(pending, max_length=chunk)
        except zstd.ZstdError as error:
            raise CorruptVersion(f"the zstd frame does not decode ({error})") from None
        pending, produced = b"", produced + len(piece)
        if produced > size or (not piece and decompressor.needs_input):
            break
        yield piece
    _finished(decompressor)


def iter_decompress_version(codec: Codec, data: bytes, size: int, sha256: str,
                            base: Base | None = None, chunk: int = _CHUNK) -> Iterator[bytes]:
    """L{decompress_version} in pieces of at most C{chunk} bytes, for
    streaming a large version with little memory.  The last piece is held
    back until the size and sha256 are checked: a consumer that sends the
    pieces never completes a body that is not the version's."""
    digest, length, held = hashlib.sha256(), 0, b""
    for piece in _pieces(codec, data, size, base, chunk):
        if not piece:
            continue
        if held:
            yield held
        digest.update(piece)
        length, held = length + len(piece), piece
    _check(size, sha256, length, digest.hexdigest())
    if held:
        yield held
