"""The one validator of OIDC policies, for files and for the control API.

L{validate_policy} takes the parsed document (TOML or JSON, the same shape)
and either returns an L{OidcPolicy} or raises L{PolicyError} listing every
problem with its place (C{rules[1] "prs-read".grant.access: ...}).  The rules
it enforces:

- unknown keys are refused at every level;
- an issuer URL is C{https} (C{http} only on a loopback host, for tests),
  with no query, fragment or user info; so is a C{jwks_url};
- an audience is given explicitly and is not a platform's default audience
  (a token minted for another service must not be accepted here);
- every rule has claim conditions, and at least one constrains an identity
  claim (owner, repository, project, workflow or C{sub}) with a literal part:
  a rule granting anything without one is refused, because on a shared issuer
  it would admit every pipeline on the platform;
- a grant's placeholders name claims the rule conditions on or known CI
  claims, and C{workspace}/C{environment} are exact (no wildcards);
- local files (C{jwks_file}, C{ca_file}) only where the caller allows them:
  the operator's file, never a tenant's request to the control API.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

from cryptography import x509

from kilolock.auth.oidc.claims import IDENTITY_CLAIMS, KNOWN_CLAIMS, REGISTERED, claim_text
from kilolock.auth.oidc.jwks import JWKSError, parse_jwks
from kilolock.auth.oidc.patterns import (
    CLAIM_NAME,
    WILDCARDS,
    is_wildcard_only,
    matches,
    placeholders,
)
from kilolock.auth.oidc.policy import Condition, Grant, OidcPolicy, Rule, TrustedIssuer
from kilolock.core.model import Access

NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
MAX_ISSUERS = 20
MAX_RULES = 200
MAX_PATTERNS = 50
MAX_TEXT = 1024
MAX_PEM = 256 * 1024
MAX_LEEWAY = 60
LIFETIME_RANGE = (60, 7 * 86400)
#: Audiences that platforms put into tokens by default or that other
#: services require: accepting them would accept tokens minted for others.
FOREIGN_AUDIENCES = ("https://github.com/*", "sts.amazonaws.com", "api://AzureADTokenExchange",
                     "https://iam.googleapis.com/**", "sigstore")

ISSUER_KEYS = ("name", "url", "audience", "jwks_url", "jwks_file", "jwks", "ca_file",
               "ca_pem", "leeway_seconds", "max_token_lifetime_seconds")
RULE_KEYS = ("name", "issuer", "claims", "grant")
GRANT_KEYS = ("access", "states", "workspace", "environment")
TOP_KEYS = ("version", "issuers", "rules")

T = TypeVar("T")


class PolicyError(ValueError):
    """A policy document breaks one or more rules.

    @ivar problems: one message per problem, each starting with its place."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid OIDC policy: " + "; ".join(problems))
        self.problems = tuple(problems)


class _Problems:
    def __init__(self) -> None:
        self.found: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.found.append(f"{where}: {message}")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_problem(url: str, *, allow_query: bool) -> str | None:
    """What is wrong with an issuer or JWKS URL, or None."""
    if len(url) > MAX_TEXT or any(char.isspace() for char in url):
        return "is not a URL (whitespace, or too long)"
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return "is not a URL"
    if not host:
        return "needs a host (https://host/...)"
    if parts.username is not None or parts.password is not None:
        return "must not hold user info"
    if parts.fragment or (parts.query and not allow_query):
        return "must not have a query or fragment"
    if parts.scheme == "https":
        return None
    if parts.scheme == "http" and _is_loopback(host):
        return None
    return "must be https (http only for a loopback host, for tests)"


def _foreign_audience(audience: str) -> bool:
    return any(matches(pattern, audience) for pattern in FOREIGN_AUDIENCES)


class _Reader:
    """Reads one table: typed fields, unknown keys reported."""

    def __init__(self, problems: _Problems, where: str, table: object,
                 known: tuple[str, ...]) -> None:
        self.problems = problems
        self.where = where
        self.table: Mapping[str, Any] = table if isinstance(table, Mapping) else {}
        if not isinstance(table, Mapping):
            problems.add(where, "must be a table/object")
        for key in self.table:
            if key not in known:
                problems.add(where, f"unknown key {key!r} (known: {', '.join(known)})")

    def text(self, key: str, *, required: bool = False, limit: int = MAX_TEXT) -> str | None:
        value = self.table.get(key)
        if value is None:
            if required:
                self.problems.add(f"{self.where}.{key}", "is required")
            return None
        if not isinstance(value, str) or not value.strip():
            self.problems.add(f"{self.where}.{key}", "must be a non-empty string")
            return None
        if len(value) > limit:
            self.problems.add(f"{self.where}.{key}", f"is longer than {limit} characters")
            return None
        return value

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        value = self.table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.problems.add(f"{self.where}.{key}", f"must be an integer from {low} to {high}")
            return default
        return value

    def checked(self, key: str, check: Callable[[str], str | None], **kw: Any) -> str | None:
        value = self.text(key, **kw)
        if value is not None and (problem := check(value)) is not None:
            self.problems.add(f"{self.where}.{key}", problem)
            return None
        return value


def _local_path(reader: _Reader, key: str, allow: bool) -> str | None:
    if key in reader.table and not allow:
        reader.problems.add(f"{reader.where}.{key}", "local files are only read from the"
                            " operator's --oidc-config file (give the content inline)")
        return None
    return reader.text(key)


def pem_problem(pem: str) -> str | None:
    try:
        certificates = x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        return "holds no valid PEM certificate"
    return None if certificates else "holds no PEM certificate"


def _issuer(problems: _Problems, where: str, table: object,
            allow_local_files: bool) -> TrustedIssuer | None:
    reader = _Reader(problems, where, table, ISSUER_KEYS)
    name = reader.checked("name", lambda v: None if NAME.fullmatch(v) else
                          "must be lower-case letters, digits, _ . - (at most 63)", required=True)
    url = reader.checked("url", lambda v: url_problem(v, allow_query=False), required=True)
    audience = reader.checked("audience", lambda v: "is a platform's default or another"
                              " service's audience: choose one for Kilolock alone"
                              if _foreign_audience(v) else None, required=True)
    jwks_url = reader.checked("jwks_url", lambda v: url_problem(v, allow_query=True))
    jwks_file = _local_path(reader, "jwks_file", allow_local_files)
    ca_file = _local_path(reader, "ca_file", allow_local_files)
    ca_pem = reader.checked("ca_pem", pem_problem, limit=MAX_PEM)
    jwks = None
    if "jwks" in reader.table:
        try:
            parse_jwks(reader.table["jwks"])
            jwks = json.dumps(reader.table["jwks"], sort_keys=True, separators=(",", ":"))
        except JWKSError as error:
            problems.add(f"{where}.jwks", str(error))
    for first, second in (("jwks", "jwks_file"), ("ca_pem", "ca_file"), ("jwks_url", "jwks"),
                          ("jwks_url", "jwks_file")):
        if first in reader.table and second in reader.table:
            problems.add(where, f"give {first} or {second}, not both")
    if ("jwks" in reader.table or "jwks_file" in reader.table) and (
            "ca_pem" in reader.table or "ca_file" in reader.table):
        problems.add(where, "a CA is only used to fetch keys: local keys need none")
    leeway = reader.integer("leeway_seconds", 30, 0, MAX_LEEWAY)
    lifetime = reader.integer("max_token_lifetime_seconds", 86400, *LIFETIME_RANGE)
    if name is None or url is None or audience is None:
        return None
    return TrustedIssuer(name=name, url=url, audience=audience, jwks_url=jwks_url,
                         jwks_file=jwks_file, jwks=jwks, ca_file=ca_file, ca_pem=ca_pem,
                         leeway=leeway, max_lifetime=lifetime)


def _patterns(problems: _Problems, where: str, value: object) -> tuple[str, ...] | None:
    items = value if isinstance(value, list) else [value]
    if not items or len(items) > MAX_PATTERNS:
        problems.add(where, f"needs 1 to {MAX_PATTERNS} patterns")
        return None
    found: list[str] = []
    for item in items:
        text = None if isinstance(item, float) else claim_text(item)
        if text is None or len(text) > MAX_TEXT:
            problems.add(where, "must be a string (or a list of strings) of at most"
                         f" {MAX_TEXT} characters")
            return None
        found.append(text)
    return tuple(found)


def _conditions(problems: _Problems, where: str, table: object) -> tuple[Condition, ...]:
    if not isinstance(table, Mapping):
        problems.add(where, "must be a table/object of claim conditions")
        return ()
    conditions: list[Condition] = []
    for claim, value in table.items():
        place = f"{where}.{claim}"
        if not isinstance(claim, str) or not CLAIM_NAME.fullmatch(claim):
            problems.add(place, "is not a claim name")
        elif claim in REGISTERED:
            problems.add(place, f"{claim!r} is checked by verification itself, not by rules")
        elif (patterns := _patterns(problems, place, value)) is not None:
            conditions.append(Condition(claim, patterns))
    return tuple(conditions)


def _identity_problem(conditions: tuple[Condition, ...], access: Access | None) -> str | None:
    if not conditions:
        what = "grants write" if access is Access.WRITE else "grants access"
        return (f"{what} without any claim condition: it would admit every token of"
                " its issuer")
    if not any(condition.claim in IDENTITY_CLAIMS and not any(
            is_wildcard_only(pattern) for pattern in condition.patterns)
               for condition in conditions):
        return ("needs a condition on who the pipeline is, with a literal part (one of "
                f"{', '.join(sorted(IDENTITY_CLAIMS))}); prefer immutable ids such as"
                " repository_id or project_id")
    return None


def _template_problem(template: str, conditioned: set[str], exact: bool) -> str | None:
    try:
        names = placeholders(template)
    except ValueError as error:
        return str(error)
    if exact and WILDCARDS.intersection(template):
        return "must be exact (no * or ?)"
    for name in names:
        if name in REGISTERED:
            return f"has the placeholder {{{name}}}: not a claim a grant may use"
        if name not in conditioned and name not in KNOWN_CLAIMS:
            return (f"has the placeholder {{{name}}}, which the rule does not condition on"
                    " and which is no known CI claim")
    return None


def _grant(problems: _Problems, where: str, table: object,
           conditioned: set[str]) -> Grant | None:
    reader = _Reader(problems, where, table, GRANT_KEYS)
    access_text = reader.text("access", required=True)
    access = None
    if access_text is not None:
        try:
            access = Access(access_text)
        except ValueError:
            problems.add(f"{where}.access", "must be one of "
                         + ", ".join(each.value for each in Access))
    states = None
    if "states" not in reader.table:
        problems.add(f"{where}.states", "is required (state name patterns, e.g. \"prod/*\")")
    else:
        states = _patterns(problems, f"{where}.states", reader.table["states"])
        for state in states or ():
            problem = _template_problem(state, conditioned, False) if state else "is empty"
            if problem is not None:
                problems.add(f"{where}.states", f"{state!r} {problem}")
                states = None
    scopes = {}
    for key in ("workspace", "environment"):
        value = reader.text(key)
        if value is not None and (problem := _template_problem(value, conditioned, True)):
            problems.add(f"{where}.{key}", problem)
            value = None
        scopes[key] = value
    if access is None or states is None:
        return None
    return Grant(access=access, states=states, **scopes)


def _rule(problems: _Problems, where: str, table: object, issuers: list[str]) -> Rule | None:
    given = table.get("name") if isinstance(table, Mapping) else None
    if isinstance(given, str) and NAME.fullmatch(given):
        where = f"{where} {given!r}"
    reader = _Reader(problems, where, table, RULE_KEYS)
    name = reader.checked("name", lambda v: None if NAME.fullmatch(v) else
                          "must be lower-case letters, digits, _ . - (at most 63)", required=True)
    issuer = reader.text("issuer", required=True)
    if issuer is not None and issuer not in issuers:
        problems.add(f"{where}.issuer", f"names no issuer (known: {', '.join(issuers) or 'none'})")
    conditions = _conditions(problems, f"{where}.claims", reader.table.get("claims", {}))
    grant = _grant(problems, f"{where}.grant", reader.table.get("grant"),
                   {each.claim for each in conditions})
    access = grant.access if grant else None
    if (problem := _identity_problem(conditions, access)) is not None:
        problems.add(f"{where}.claims", problem)
        return None
    if name is None or issuer is None or grant is None:
        return None
    return Rule(name=name, issuer=issuer, conditions=conditions, grant=grant)


def _unique(problems: _Problems, where: str, items: list[T], key: Callable[[T], str],
            what: str) -> None:
    seen: set[str] = set()
    for item in items:
        if key(item) in seen:
            problems.add(where, f"two entries have the {what} {key(item)!r}")
        seen.add(key(item))


def _list(problems: _Problems, where: str, value: object, limit: int) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.add(where, "must be a list (an array of tables)")
        return []
    if len(value) > limit:
        problems.add(where, f"has {len(value)} entries (at most {limit})")
        return []
    return value


def validate_policy(document: object, *, allow_local_files: bool = False) -> OidcPolicy:
    """The policy a document describes.

    @param allow_local_files: accept C{jwks_file} and C{ca_file} (paths on
        the server: only for the operator's own file; the paths are kept,
        not read: see L{kilolock.auth.oidc.policy_file.load_policy_file}).
    @raise PolicyError: listing every problem found."""
    problems = _Problems()
    top = _Reader(problems, "policy", document, TOP_KEYS)
    version = top.table.get("version", 1)
    if version != 1 or isinstance(version, bool):
        problems.add("policy.version", "must be 1")
    tables = _list(problems, "issuers", top.table.get("issuers"), MAX_ISSUERS)
    issuers = [issuer for index, table in enumerate(tables)
               if (issuer := _issuer(problems, f"issuers[{index}]", table, allow_local_files))]
    _unique(problems, "issuers", issuers, lambda issuer: issuer.name, "name")
    _unique(problems, "issuers", issuers, lambda issuer: issuer.url, "url")
    # Rules may name an issuer whose entry has problems of its own: those
    # are reported once, at the issuer.
    declared = [table["name"] for table in tables
                if isinstance(table, Mapping) and isinstance(table.get("name"), str)]
    rules = [rule for index, table in enumerate(
        _list(problems, "rules", top.table.get("rules"), MAX_RULES))
        if (rule := _rule(problems, f"rules[{index}]", table, declared))]
    _unique(problems, "rules", rules, lambda rule: rule.name, "name")
    if problems.found:
        raise PolicyError(problems.found)
    return OidcPolicy(issuers=tuple(issuers), rules=tuple(rules))
