"""Benchmark: bytes per stored version, and the cost of encoding and decoding.

    python bench/storage.py [--versions 200] [--large-versions 20] [--rounds 3]
                            [--skip-large] [--large-resources 150000]

Part 1, small history: C{--versions} versions of a 50-resource state (about
41 KB, pretty-printed like Terraform), two resources changed per version,
either random ones or the same two every time.  For each storage scheme
(the write path's policy, chains, with the bases its chain cache offers;
the policy as it was before chains, deltas against the newest snapshot;
and schemes it does not implement: deltas against a fixed snapshot, fixed
chains, skip deltas, two levels) it prints the bytes per version (all
payloads and wrapped keys of the history divided by the number of
versions: what the history costs, amortised), without and with
encryption, how many payloads a read decodes at most, and the median
encode and decode time per version (a decode as by a process that holds
none of the history).

Part 2, large states: the 120 MB state of C{bench/large_state.py} (values
of 1,500 repeated characters: it compresses 200-fold) and a 124 MB state of
C{--large-resources} realistic resources (random ids: 15-fold), each over
C{--large-versions} versions with two values changed per version.  It
prints bytes per version (the write path's full frames, and deltas as a
background compaction could store them), encode and decode throughput (MB/s,
medians of C{--rounds}), the peak memory one encode adds (measured in a
child process), and what serving gzip as stored would save against
decompressing zstd and sending the raw bytes.

Only the payload columns are counted: the row's other columns, its indexes
and the audit events come on top (see docs/at-rest.md).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from large_state import big_state
from state_history import history, patched_history, write_cycle_history

from kilolock.atrest.compression import (
    Base,
    Codec,
    CompressionPolicy,
    Snapshot,
    compress_delta,
    compress_full,
    decompress_version,
    iter_decompress_version,
    sha256_hex,
)
from kilolock.atrest.envelope import VersionIdentity, WrappedKey
from kilolock.atrest.keyring import KeyEncryptionKey, KeyRing
from kilolock.atrest.stored import (
    StoredPayload,
    decode_version,
    encode_version,
    iter_decode_version,
)
from kilolock.core.model import StateKey
from kilolock.store.postgres.payloads import ChainCache

KEYS = KeyRing([KeyEncryptionKey("2026-12", os.urandom(32))], "2026-12")


def identity(raw: bytes, serial: int) -> VersionIdentity:
    return VersionIdentity("acme", "prod/network", serial, sha256_hex(raw), len(raw))


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


# -- part 1: small histories -----------------------------------------------------------


def policy_history(raws: list[bytes], policy: CompressionPolicy, encrypted: bool,
                   chains: bool = True) -> tuple[list[int], list[float], list[float], int, int]:
    """Store a history as the write path would (L{encode_version} with the
    bases the store's L{ChainCache} offers: the newest version and its
    chain's snapshot; with C{chains} False only the snapshot, as before
    chains), then read every version back from its chain, as a process
    that holds none of it.  Returns the stored size of each version,
    encode and decode times, snapshots, and the most payloads a read
    decodes."""
    sizes, encode_times, decode_times = [], [], []
    rows: list[tuple[StoredPayload, VersionIdentity, int | None]] = []
    cache, key = ChainCache(), StateKey("acme", "prod/network")
    for number, raw in enumerate(raws):
        cached = cache.get(key)
        started = time.perf_counter()
        data_key = KEYS.generate() if encrypted else None
        stored = encode_version(raw, identity(raw, number),
                                None if cached is None else cached.snapshot, data_key, policy,
                                None if cached is None or not chains else cached.newest)
        encode_times.append(time.perf_counter() - started)
        rows.append((stored, identity(raw, number),
                     None if cached is None else cached.base_number(stored)))
        cache.written(key, number, raw, sha256_hex(raw), stored, cached)
        sizes.append(len(stored.payload) + len(stored.data_key or b""))

    def read(index: int) -> bytes:
        stored, ident, base_number = rows[index]
        base = None if base_number is None else Base(read(base_number), rows[base_number][1].sha256)
        key = (KEYS.unwrap(WrappedKey.from_bytes(stored.data_key))
               if stored.data_key is not None else None)
        return decode_version(stored, ident, base, key)

    def links(index: int) -> int:
        base_number = rows[index][2]
        return 1 if base_number is None else 1 + links(base_number)

    for index, raw in enumerate(raws):
        started = time.perf_counter()
        assert read(index) == raw
        decode_times.append(time.perf_counter() - started)
    snapshots = sum(1 for stored, _, _ in rows if stored.codec is not Codec.ZSTD_DELTA)
    return (sizes, encode_times, decode_times, snapshots,
            max(links(index) for index in range(len(rows))))


def fixed_history(raws: list[bytes], level: int, base_of: Callable[[int], int | None],
                  encrypted: bool) -> list[int]:
    """Bytes per version of a scheme the policy does not implement: each
    version a delta against the version C{base_of} names, or full for None."""
    sizes = []
    for number, raw in enumerate(raws):
        base = base_of(number)
        data = (compress_full(raw, level) if base is None
                else compress_delta(raw, Base(raws[base], sha256_hex(raws[base])), level))
        if encrypted:
            data += bytes(1 + 12 + 16 + len(KEYS.wrap(b"k" * 32).to_bytes()))
        sizes.append(len(data))
    return sizes


def skip_delta_base(number: int, k: int = 64) -> int | None:
    """Skip deltas: version C{i} of a group of C{k} (a full snapshot at 0)
    against version C{i & (i - 1)}, so a read decodes at most
    log2(k) + 1 payloads, and a delta spans 3 versions' changes on average."""
    offset = number % k
    return None if offset == 0 else number - offset + (offset & (offset - 1))


def two_level_base(number: int, k: int = 64, step: int = 4) -> int | None:
    """A full snapshot every C{k} versions, every C{step}-th version a delta
    against it, the others against that one: at most three payloads a read."""
    offset = number % k
    if offset == 0:
        return None
    return number - offset if offset % step == 0 else number - offset % step


def gzip_history(raws: list[bytes], encrypted: bool) -> list[int]:
    extra = 1 + 12 + 16 + len(KEYS.wrap(b"k" * 32).to_bytes()) if encrypted else 0
    return [len(zlib.compress(raw, 6)) + 18 + extra for raw in raws]


def histories(versions: int) -> Iterator[tuple[str, list[bytes]]]:
    """The small histories: realistic resources changed at random, the same
    two changed every time, and bench/write_cycle.py's state."""
    for same in (False, True):
        raws = list(history(versions, same=same))
        pattern = "the same 2 resources" if same else "2 random resources"
        yield (f"{versions} versions of a 50-resource state ({len(raws[0]):,} bytes),"
               f" {pattern} changed per version", raws)
    raws = list(write_cycle_history(versions))
    yield (f"{versions} versions of bench/write_cycle.py's 50-resource state"
           f" ({len(raws[0]):,} bytes), 2 random ids changed per version", raws)


def small_part(versions: int) -> None:
    for title, raws in histories(versions):
        print(f"\n== {title}")
        print(f"{'scheme':<52} {'plain B/v':>9} {'encrypted':>9} {'reads':>5}"
              f" {'enc us':>7} {'dec us':>7} {'snapshots':>9}")
        print(f"{'raw bytes (no compression)':<52} {len(raws[0]):>9,}")
        rows: list[tuple[str, float, float, str, str, str, str]] = []
        rows.append(("gzip -6, every version full", statistics.mean(gzip_history(raws, False)),
                     statistics.mean(gzip_history(raws, True)), "1", "", "", ""))
        for level in (1, 3):
            rows.append((f"zstd -{level}, every version full",
                         statistics.mean(fixed_history(raws, level, lambda n: None, False)),
                         statistics.mean(fixed_history(raws, level, lambda n: None, True)),
                         "1", "", "", ""))
        for k in (8, 16):
            rows.append((f"zstd -1 delta vs snapshot, fixed K={k}",
                         statistics.mean(fixed_history(
                             raws, 1, lambda n, k=k: None if n % k == 0 else n - n % k, False)),
                         statistics.mean(fixed_history(
                             raws, 1, lambda n, k=k: None if n % k == 0 else n - n % k, True)),
                         "2", "", "", ""))
        for k in (16, 32, 64):
            rows.append((f"zstd -1 delta vs previous (chain), K={k}",
                         statistics.mean(fixed_history(
                             raws, 1, lambda n, k=k: None if n % k == 0 else n - 1, False)),
                         statistics.mean(fixed_history(
                             raws, 1, lambda n, k=k: None if n % k == 0 else n - 1, True)),
                         str(k), "", "", ""))
        for name, base_of, reads in (
                ("zstd -1 skip deltas (k vs k & (k-1)), K=64", skip_delta_base, "7"),
                ("zstd -1 deltas vs a delta every 4 vs snapshot, K=64", two_level_base, "3")):
            rows.append((name, statistics.mean(fixed_history(raws, 1, base_of, False)),
                         statistics.mean(fixed_history(raws, 1, base_of, True)), reads,
                         "", "", ""))
        for level, delta_level, chains in ((3, 1, False), (3, 1, True), (3, 3, True),
                                           (1, 1, True)):
            policy = CompressionPolicy(level=level, delta_level=delta_level)
            plain, _, _, _, _ = policy_history(raws, policy, False, chains)
            sealed, enc, dec, snapshots, most = policy_history(raws, policy, True, chains)
            mark = " (default)" if policy == CompressionPolicy() and chains else ""
            shape = "chains" if chains else "vs snapshot (before chains)"
            rows.append((f"policy: -{level}, deltas -{delta_level}, {shape}{mark}",
                         statistics.mean(plain), statistics.mean(sealed), str(most),
                         f"{median_us(enc):.0f}", f"{median_us(dec):.0f}", str(snapshots)))
        for name, plain_b, sealed_b, reads, enc_us, dec_us, snaps in rows:
            print(f"{name:<52} {plain_b:>9,.0f} {sealed_b:>9,.0f} {reads:>5} {enc_us:>7}"
                  f" {dec_us:>7} {snaps:>9}")


# -- part 2: large states --------------------------------------------------------------


def timed(call: Callable[[], object], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def serve(produce: Callable[[], Iterator[bytes]], consume: Callable[[bytes], int]) -> float:
    """Wall time to push what C{produce} yields through a loopback socket to a
    reader thread that hands each piece to C{consume}."""
    sender, receiver = socket.socketpair()
    received = [0]

    def reader() -> None:
        while chunk := receiver.recv(1 << 20):
            received[0] += consume(chunk)

    thread = threading.Thread(target=reader)
    started = time.perf_counter()
    thread.start()
    for piece in produce():
        sender.sendall(piece)
    sender.close()
    thread.join()
    receiver.close()
    return time.perf_counter() - started


def serving(raw: bytes, rounds: int) -> None:
    """zstd stored: decompress and send raw bytes; gzip stored: send as is and
    let the client inflate (what Terraform's Go client does)."""
    size = len(raw)
    frame = compress_full(raw, 1)
    gz = zlib.compress(raw, 6, wbits=31)
    sha = sha256_hex(raw)

    def zstd_pieces() -> Iterator[bytes]:
        body = decompress_version(Codec.ZSTD, frame, size, sha)
        view = memoryview(body)
        for start in range(0, size, 1 << 20):
            yield bytes(view[start:start + (1 << 20)])

    def streamed_pieces() -> Iterator[bytes]:
        return iter_decompress_version(Codec.ZSTD, frame, size, sha)

    def gzip_pieces() -> Iterator[bytes]:
        for start in range(0, len(gz), 1 << 20):
            yield gz[start:start + (1 << 20)]

    inflater: list[zlib._Decompress] = []

    def inflate(chunk: bytes) -> int:
        return len(inflater[0].decompress(chunk))

    as_raw = timed(lambda: serve(zstd_pieces, len), rounds)
    streamed = timed(lambda: serve(streamed_pieces, len), rounds)

    def gzip_round() -> float:
        inflater[:] = [zlib.decompressobj(wbits=31)]
        return serve(gzip_pieces, inflate)

    as_gzip = timed(gzip_round, rounds)
    print(f"  serving {size / 1e6:.0f} MB: zstd -1 stored, decode whole then send {as_raw:.2f} s,"
          f" decode and send 1 MiB pieces {streamed:.2f} s; gzip -6 stored"
          f" ({len(gz) / 1e6:.1f} MB), send as is + client inflates {as_gzip:.2f} s")


def memory_probe(path: str, level: int) -> None:
    """Child process: the peak memory that one encode, one whole decode and
    one streamed decode of the state in C{path} add (Linux: the peak is
    reset between them through /proc/self/clear_refs)."""
    state = [Path(path).read_bytes()]
    ident = identity(state[0], 1)

    def added(work: Callable[[], object]) -> int:
        Path("/proc/self/clear_refs").write_text("5")
        before = rss()
        work()
        return hwm() - before

    def rss() -> int:
        return field("VmRSS")

    def hwm() -> int:
        return field("VmHWM")

    def field(name: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(name):
                return int(line.split()[1]) * 1024
        return 0

    stored: list[StoredPayload] = []
    encoding = added(lambda: stored.append(encode_version(
        state[0], ident, None, KEYS.generate(), CompressionPolicy(large_level=level))))
    state.clear()
    data_key = KEYS.unwrap(WrappedKey.from_bytes(stored[0].data_key or b""))
    whole = added(lambda: decode_version(stored[0], ident, None, data_key))
    streamed = added(lambda: sum(len(piece) for piece in iter_decode_version(
        stored[0], ident, None, data_key)))
    print(encoding, whole, streamed)


def large_part(name: str, first: bytes, pattern: bytes, versions: int, rounds: int) -> None:
    size = len(first)
    mb = size / 1e6
    print(f"\n== {name}: {mb:.1f} MB, {versions} versions, 2 values changed per version")
    sha = sha256_hex(first)
    for level in (1, 3):
        frame = compress_full(first, level)
        encode = timed(lambda level=level: encode_version(
            first, identity(first, 1), None, KEYS.generate(),
            CompressionPolicy(large_level=level)), rounds)
        stored = encode_version(first, identity(first, 1), None, KEYS.generate(),
                                CompressionPolicy(large_level=level))
        data_key = KEYS.unwrap(WrappedKey.from_bytes(stored.data_key or b""))
        decode = timed(lambda stored=stored, data_key=data_key: decode_version(
            stored, identity(first, 1), None, data_key), rounds)
        plain_decode = timed(lambda frame=frame: decompress_version(
            Codec.ZSTD, frame, size, sha), rounds)
        print(f"  zstd -{level}: {len(frame) / 1e6:.2f} MB ({size / len(frame):.0f}x);"
              f" encode+seal {encode:.2f} s ({mb / encode:.0f} MB/s),"
              f" open+decode+sha256 {decode:.2f} s ({mb / decode:.0f} MB/s),"
              f" decode unencrypted {plain_decode:.2f} s ({mb / plain_decode:.0f} MB/s)")
    for level in (1, 6):
        encode = timed(lambda level=level: zlib.compress(first, level), 1)
        print(f"  gzip -{level}: {len(zlib.compress(first, level)) / 1e6:.2f} MB;"
              f" encode {encode:.2f} s ({mb / encode:.0f} MB/s)")
    with tempfile.NamedTemporaryFile(suffix=".json") as scratch:
        scratch.write(first)
        scratch.flush()
        for level in (1, 3):
            probe = subprocess.run(
                [sys.executable, __file__, "--memory-probe", scratch.name, str(level)],
                capture_output=True, text=True, check=True).stdout.split()
            print(f"  peak memory added at zstd -{level}: encode {int(probe[0]) / 1e6:.0f} MB"
                  f" ({int(probe[0]) / size:.2f}x the state), decode whole"
                  f" {int(probe[1]) / 1e6:.0f} MB, decode streamed {int(probe[2]) / 1e6:.0f} MB")
    full_sizes, delta_sizes, delta_times = [], [], []
    snapshot: Base | None = None
    for number, raw in enumerate(patched_history(first, versions, pattern)):
        stored = encode_version(raw, identity(raw, number), None, KEYS.generate())
        full_sizes.append(len(stored.payload) + len(stored.data_key or b""))
        if snapshot is None:
            snapshot = Base(raw, sha256_hex(raw))
            delta_sizes.append(full_sizes[-1])
            continue
        started = time.perf_counter()
        delta = compress_delta(raw, snapshot, 1)
        delta_times.append(time.perf_counter() - started)
        delta_sizes.append(len(delta) + 1 + 12 + 16 + len(stored.data_key or b""))
    print(f"  bytes per version, encrypted: write path (full zstd -1 frames)"
          f" {statistics.mean(full_sizes) / 1e6:.2f} MB; deltas against the first"
          f" (a background compaction) {statistics.mean(delta_sizes) / 1e6:.3f} MB"
          f" (median delta {statistics.median(delta_sizes[1:]) / 1e3:.1f} KB,"
          f" {statistics.median(delta_times):.2f} s each)")
    serving(first, rounds)


# -- part 3: in PostgreSQL ----------------------------------------------------------------

COLUMNS = """id bigserial PRIMARY KEY, state_id bigint NOT NULL, number integer NOT NULL,
    serial bigint NOT NULL, lineage text NOT NULL, sha256 text NOT NULL, size bigint NOT NULL,
    created_at timestamptz NOT NULL, principal text NOT NULL, projected boolean NOT NULL,
    resource_count integer NOT NULL DEFAULT 0"""


def database_part(versions: int, kind: str, states: int = 5) -> None:
    """The version rows as PostgreSQL stores them: today's raw C{bytea}
    (pglz in TOAST) against the proposed columns, heap, TOAST and indexes."""
    import psycopg

    from kilolock.store.postgres.embedded import EmbeddedPostgres

    tables = {"today": "raw_state bytea NOT NULL",
              "plain": "codec text NOT NULL, base_number integer, data_key bytea,"
                       " payload bytea NOT NULL",
              "encrypted": "codec text NOT NULL, base_number integer, data_key bytea,"
                           " payload bytea NOT NULL"}
    with tempfile.TemporaryDirectory(prefix="kilolock-bench-pg-") as scratch:
        cluster = EmbeddedPostgres(Path(scratch) / "data", database="bench")
        try:
            with psycopg.connect(cluster.start_blocking(), autocommit=True) as db:
                for table, extra in tables.items():
                    db.execute(f"CREATE TABLE {table} ({COLUMNS}, {extra},"
                               f" UNIQUE (state_id, number))")
                    db.execute(f"CREATE INDEX ON {table} (state_id, serial)")
                    if table != "today":
                        db.execute(f"ALTER TABLE {table} ALTER COLUMN payload SET STORAGE EXTERNAL")
                for state_id in range(states):
                    raws = list(history(versions, seed=state_id) if kind == "realistic"
                                else write_cycle_history(versions, seed=state_id))
                    for table in tables:
                        rows = database_rows(raws, table)
                        names = ("raw_state" if table == "today"
                                 else "codec, base_number, data_key, payload")
                        marks = ", ".join(["%s"] * (7 + len(names.split(","))))
                        with db.cursor() as cursor:
                            cursor.executemany(
                                f"INSERT INTO {table} (state_id, number, serial, lineage, sha256,"
                                f" size, resource_count, {names}, created_at, principal,"
                                f" projected) VALUES ({marks}, now(), 'alice@ci', true)",
                                [(state_id, number + 1, number + 1, "7b1d5c1e-0000-4000-8000-00",
                                  sha256_hex(raw), len(raw), 50, *row)
                                 for number, (raw, row) in enumerate(zip(raws, rows, strict=True))])
                db.execute("VACUUM ANALYZE")
                print(f"\n== in PostgreSQL: {states} states x {versions} versions of the {kind}"
                      f" 50-resource state (2 random resources changed per version),"
                      f" bytes per version row")
                print(f"{'table':<34} {'heap':>7} {'TOAST':>7} {'indexes':>7} {'total':>7}")
                count = states * versions
                for table in tables:
                    heap, toast, indexes, total = db.execute(
                        "SELECT pg_relation_size(c.oid), coalesce(pg_total_relation_size("
                        "c.reltoastrelid), 0), pg_indexes_size(c.oid), pg_total_relation_size"
                        "(c.oid) FROM pg_class c WHERE c.relname = %s", (table,)).fetchone()
                    label = {"today": "today (raw bytea, pglz)",
                             "plain": "proposed, unencrypted",
                             "encrypted": "proposed, encrypted"}[table]
                    print(f"{label:<34} {heap / count:>7,.0f} {toast / count:>7,.0f}"
                          f" {indexes / count:>7,.0f} {total / count:>7,.0f}")
        finally:
            cluster.stop_blocking()


def database_rows(raws: list[bytes], table: str) -> list[tuple[object, ...]]:
    """The extra column values of each version for one of the tables."""
    if table == "today":
        return [(raw,) for raw in raws]
    rows: list[tuple[object, ...]] = []
    snapshot: tuple[int, bytes, int] | None = None
    for number, raw in enumerate(raws):
        offered = None if snapshot is None else Snapshot(
            Base(snapshot[1], sha256_hex(snapshot[1])), snapshot[2], number - 1 - snapshot[0])
        stored = encode_version(raw, identity(raw, number + 1), offered,
                                KEYS.generate() if table == "encrypted" else None)
        base_number = None
        if stored.codec is Codec.ZSTD_DELTA and snapshot is not None:
            base_number = snapshot[0] + 1
        else:
            snapshot = (number, raw, len(stored.payload))
        rows.append((stored.codec.value, base_number, stored.data_key, stored.payload))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", type=int, default=200)
    parser.add_argument("--large-versions", type=int, default=20)
    parser.add_argument("--large-resources", type=int, default=150_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-database", action="store_true")
    parser.add_argument("--memory-probe", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        memory_probe(args.memory_probe[0], int(args.memory_probe[1]))
        return
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    small_part(args.versions)
    if not args.skip_database:
        for kind in ("realistic", "write_cycle"):
            database_part(args.versions, kind)
    if not args.skip_large:
        large_part("bench/large_state.py's state", big_state(50_000), rb"i-[0-9a-f]{12}",
                   args.large_versions, args.rounds)
        realistic = next(history(1, resources=args.large_resources))
        large_part(f"realistic state of {args.large_resources} resources", realistic,
                   rb'(?<="etag": ")[0-9a-f]{32}', args.large_versions, args.rounds)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
