"""The server's CI-identity settings: which auth modes take CI tokens, and
where their policy comes from.

  - static mode with C{--oidc-config} / C{KL_OIDC_CONFIG}: the operator's
    policy file (TOML, or JSON), loaded and checked at start, before the
    reactor runs: a bad file stops the server with every problem listed;
  - database mode: always, each tenant with the policy set through the
    control API (a tenant without one accepts no CI token);
  - open mode: never (everyone is let in anyway).

C{--oidc-lock-grace} / C{KL_OIDC_LOCK_GRACE} is how long after its expiry a
CI token may still write, unlock and read back the state of the lock it
took (L{kilolock.auth.oidc.grace}).
"""

from __future__ import annotations

from twisted.python import usage

from kilolock.auth.oidc.checker import HostedPolicySource, IOidcPolicySource, StaticPolicySource
from kilolock.auth.oidc.policy import OidcPolicy
from kilolock.auth.oidc.policy_file import load_policy_file
from kilolock.auth.oidc.validation import PolicyError
from kilolock.store.interfaces.oidc import IOidcPolicyStore


def static_policy(path: str) -> OidcPolicy:
    """The policy in the file at C{path}, fit for the static mode.

    @raise usage.UsageError: listing every problem of the file."""
    try:
        policy = load_policy_file(path)
    except PolicyError as error:
        raise usage.UsageError(f"--oidc-config {path}: " + "; ".join(error.problems)) from None
    placed = [rule.name for rule in policy.rules
              if rule.grant.workspace is not None or rule.grant.environment is not None]
    if placed:
        raise usage.UsageError(
            f"--oidc-config {path}: rules {', '.join(placed)}: grant.workspace and"
            " grant.environment are for the database auth mode; in the static mode a"
            " grant names its states by their path")
    return policy


def check_oidc_settings(auth_mode: str, oidc_config: str | None) -> None:
    """@raise usage.UsageError: a policy file the auth mode cannot use."""
    if oidc_config is None:
        return
    if auth_mode != "static":
        raise usage.UsageError(
            "--oidc-config is for KL_AUTH_MODE=static; in the database mode each tenant's"
            " OIDC policy is set through the control API (kl oidc set)")
    static_policy(oidc_config)


def oidc_policy_source(auth_mode: str, oidc_config: str | None,
                       store: object) -> IOidcPolicySource | None:
    """Where CI tokens' policies come from in this mode (None: CI tokens
    are not accepted).  Reads the static mode's file: call it before the
    reactor runs."""
    if auth_mode == "database":
        return HostedPolicySource(IOidcPolicyStore(store))
    if auth_mode == "static" and oidc_config is not None:
        return StaticPolicySource(static_policy(oidc_config))
    return None
