"""docs/ci-identity.md works as written: its policies load (the TOML files
as the static mode's --oidc-config, the JSON one through the control API's
validator), its backend blocks send the token as documented, and its
diagnosis table names every reason a CI token can be refused for."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kilolock.auth.oidc.refusal import Reason
from kilolock.auth.oidc.settings import static_policy
from kilolock.auth.oidc.validation import validate_policy
from tests.support.paths import DOCS

DOC = DOCS / "ci-identity.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.DOTALL)


@pytest.mark.parametrize("index", range(len(blocks("toml"))))
def test_each_toml_policy_loads_as_the_static_mode_file(tmp_path: Path, index: int) -> None:
    """Every TOML block is a valid policy file for --oidc-config."""
    path = tmp_path / "oidc.toml"
    path.write_text(blocks("toml")[index])
    policy = static_policy(str(path))
    assert policy.rules and policy.issuers


def test_the_hosted_json_policy_passes_the_control_api_validator() -> None:
    [document] = [json.loads(block) for block in blocks("json") if '"rules"' in block]
    policy = validate_policy(document, allow_local_files=False)
    assert {rule.grant.environment for rule in policy.rules} >= {"production",
                                                                 "{environment}"}


def test_the_backend_blocks_name_the_oidc_username() -> None:
    hcl = blocks("hcl")
    assert len(hcl) == 2 and all('username       = "oidc"' in block for block in hcl)


def test_every_refusal_reason_is_in_the_diagnosis_table() -> None:
    """Each reason the core can refuse a token for, and each hosted-mode
    login refusal, appears as the access log writes it."""
    text = DOC.read_text()
    diagnosis = text[text.index("## Diagnosis"):text.index("## Security reasoning")]
    for reason in Reason:
        assert f"oidc_{reason.value}" in diagnosis, reason
    for reason in ("oidc_no_workspace", "oidc_unknown_workspace", "wrong_basic_username",
                   "missing_credentials", "unknown_token", "revoked_token", "read_only"):
        assert reason in diagnosis
