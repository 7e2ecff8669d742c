"""State bytes at rest: how one version's bytes are stored.

A version is compressed (zstd, possibly as a delta against an earlier
version of the same state: a chain from a full snapshot), then, when
encryption is on, sealed with AES-256-GCM under a fresh data key that a
key-encryption key wraps.  Every module here
is pure (no reactor, no database): the stores call them, in a thread for
large payloads.  The format is described in C{docs/at-rest.md}.

  - L{kilolock.atrest.compression}: codecs, the chain and snapshot policy,
    decoding with the sha256 check;
  - L{kilolock.atrest.envelope}: the binary layouts and the associated data;
  - L{kilolock.atrest.sealing}: AES-256-GCM over a payload, rewrapping;
  - L{kilolock.atrest.keyring} and L{kilolock.atrest.keyfile}: key-encryption
    keys and the key file;
  - L{kilolock.atrest.interfaces}: C{IKeyProvider}, what a KMS plugs into;
  - L{kilolock.atrest.stored}: one version's row fields, both ways;
  - L{kilolock.atrest.versions}: C{VersionCodec}, what a store calls;
  - L{kilolock.atrest.chunks}: the chunks of upload sessions, sealed as
    versions are (C{ChunkCodec});
  - L{kilolock.atrest.recovery}: the offline decrypt core.
"""
