"""L{ITFEStore}: what the TFE lane keeps next to the states.

Both stores provide it next to L{kilolock.store.interfaces.states.IStateStore} (the same
object), as they provide L{kilolock.store.interfaces.states.ITenantStore}.  Every method
is one transaction; the state itself (its versions, lock, projection and
events) is the state store's, written by its own methods.

A TFE workspace exists while it has a workspace record or its state
exists.  A state that exists without a record (written through the HTTP
lane, or by C{kl}) is given one when the TFE lane first looks it up or
lists it ("adopted"), so every workspace a client sees has an id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from zope.interface import Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from kilolock.core.model import Principal, StateKey
    from kilolock.tfe.model import PendingVersion, Tag, TFEWorkspace


class ITFEStore(Interface):
    """TFE workspace records (id, tags, creation time) and pending state
    versions with their upload grants."""

    def tfe_find_workspace(key: StateKey, adopt: bool = True) -> Deferred[TFEWorkspace | None]:
        """The workspace of the state at C{key}; with C{adopt}, a state that
        exists without a record is given one.

        @return: a Deferred firing with the L{TFEWorkspace}, or None when
            neither a record nor the state exists."""

    def tfe_workspace_by_id(tenant: str, workspace_id: str) -> Deferred[TFEWorkspace | None]:
        """@return: a Deferred firing with the tenant's workspace with that
        id, or None (another tenant's id is None too)."""

    def tfe_list_workspaces(tenant: str, prefix: str | None) -> Deferred[list[TFEWorkspace]]:
        """The workspaces a caller whose states share C{prefix} (C{ws/env/};
        None: the tenant's one-segment states) can address, states without
        a record adopted first; ordered by name.

        @return: a Deferred firing with the list."""

    def tfe_create_workspace(key: StateKey, tags: Sequence[Tag],
                             principal: Principal) -> Deferred[TFEWorkspace]:
        """Create the record of a new workspace and append a
        C{tfe_workspace_create} event.

        @return: a Deferred firing with the L{TFEWorkspace}; failing with
            L{kilolock.tfe.errors.WorkspaceExists} when the record or the
            state exists, L{kilolock.tfe.errors.InvalidAttribute} with too
            many tags."""

    def tfe_add_tags(tenant: str, workspace_id: str, tags: Sequence[Tag],
                     principal: Principal) -> Deferred[TFEWorkspace]:
        """Merge C{tags} into the workspace's (L{kilolock.tfe.tags.merge_tags});
        append a C{tfe_tags_update} event when they changed.

        @return: a Deferred firing with the updated L{TFEWorkspace}; failing
            with L{kilolock.core.errors.NotFound} for an unknown id,
            L{kilolock.tfe.errors.InvalidAttribute} with too many tags."""

    def tfe_delete_workspace(tenant: str, workspace_id: str,
                             principal: Principal) -> Deferred[None]:
        """Forget the record and its pending versions and append a
        C{tfe_workspace_delete} event (the state is deleted by the state
        store first).  Deleting an unknown id does nothing.

        @return: a Deferred firing with None."""

    def tfe_create_pending_version(pending: PendingVersion) -> Deferred[None]:
        """Keep a pending version (and forget those whose grant expired
        longer than L{kilolock.tfe.grants.PENDING_RETENTION} ago).

        @return: a Deferred firing with None."""

    def tfe_pending_version(version_id: str) -> Deferred[PendingVersion | None]:
        """@return: a Deferred firing with the pending version, or None."""

    def tfe_claim_upload(version_id: str, grant_hash: str, part: str,
                         body_md5: str | None) -> Deferred[PendingVersion]:
        """Take C{part} (L{kilolock.tfe.model.STATE_PART} or
        C{JSON_PART}) of a pending version, if L{kilolock.tfe.grants.check_claim}
        allows it at the store's clock: the state part moves the version to
        C{uploading}, the JSON part marks it received.

        @return: a Deferred firing with the pending version as it was before
            the claim; failing with L{kilolock.core.errors.NotFound} or
            L{kilolock.core.errors.ChecksumMismatch} (nothing taken)."""

    def tfe_settle_upload(version_id: str, version: int | None,
                          reopen: bool = False) -> Deferred[None]:
        """End an upload claimed with C{tfe_claim_upload}: C{finalized} with
        the stored version's number, or C{discarded} (C{version} None); with
        C{reopen}, C{pending} again (nothing was stored because the database
        could not be reached: the same bytes may be PUT again).

        @return: a Deferred firing with None."""
