"""Claim names and values of CI tokens, and what the audit trail keeps.

The claims are those GitHub Actions and GitLab CI document for their ID
tokens; docs/ci-identity.md lists the ones the examples use.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Claims checked by verification itself: rules cannot condition on them.
REGISTERED = frozenset({"iss", "aud", "exp", "nbf", "iat", "jti"})

GITHUB_CLAIMS = frozenset({
    "sub", "actor", "actor_id", "base_ref", "check_run_id", "enterprise", "enterprise_id",
    "environment", "event_name", "head_ref", "job_workflow_ref", "job_workflow_sha", "ref",
    "ref_protected", "ref_type", "repository", "repository_id", "repository_owner",
    "repository_owner_id", "repository_visibility", "run_attempt", "run_id", "run_number",
    "runner_environment", "sha", "workflow", "workflow_ref", "workflow_sha",
})
GITLAB_CLAIMS = frozenset({
    "sub", "namespace_id", "namespace_path", "project_id", "project_path", "user_id",
    "user_login", "user_email", "user_access_level", "pipeline_id", "pipeline_source",
    "job_id", "ref", "ref_type", "ref_path", "ref_protected", "environment",
    "environment_protected", "deployment_tier", "environment_action", "runner_id",
    "runner_environment", "sha", "project_visibility", "ci_config_ref_uri", "ci_config_sha",
    "job_project_id", "job_project_path", "job_namespace_id", "job_namespace_path",
})
#: Claims a template may use without the rule conditioning on them.
KNOWN_CLAIMS = GITHUB_CLAIMS | GITLAB_CLAIMS

#: Claims that say *who* the pipeline is (an owner, a repository, a project,
#: a workflow).  Every rule must constrain one of them: on a shared issuer
#: such as GitHub's, a rule on C{ref} alone would admit every repository on
#: the platform.
IDENTITY_CLAIMS = frozenset({
    "sub", "repository", "repository_id", "repository_owner", "repository_owner_id",
    "job_workflow_ref", "workflow_ref", "enterprise", "enterprise_id",
    "project_id", "project_path", "namespace_id", "namespace_path", "ci_config_ref_uri",
    "job_project_id", "job_project_path", "job_namespace_id", "job_namespace_path",
})

#: What the audit trail records of an OIDC principal, in this order: the
#: first present claim of each entry's list gives its value.
AUDIT_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sub", ("sub",)),
    ("repository", ("repository", "project_path")),
    ("repository_id", ("repository_id", "project_id")),
    ("ref", ("ref",)),
    ("ref_type", ("ref_type",)),
    ("environment", ("environment",)),
    ("run_id", ("run_id", "pipeline_id")),
    ("run_attempt", ("run_attempt",)),
    ("job_id", ("job_id",)),
    ("sha", ("sha",)),
    ("workflow_ref", ("workflow_ref", "job_workflow_ref", "ci_config_ref_uri")),
    ("actor", ("actor", "user_login")),
    ("event", ("event_name", "pipeline_source")),
)
#: The longest audit value kept (longer ones are cut, with an ellipsis).
AUDIT_VALUE_LIMIT = 256


def claim_text(value: object) -> str | None:
    """A claim's value as the text rules compare: strings as they are,
    integers in decimal, booleans as C{true}/C{false}; anything else (lists,
    objects, null, fractions) has no text and matches no condition."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    return None


def claim_texts(claims: Mapping[str, object]) -> dict[str, str]:
    """Every claim that has a text (see L{claim_text}), by name."""
    texts: dict[str, str] = {}
    for name, value in claims.items():
        text = claim_text(value)
        if text is not None:
            texts[name] = text
    return texts


def _printable(text: str) -> str:
    cleaned = "".join(char if char.isprintable() else "?" for char in text)
    if len(cleaned) > AUDIT_VALUE_LIMIT:
        return cleaned[:AUDIT_VALUE_LIMIT - 1] + "…"
    return cleaned


def audit_detail(issuer_url: str, claims: Mapping[str, object]) -> dict[str, str]:
    """What the audit trail records of a verified token: the issuer, C{sub},
    the repository or project (path and id), ref, environment, run or
    pipeline id, job, commit SHA, workflow, actor and event, where present.

    Values are text, non-printable characters replaced and long ones cut:
    safe for a log line.  Never pass claims of an unverified token."""
    texts = claim_texts(claims)
    detail = {"issuer": _printable(issuer_url)}
    for field, sources in AUDIT_FIELDS:
        for source in sources:
            if source in texts:
                detail[field] = _printable(texts[source])
                break
    return detail


def principal_name(issuer_name: str, claims: Mapping[str, object]) -> str:
    """The principal's name in the audit trail: C{oidc:<issuer>:<sub>}."""
    subject = claim_text(claims.get("sub")) or "?"
    return f"oidc:{issuer_name}:{_printable(subject)}"
