"""C{ISessionStore}: the dashboard's signed-in browser sessions."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from zope.interface import Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from kilolock.core.model import (
        UiSession,
    )


class ISessionStore(Interface):
    """The dashboard's browser sessions, kept where the states are, so every
    Kilolock process on one database knows them.  Both stores provide it."""

    def create_session(session: UiSession) -> Deferred[None]:
        """Keep C{session}; sessions expired by its C{created_at} are dropped
        in the same transaction.  @return: a Deferred firing with None."""

    def find_session(id_hash: str, now: datetime) -> Deferred[UiSession | None]:
        """@return: a Deferred firing with the session whose cookie secret
        has SHA-256 C{id_hash}, or None when there is none or it expired by
        C{now}."""

    def delete_session(id_hash: str) -> Deferred[None]:
        """Forget a session (sign-out); nothing when there is none.
        @return: a Deferred firing with None."""
