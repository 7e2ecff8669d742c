"""The start-up check of encryption keys against the database.

Before the PostgreSQL store serves anything, it makes sure it can open what
the database holds: for every key-encryption key id that wraps data keys in
C{state_versions}, one of those data keys is unwrapped with the configured
provider.  A key id the key file does not have, a key file with other
secret bytes under that id, or encrypted versions and no key file at all:
the store does not serve (L{EncryptionKeysRefused}: logged with what to do,
503 to clients).  So a misconfigured server fails at once and loudly rather
than answering C{stored_version_unauthentic} state by state -- and nothing
it serves is ever garbled either way: every payload is authenticated.

The check runs each time the store opens its pool: after a refusal, at the
next request a second later (L{kilolock.store.postgres.runner}).  So a
server started without keys while C{kilolock-migrate decrypt-versions}
opens the last encrypted versions serves as soon as the job has finished,
without a restart (the steps of docs/at-rest.md).
"""

from __future__ import annotations

from typing import Any

from kilolock.atrest.envelope import WrappedKey
from kilolock.atrest.errors import StoredVersionUnreadable
from kilolock.atrest.interfaces import IKeyProvider
from kilolock.core.errors import EncryptionKeysRefused
from kilolock.store.postgres.codecs import bytes_from_hex

__all__ = ["KEY_IDS_IN_USE", "check_keys_txn"]

#: Each KEK id that wraps a data key, with one data key it wraps: a loose
#: index scan of C{state_versions_kek} (one probe per id, however many rows).
KEY_IDS_IN_USE = """
WITH RECURSIVE ids (kek_id) AS (
    (SELECT kek_id FROM state_versions WHERE kek_id IS NOT NULL ORDER BY kek_id LIMIT 1)
    UNION ALL
    SELECT (SELECT v.kek_id FROM state_versions v
            WHERE v.kek_id IS NOT NULL AND v.kek_id > ids.kek_id ORDER BY v.kek_id LIMIT 1)
    FROM ids WHERE ids.kek_id IS NOT NULL
)
SELECT ids.kek_id,
       (SELECT v.data_key FROM state_versions v WHERE v.kek_id = ids.kek_id LIMIT 1)
FROM ids WHERE ids.kek_id IS NOT NULL ORDER BY ids.kek_id
"""

async def check_keys_txn(cursor: Any, provider: IKeyProvider | None) -> list[str]:
    """Unwrap one data key per KEK id the database uses.

    @return: (awaited) those ids, sorted.
    @raise EncryptionKeysRefused: with a C{detail} naming the key id and the
        fix (never a secret).
    """
    await cursor.execute(KEY_IDS_IN_USE)
    found = [(str(kek_id), bytes_from_hex(data_key)) for kek_id, data_key in cursor.fetchall()]
    ids = [kek_id for kek_id, _ in found]
    if found and provider is None:
        raise EncryptionKeysRefused(
            f"the database holds encrypted versions (key ids: {', '.join(ids)}) and no"
            " encryption keys are configured: start Kilolock with --encryption-keys FILE"
            " (KL_ENCRYPTION_KEYS), the key file those versions were written with; or, to"
            " turn encryption off, run kilolock-migrate decrypt-versions with that file:"
            " this server serves once it has finished (see docs/at-rest.md)")
    for kek_id, data_key in found:
        assert provider is not None
        try:
            await provider.unwrap_data_key(WrappedKey.from_bytes(data_key))
        except StoredVersionUnreadable as error:
            have = ", ".join(provider.key_ids())
            raise EncryptionKeysRefused(
                f"encryption key {kek_id!r} cannot open the data keys the database holds"
                f" under that id ({error.code}: {error.message}); the key file has {have}."
                " Give Kilolock the key file the versions were written with (add the old"
                " key to it to rotate; see docs/at-rest.md)") from None
    return ids
