"""The operator's OIDC policy file: C{--oidc-config} / C{KL_OIDC_CONFIG}.

TOML (read with the standard library's C{tomllib}) because the operator
writes this file by hand and should say next to each rule *why* it exists:
TOML has comments, JSON has none, and YAML would need a dependency and
coerces values (C{on}, C{no}, C{0123}) that rules compare as text.  A C{.json}
file is read as JSON: the same document shape as the control API's.

Paths in C{jwks_file} and C{ca_file} are relative to the policy file's
directory.  Both are read, and checked, when the file is loaded: a missing
file or a JWKS without a usable key stops the server at start, not at the
first CI job.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from attrs import evolve

from kilolock.auth.oidc.jwks import JWKSError, parse_jwks_text
from kilolock.auth.oidc.policy import OidcPolicy, TrustedIssuer
from kilolock.auth.oidc.validation import MAX_PEM, PolicyError, pem_problem, validate_policy

#: The largest policy file read.
MAX_FILE = 4 * 1024 * 1024


def _read(path: Path, what: str, limit: int) -> bytes:
    try:
        with path.open("rb") as stream:
            content = stream.read(limit + 1)
    except OSError as error:
        raise PolicyError([f"{what}: cannot read {path}: {error.strerror or error}"]) from None
    if len(content) > limit:
        raise PolicyError([f"{what}: {path} is larger than {limit} bytes"])
    return content


def parse_policy_text(content: bytes, suffix: str) -> object:
    """The document in a policy file's content (JSON for C{.json}, else TOML).

    @raise PolicyError: the content does not parse."""
    try:
        if suffix == ".json":
            return json.loads(content)
        return tomllib.loads(content.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        # TOMLDecodeError and JSONDecodeError name a line and column, never content.
        raise PolicyError([f"policy: does not parse ({error})"]) from None


def _with_local_files(issuer: TrustedIssuer, base: Path, where: str) -> TrustedIssuer:
    if issuer.jwks_file is not None:
        path = base / issuer.jwks_file
        content = _read(path, f"{where}.jwks_file", MAX_FILE)
        try:
            parse_jwks_text(content)
        except JWKSError as error:
            raise PolicyError([f"{where}.jwks_file: {path} {error}"]) from None
        document = json.loads(content)
        issuer = evolve(issuer, jwks=json.dumps(document, sort_keys=True, separators=(",", ":")))
    if issuer.ca_file is not None:
        path = base / issuer.ca_file
        pem = _read(path, f"{where}.ca_file", MAX_PEM).decode("ascii", "replace")
        if (problem := pem_problem(pem)) is not None:
            raise PolicyError([f"{where}.ca_file: {path} {problem}"])
        issuer = evolve(issuer, ca_pem=pem)
    return issuer


def load_policy_file(path: str | Path) -> OidcPolicy:
    """The policy in the file at C{path}, with its local JWKS and CA files
    read (kept inline in the returned issuers, paths kept for display).

    Blocking file reads: call it at start-up, before the reactor runs.

    @raise PolicyError: the file is unreadable, does not parse, breaks a
        rule of L{validate_policy}, or names an unusable local file."""
    path = Path(path)
    document = parse_policy_text(_read(path, "policy", MAX_FILE), path.suffix.lower())
    policy = validate_policy(document, allow_local_files=True)
    base = path.parent
    issuers = tuple(_with_local_files(issuer, base, f"issuers[{index}]")
                    for index, issuer in enumerate(policy.issuers))
    return evolve(policy, issuers=issuers)
