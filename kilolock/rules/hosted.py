"""Hosted mode (C{KL_AUTH_MODE=database}): public ids, token secrets, naming
rules, what a deletion requires and the backend block a tenant pastes.  Pure
functions, shared by both stores and the control API.

Public ids are a prefix and 12 random lowercase hex digits (48 bits):
C{tn_} tenants, C{ws_} workspaces, C{env_} environments, C{tok_} tokens.
They are plain ASCII path segments, never percent-encoded (see docs/hosting.md).

A token secret is C{kl_} and 43 URL-safe characters (32 random bytes).  Only
the SHA-256 of the whole secret (prefix included) is stored; the secret is
shown once, when the token is created.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from datetime import datetime

from attrs import field, frozen

from kilolock.core.errors import InvalidField, NotEmpty
from kilolock.core.text import (
    check_text,
)


@frozen
class Tenant:
    """A customer of a hosted Kilolock.  C{id} (C{tn_...}) never changes and
    keys its states and audit chain; C{slug} is unique among live tenants and
    freed when the tenant is deleted (its row and events are kept)."""

    id: str
    slug: str
    name: str
    created_at: datetime
    deleted_at: datetime | None = None


@frozen
class Workspace:
    id: str  # ws_ + 12 hex
    tenant_id: str
    name: str
    created_at: datetime


@frozen
class Environment:
    id: str  # env_ + 12 hex: the env_public_id of state paths
    workspace_id: str
    tenant_id: str
    name: str
    created_at: datetime


@frozen
class ApiToken:
    """A tenant's token, without its secret (only its SHA-256 is stored)."""

    id: str  # tok_ + 12 hex
    tenant_id: str
    name: str
    workspace_id: str
    env_public_id: str
    scope: str  # "write" | "read" | "outputs" | "admin"
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None


@frozen
class IssuedToken:
    """A token just created: the only time its secret exists outside the client."""

    token: ApiToken
    secret: str = field(repr=lambda _: "<secret>")


@frozen
class TenantDeletion:
    """What deleting a tenant did."""

    tenant: Tenant
    deleted_states: tuple[str, ...]
    revoked_tokens: tuple[str, ...]


TENANT_PREFIX = "tn_"
WORKSPACE_PREFIX = "ws_"
ENVIRONMENT_PREFIX = "env_"
TOKEN_ID_PREFIX = "tok_"  # noqa: S105 - a prefix, not a secret
SECRET_PREFIX = "kl_"  # noqa: S105 - a prefix, not a secret

#: Token scopes: C{write} may do everything on the state lane, C{read} only
#: GET, C{outputs} only read TFE workspaces and their non-sensitive outputs;
#: C{admin} what C{write} may, and purge versions and set retention too.
WRITE_SCOPE = "write"
READ_SCOPE = "read"
OUTPUTS_SCOPE = "outputs"
ADMIN_SCOPE = "admin"
SCOPES = (WRITE_SCOPE, READ_SCOPE, OUTPUTS_SCOPE, ADMIN_SCOPE)

#: The name of the workspace and the environment every tenant starts with
#: (and of the environment every new workspace starts with).
DEFAULT_NAME = "default"

#: Seconds between two recordings of a token's C{last_used_at}: a token used
#: all the time costs one write a minute, not one per request.
LAST_USED_INTERVAL = 60.0

#: The longest token secret worth hashing (a real one is 46 characters).
MAX_SECRET_LENGTH = 128

_ID_DIGITS = 12
_PUBLIC_ID = re.compile(r"^(tn|ws|env|tok)_[0-9a-f]{12}$")
#: A tenant slug: a DNS label (lowercase letters, digits, inner hyphens).
_SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
#: Workspace, environment and token names.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_DISPLAY_NAME = 200


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(_ID_DIGITS // 2)


def new_tenant_id() -> str:
    return _new_id(TENANT_PREFIX)


def new_workspace_id() -> str:
    return _new_id(WORKSPACE_PREFIX)


def new_environment_id() -> str:
    return _new_id(ENVIRONMENT_PREFIX)


def new_token_id() -> str:
    return _new_id(TOKEN_ID_PREFIX)


def new_token_secret() -> str:
    """A fresh secret: C{kl_} and 256 random bits, URL-safe."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def token_hash(secret: bytes | str) -> str:
    """The SHA-256 (hex) of the whole secret: what the stores keep and look up."""
    raw = secret.encode() if isinstance(secret, str) else secret
    return hashlib.sha256(raw).hexdigest()


def looks_like_secret(secret: bytes) -> bool:
    """Whether C{secret} could be a token at all (checked before any lookup)."""
    return secret.startswith(SECRET_PREFIX.encode()) and len(secret) <= MAX_SECRET_LENGTH


def is_public_id(text: str, prefix: str) -> bool:
    """Whether C{text} has the shape of a public id with C{prefix} (e.g. C{ws_})."""
    return text.startswith(prefix) and _PUBLIC_ID.fullmatch(text) is not None


# -- naming rules (errors name the field) ----------------------------------------


def check_slug(value: object, field: str = "slug") -> str:
    if not isinstance(value, str) or not _SLUG.fullmatch(value):
        raise InvalidField(field, f"{field} must be 1-63 lowercase letters, digits and inner"
                                  " hyphens (a DNS label), e.g. 'acme'")
    return value


def check_name(value: object, field: str) -> str:
    """A workspace, environment or token name: 1-64 of C{A-Z a-z 0-9 . _ -},
    starting with a letter or digit, and not shaped like a public id (so a
    value can name either)."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or _PUBLIC_ID.fullmatch(value):
        raise InvalidField(field, f"{field} must be 1-64 letters, digits, '.', '_' or '-',"
                                  " starting with a letter or digit (and not shaped like"
                                  " an id such as ws_0123456789ab)")
    return value


def check_display_name(value: object, field: str = "name") -> str:
    """A display name: text a database can hold (L{check_text}: no NUL, no
    unpaired surrogate), not blank, at most L{MAX_DISPLAY_NAME} characters,
    without control characters."""
    if isinstance(value, str):
        check_text(value, f"the field {field!r}", field)
    if (not isinstance(value, str) or not value.strip() or len(value) > MAX_DISPLAY_NAME
            or any(ord(char) < 0x20 or ord(char) == 0x7F for char in value)):
        raise InvalidField(field, f"{field} must be a non-empty string of at most"
                                  f" {MAX_DISPLAY_NAME} characters without control characters")
    return value


def check_scope(value: object, field: str = "scope") -> str:
    if value not in SCOPES:
        raise InvalidField(field, f"{field} must be one of: {', '.join(SCOPES)}")
    assert isinstance(value, str)
    return value


# -- what a deletion requires -------------------------------------------------------


def check_tenant_deletable(state_count: int, locked_paths: Sequence[str],
                           delete_states: bool) -> None:
    """A tenant is deleted while it has no states, or with C{?states=delete}
    (C{delete_states}) while none of them is locked (C{locked_paths}).

    @raise NotEmpty: it has states and may not delete them, or some are locked.
    """
    if state_count and not delete_states:
        raise NotEmpty(f"the tenant has {state_count} state(s); delete them first, or"
                       " delete the tenant with its states (DELETE ...?states=delete;"
                       " kl tenants delete --delete-states)")
    if locked_paths:
        raise NotEmpty(f"{len(locked_paths)} state(s) of the tenant are locked (e.g."
                       f" {locked_paths[0]}); unlock them first")


def check_no_states_under(what: str, state_count: int) -> None:
    """A workspace or environment (C{what}) is deleted only while no state
    lives under it.

    @raise NotEmpty: C{state_count} states do.
    """
    if state_count:
        raise NotEmpty(f"the {what} has {state_count} state(s); delete them first")


# -- what a tenant pastes ---------------------------------------------------------


def state_address(base_url: str, workspace_id: str, env_public_id: str,
                  state_name: str) -> str:
    return f"{base_url.rstrip('/')}/v1/states/{workspace_id}/{env_public_id}/{state_name}"


def unlock_address(base_url: str, workspace_id: str, env_public_id: str,
                   state_name: str) -> str:
    return f"{base_url.rstrip('/')}/v1/state-unlock/{workspace_id}/{env_public_id}/{state_name}"


def backend_block(base_url: str, workspace_id: str, env_public_id: str,
                  state_name: str) -> str:
    """The hosted C{backend "http"} block: address and lock address on the
    state URL, C{unlock_address} on C{/v1/state-unlock/...} with POST,
    C{username} the workspace id.  The password is never in it: Terraform
    reads it from C{TF_HTTP_PASSWORD}."""
    address = state_address(base_url, workspace_id, env_public_id, state_name)
    unlock = unlock_address(base_url, workspace_id, env_public_id, state_name)
    return (
        "terraform {\n"
        '  backend "http" {\n'
        f'    address        = "{address}"\n'
        f'    lock_address   = "{address}"\n'
        f'    unlock_address = "{unlock}"\n'
        '    lock_method    = "LOCK"\n'
        '    unlock_method  = "POST"\n'
        f'    username       = "{workspace_id}"\n'
        "    # password: export TF_HTTP_PASSWORD=<token_secret>\n"
        "  }\n"
        "}\n"
    )


def remote_state_block(base_url: str, workspace_id: str, env_public_id: str,
                       state_name: str) -> str:
    """A C{terraform_remote_state} data source reading the state (what a
    C{read} token is for).  The password comes from C{TF_HTTP_PASSWORD}."""
    address = state_address(base_url, workspace_id, env_public_id, state_name)
    label = re.sub(r"[^A-Za-z0-9_-]", "_", state_name)
    if not label[:1].isalpha():
        label = "state_" + label
    return (
        f'data "terraform_remote_state" "{label}" {{\n'
        '  backend = "http"\n'
        "  config = {\n"
        f'    address  = "{address}"\n'
        f'    username = "{workspace_id}"\n'
        "    # password: export TF_HTTP_PASSWORD=<token_secret>\n"
        "  }\n"
        "}\n"
    )
