
"""`kl oidc` against a hosted server (database mode): a tenant's OIDC
policy set from a TOML file (its local JWKS file sent inline), shown,
refused when invalid (every problem printed, nothing stored) and removed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kilolock.kl.exits import EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_USAGE
from tests.support.hosted_support import HostedServer
from tests.support.kl_runner import KlResult
from tests.support.oidc_issuer import LocalIssuer

POLICY = """\
version = 1

[[issuers]]
name = "gitlab"
url = "https://gitlab.example.com"
audience = "https://kilolock.example.com"
# On a closed network, the keys copied from GitLab:
jwks_file = "gitlab-jwks.json"

# Protected main of project 20 writes prod.
[[rules]]
name = "protected-main-writes"
issuer = "gitlab"
claims = { project_id = "20", ref = "main", ref_protected = "true" }
grant = { access = "write", workspace = "default", environment = "default", states = ["prod-*"] }
"""


@pytest.mark.parametrize("server_store", ["memory"], indirect=True)
def test_kl_oidc_set_show_delete(kl: Callable[..., KlResult], hosted: HostedServer,
                                 tmp_path: Path) -> None:
    kl("tenants", "create", "acme").check()
    issuer = LocalIssuer("https://gitlab.example.com")
    (tmp_path / "gitlab-jwks.json").write_text(json.dumps(issuer.jwks()))
    (tmp_path / "acme.toml").write_text(POLICY)
    shown = kl("oidc", "set", "acme", str(tmp_path / "acme.toml")).check().out
    assert shown.startswith("set the OIDC policy of tenant acme\n")
    assert "gitlab  https://gitlab.example.com  https://kilolock.example.com  inline" in shown
    assert ("protected-main-writes  gitlab  project_id=20, ref=main, ref_protected=true"
            "  write   default/default: prod-*") in shown
    stored = kl("--json", "oidc", "show", "acme").check().json()
    assert stored["policy"]["issuers"][0]["jwks"] == issuer.jwks()
    assert "jwks_file" not in stored["policy"]["issuers"][0]

    (tmp_path / "bad.toml").write_text(POLICY.replace(
        'claims = { project_id = "20", ref = "main", ref_protected = "true" }',
        'claims = { ref = "main" }').replace('audience = "https://kilolock.example.com"',
                                             'audience = "sts.amazonaws.com"'))
    refused = kl("oidc", "set", "acme", str(tmp_path / "bad.toml"))
    assert refused.code == EXIT_REFUSED
    assert "2 problem(s)" in refused.err and "audience" in refused.err
    assert "needs a condition on who the pipeline is" in refused.err
    assert kl("--json", "oidc", "show", "acme").check().json() == stored
    assert kl("oidc", "set", "acme", str(tmp_path / "missing.toml")).code == EXIT_USAGE

    assert kl("oidc", "delete", "acme").code == EXIT_USAGE
    assert kl("oidc", "delete", "acme", "--yes").check().out.startswith(
        "removed the OIDC policy of tenant acme")
    assert kl("oidc", "show", "acme").code == EXIT_NOT_FOUND
    assert kl("oidc", "show", "nobody").code == EXIT_NOT_FOUND
