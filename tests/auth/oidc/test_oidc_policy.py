"""The OIDC policy: one validator for files and the control API, precise
errors, the claim-pattern language, and the policy file loader."""

from __future__ import annotations

import contextlib
import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilolock.auth.oidc.patterns import (
    TemplateError,
    is_wildcard_only,
    matches,
    placeholders,
    render,
)
from kilolock.auth.oidc.policy import OidcPolicy
from kilolock.auth.oidc.policy_file import load_policy_file
from kilolock.auth.oidc.validation import PolicyError, validate_policy
from kilolock.core.model import Access
from tests.support.oidc_issuer import AUDIENCE, LocalIssuer, github_policy_document
from tests.support.paths import DOCS
from tests.support.tls_material import make_certificates

DOCS = DOCS / "ci-identity.md"
URL = "https://token.actions.githubusercontent.com"


def problems_of(document: object, **kwargs: Any) -> tuple[str, ...]:
    with pytest.raises(PolicyError) as caught:
        validate_policy(document, **kwargs)
    return caught.value.problems


def one_problem(document: object, **kwargs: Any) -> str:
    problems = problems_of(document, **kwargs)
    assert len(problems) == 1, problems
    return problems[0]


def base() -> dict[str, Any]:
    return github_policy_document(URL)


def test_the_github_example_validates_and_round_trips() -> None:
    """The documented policy validates, and its document form validates
    back to the same policy."""
    policy = validate_policy(base())
    assert [rule.name for rule in policy.rules] == [
        "main-writes-prod", "prs-read", "environments-write-their-own"]
    assert policy.rules[0].grant.access is Access.WRITE
    assert validate_policy(json.loads(json.dumps(policy.to_document()))) == policy


def test_an_unconditioned_write_rule_is_refused() -> None:
    """A rule granting write without any claim condition is refused."""
    document = base()
    document["rules"][0]["claims"] = {}
    assert one_problem(document) == (
        "rules[0] 'main-writes-prod'.claims: grants write without any claim condition:"
        " it would admit every token of its issuer")
    del document["rules"][0]["claims"]
    assert "without any claim condition" in one_problem(document)


def test_a_rule_without_an_identity_condition_is_refused() -> None:
    """ref = main alone would admit every repository on GitHub."""
    document = base()
    document["rules"][0]["claims"] = {"ref": "refs/heads/main"}
    assert "needs a condition on who the pipeline is" in one_problem(document)


@pytest.mark.parametrize("pattern", ["*", "**", "?*", ["74", "**"]])
def test_a_wildcard_only_identity_condition_constrains_nothing(pattern: Any) -> None:
    """repository_id = "*" (or any pattern without a literal) is no condition."""
    document = base()
    document["rules"][0]["claims"] = {"repository_id": pattern, "ref": "refs/heads/main"}
    assert "needs a condition on who the pipeline is" in one_problem(document)


@pytest.mark.parametrize(("where", "path"), [
    ((), "policy"), (("issuers", 0), "issuers[0]"), (("rules", 1), "rules[1] 'prs-read'"),
    (("rules", 1, "grant"), "rules[1] 'prs-read'.grant")])
def test_unknown_keys_are_refused(where: tuple[Any, ...], path: str) -> None:
    """An unknown key at any level is refused, naming the known ones."""
    document = base()
    table: Any = document
    for step in where:
        table = table[step]
    table["audiance"] = "typo"
    problem = one_problem(document)
    assert problem.startswith(f"{path}: unknown key 'audiance' (known: ")


@pytest.mark.parametrize(("url", "allowed"), [
    ("https://gitlab.example.com", True), ("https://ghes.example.com/_services/token", True),
    ("http://127.0.0.1:8900", True), ("http://localhost:8900", True), ("http://[::1]:1", True),
    ("http://gitlab.example.com", False), ("ftp://x.example", False), ("https://", False),
    ("https://a.example/?q=1", False), ("https://a.example/#f", False),
    ("https://user:pw@a.example", False), ("https://a.example:99999", False),
    ("gitlab.example.com", False), ("https://a .example", False)])
def test_issuer_urls(url: str, allowed: bool) -> None:
    """https, or http on loopback only; no query, fragment or user info."""
    document = base()
    document["issuers"][0]["url"] = url
    if allowed:
        validate_policy(document)
    else:
        assert one_problem(document).startswith("issuers[0].url: ")


@pytest.mark.parametrize("audience", [None, "", "  ", "https://github.com/octo-org",
                                      "sts.amazonaws.com", "api://AzureADTokenExchange", 7])
def test_the_audience_is_explicit_and_kilolocks_own(audience: Any) -> None:
    """No audience, an empty one, or a platform default is refused."""
    document = base()
    document["issuers"][0]["audience"] = audience
    if audience is None:
        del document["issuers"][0]["audience"]
    assert one_problem(document).startswith("issuers[0].audience: ")


@pytest.mark.parametrize(("states", "message"), [
    (["env/{enviroment}/*"], "{enviroment}, which the rule does not condition on"),
    (["env/{exp}"], "not a claim a grant may use"),
    (["env/{environment"], "stray brace"),
    (["env/{a b}"], "not a claim name"),
    ([""], "is empty"),
    ([], "needs 1 to 50 patterns"),
    ("prod/*", None),
    (["{custom_claim}/*"], None),
])
def test_grant_placeholders_name_claims_the_rule_knows(states: Any, message: str | None
                                                       ) -> None:
    """A placeholder must name a claim the rule conditions on, or a known CI
    claim; never a registered one; braces must pair."""
    document = base()
    document["rules"][2]["claims"]["custom_claim"] = "yes"
    document["rules"][2]["grant"]["states"] = states
    if message is None:
        validate_policy(document)
    else:
        assert message in one_problem(document)


def test_workspace_and_environment_are_exact() -> None:
    """workspace and environment may be templated but not wildcarded."""
    document = base()
    document["rules"][0]["grant"]["environment"] = "prod*"
    assert one_problem(document) == ("rules[0] 'main-writes-prod'.grant.environment:"
                                     " must be exact (no * or ?)")
    document["rules"][0]["grant"]["environment"] = "{environment}"
    assert validate_policy(document).rules[0].grant.environment == "{environment}"


def test_local_files_only_from_the_operators_file() -> None:
    """jwks_file and ca_file are refused unless local files are allowed
    (the control API never lets a tenant name a server path)."""
    document = base()
    document["issuers"][0]["jwks_file"] = "/etc/passwd"
    assert "local files are only read from the operator's" in one_problem(document)
    assert validate_policy(document, allow_local_files=True).issuers[0].jwks_file == "/etc/passwd"


def test_every_problem_is_listed() -> None:
    """Several problems are reported together, each with its place."""
    document = base()
    document["version"] = 2
    document["issuers"][0]["leeway_seconds"] = 61
    document["rules"][1]["grant"]["access"] = "admin"
    document["rules"][2]["issuer"] = "gitlab"
    document["rules"].append(copy.deepcopy(document["rules"][0]))
    assert problems_of(document) == (
        "policy.version: must be 1",
        "issuers[0].leeway_seconds: must be an integer from 0 to 60",
        "rules[1] 'prs-read'.grant.access: must be one of outputs-only, read, write",
        "rules[2] 'environments-write-their-own'.issuer: names no issuer (known: github)",
        "rules: two entries have the name 'main-writes-prod'")


def test_claim_values_are_text() -> None:
    """Numbers and booleans in a condition are compared as the text CI
    platforms send (repository_id = 74 means "74"); floats and tables are
    refused; registered claims cannot be conditioned on."""
    document = base()
    document["rules"][0]["claims"].update(repository_id=74, ref_protected=True)
    condition = {each.claim: each.patterns for each in
                 validate_policy(document).rules[0].conditions}
    assert condition["repository_id"] == ("74",) and condition["ref_protected"] == ("true",)
    document["rules"][0]["claims"]["run_attempt"] = 1.5
    assert "must be a string" in one_problem(document)
    document["rules"][0]["claims"]["run_attempt"] = "1"
    document["rules"][0]["claims"]["aud"] = AUDIENCE
    assert "'aud' is checked by verification itself" in one_problem(document)


def test_a_local_jwks_needs_a_usable_key() -> None:
    """An inline JWKS without an RS256/ES256 key is refused at configuration."""
    document = base()
    document["issuers"][0]["jwks"] = {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}
    assert "has no usable key" in one_problem(document)


def test_the_policy_is_an_object() -> None:
    assert problems_of([]) == ("policy: must be a table/object",)
    assert problems_of({"issuers": {}}) == ("issuers: must be a list (an array of tables)",)
    assert validate_policy({}) == OidcPolicy()


# -- the policy file ------------------------------------------------------------

def toml_blocks() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", DOCS.read_text(), re.DOTALL)


def test_the_documented_toml_examples_load(tmp_path: Path) -> None:
    """Every TOML example of docs/ci-identity.md is a valid policy file."""
    blocks = toml_blocks()
    assert len(blocks) >= 2
    for number, block in enumerate(blocks):
        path = tmp_path / f"example-{number}.toml"
        path.write_text(block)
        policy = load_policy_file(path)
        assert policy.rules and all(rule.conditions for rule in policy.rules)


def test_a_json_file_is_read_as_json(tmp_path: Path) -> None:
    path = tmp_path / "oidc.json"
    path.write_text(json.dumps(base()))
    assert load_policy_file(path) == validate_policy(base())


def test_local_jwks_and_ca_files_are_read_at_load(tmp_path: Path) -> None:
    """jwks_file and ca_file are relative to the policy file and read (and
    checked) when it is loaded."""
    issuer = LocalIssuer()
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "jwks.json").write_text(json.dumps(issuer.jwks()))
    path = tmp_path / "oidc.toml"
    path.write_text(f'''
[[issuers]]
name = "gitlab"
url = "https://gitlab.internal.example"
audience = "{AUDIENCE}"
jwks_file = "keys/jwks.json"

[[rules]]
name = "infra"
issuer = "gitlab"
claims = {{ project_id = "20" }}
grant = {{ access = "read", states = ["**"] }}
''')
    policy = load_policy_file(path)
    assert policy.issuers[0].jwks is not None
    assert json.loads(policy.issuers[0].jwks) == issuer.jwks()
    assert policy.issuers[0].to_document()["jwks_file"] == "keys/jwks.json"
    (tmp_path / "keys" / "jwks.json").write_text('{"keys": []}')
    with pytest.raises(PolicyError, match=r"issuers\[0\]\.jwks_file: .*jwks.json has no usable"):
        load_policy_file(path)
    (tmp_path / "keys" / "jwks.json").unlink()
    with pytest.raises(PolicyError, match=r"issuers\[0\]\.jwks_file: cannot read .*jwks.json"):
        load_policy_file(path)


def test_a_ca_file_must_hold_certificates(tmp_path: Path) -> None:
    """ca_file is read at load; a file without a PEM certificate is refused."""
    cert = make_certificates(tmp_path).ca_path
    document = base()
    document["issuers"][0]["ca_file"] = "ca.pem"
    path = tmp_path / "oidc.json"
    path.write_text(json.dumps(document))
    assert "BEGIN CERTIFICATE" in (load_policy_file(path).issuers[0].ca_pem or "")
    cert.write_text("not a certificate")
    with pytest.raises(PolicyError, match="holds no valid PEM certificate"):
        load_policy_file(path)


def test_a_syntax_error_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "oidc.toml"
    path.write_text("[[issuers]]\nname = \n")
    with pytest.raises(PolicyError, match=r"does not parse \(.*line 2"):
        load_policy_file(path)


# -- properties -----------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_document_gives_a_policy_or_a_policy_error(document: Any) -> None:
    """Arbitrary JSON never crashes the validator."""
    try:
        validate_policy(document)
    except PolicyError as error:
        assert error.problems and all(": " in problem for problem in error.problems)


KEYS = ["version", "issuers", "rules", "name", "url", "audience", "claims", "grant", "access",
        "states", "workspace", "environment", "jwks", "jwks_url", "ca_pem", "leeway_seconds",
        "repository_id", "ref", "sub"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from([*KEYS, 0, 1, 2]), min_size=1, max_size=4),
                          json_values), max_size=3))
def test_a_mutated_valid_document_gives_a_policy_or_a_policy_error(
        mutations: list[tuple[list[Any], Any]]) -> None:
    """Replacing parts of a valid document by anything never crashes the
    validator, and whatever it accepts round-trips."""
    document: Any = base()
    for path, value in mutations:
        table = document
        for step in path[:-1]:
            try:
                table = table[step]
            except (KeyError, IndexError, TypeError):
                break
        else:
            with contextlib.suppress(IndexError, TypeError):
                table[path[-1]] = value
    try:
        policy = validate_policy(document)
    except PolicyError:
        return
    assert validate_policy(policy.to_document()) == policy


def reference_match(pattern: str, value: str) -> bool:
    """A slow, obviously right matcher for the pattern language."""
    if not pattern:
        return not value
    if pattern.startswith("**"):
        return any(reference_match(pattern[2:], value[cut:]) for cut in range(len(value) + 1))
    if pattern[0] == "*":
        return any(reference_match(pattern[1:], value[cut:]) for cut in range(len(value) + 1)
                   if "/" not in value[:cut])
    if not value:
        return False
    if pattern[0] == "?":
        return value[0] != "/" and reference_match(pattern[1:], value[1:])
    return pattern[0] == value[0] and reference_match(pattern[1:], value[1:])


small = st.text(alphabet="ab/*?.\n", max_size=8)


@settings(max_examples=500, deadline=None)
@given(small, st.text(alphabet="ab/*?.\n", max_size=10))
def test_patterns_agree_with_the_reference(pattern: str, value: str) -> None:
    """matches() is the pattern language: * within a segment, ** across,
    ? one character but /, everything else literal, the whole value."""
    assert matches(pattern, value) is reference_match(pattern, value)


@given(st.text(), st.text())
def test_patterns_are_total(pattern: str, value: str) -> None:
    """Any pattern and value: a boolean; a literal pattern matches only itself."""
    result = matches(pattern, value)
    if not set(pattern) & set("*?"):
        assert result is (pattern == value)
    assert matches("**", value)
    assert is_wildcard_only(pattern) is (bool(pattern) and set(pattern) <= {"*", "?"})


@given(st.text(max_size=40), st.dictionaries(st.text(max_size=10), st.text(max_size=12)))
def test_templates_render_safely_or_refuse(template: str, values: dict[str, str]) -> None:
    """A template either has a clear error, or renders with claim values
    that add no / , no wildcard and no dot-segment."""
    try:
        names = placeholders(template)
    except ValueError:
        return
    try:
        rendered = render(template, values)
    except TemplateError as error:
        assert error.claim in names
        return
    literal = re.sub(r"\{[^{}]*\}", "", template)
    for char in "/*?":
        assert rendered.count(char) == literal.count(char)
    for name in names:
        assert values[name] not in ("", ".", "..")
