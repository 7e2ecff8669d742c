"""What a source of key-encryption keys provides: C{IKeyProvider}.

The key file (L{kilolock.atrest.keyring.LocalKeyProvider}) is the provider
implemented here; HashiCorp Vault's Transit engine or a cloud KMS plug in
behind the same four calls (C{datakey}, C{decrypt} and C{rewrap} in Vault;
C{GenerateDataKey}, C{Decrypt} and C{ReEncrypt} in AWS KMS).  Their calls
cross the network, so the interface returns Deferreds; the local provider
answers with Deferreds that have already fired, which costs nothing.  The
cryptography of the payload itself (L{kilolock.atrest.sealing}) stays
synchronous and takes plain data keys, so a store can run it in a thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from zope.interface import Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from kilolock.atrest.envelope import DataKey, WrappedKey


class IKeyProvider(Interface):
    """Key-encryption keys (KEKs) by id, one of them active.

    A provider never hands out a KEK itself, only data keys it generated or
    unwrapped.  Failures: L{kilolock.atrest.errors.UnknownKey} for an id it
    does not hold, L{kilolock.atrest.errors.KeyUnwrapFailed} for a wrapped
    key its KEK does not open, and L{kilolock.core.errors.ServiceUnavailable} when
    a remote provider cannot be reached (clients retry later).
    """

    def active_key_id() -> str:
        """The id of the KEK that new data keys are wrapped under."""

    def key_ids() -> Sequence[str]:
        """Every KEK id the provider can unwrap with, the active one included."""

    def generate_data_key() -> Deferred[DataKey]:
        """Fires with a fresh 32-byte data key and its wrapping under the
        active KEK.  A remote provider may hand out keys it fetched ahead."""

    def unwrap_data_key(wrapped: WrappedKey) -> Deferred[bytes]:
        """Fires with the 32-byte data key that C{wrapped} holds."""

    def rewrap_data_key(wrapped: WrappedKey) -> Deferred[WrappedKey]:
        """Fires with the same data key wrapped under the active KEK (C{wrapped}
        itself when it already is): key rotation, without touching payloads."""
