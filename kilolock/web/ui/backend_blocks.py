"""The blocks a state page offers to copy: the C{backend "http"} block of
the state, and (where that lane exists) the C{cloud {}} block.

Nothing secret is ever in them: the token is read from the environment
(C{TF_HTTP_PASSWORD}, or the CLI credentials for C{cloud {}}).
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from twisted.web.server import Request

from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
from kilolock.tfe.names import InvalidName, check_workspace_name
from kilolock.web.ui.sessions import is_secure

_HOST = re.compile(r"^[A-Za-z0-9.\-]+(?::\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](?::\d{1,5})?$")


def base_url(request: Request) -> str:
    """The URL the browser reached this server by (its C{Host}, when it is a
    plain host name or address; else C{localhost:8080})."""
    host = (request.getHeader(b"Host") or b"").decode("ascii", "replace")
    if not _HOST.match(host):
        host = "localhost:8080"
    return f"{'https' if is_secure(request) else 'http'}://{host}"


def _hcl(value: str) -> str:
    return json.dumps(value).replace("${", "$${").replace("%{", "%%{")


def http_backend_block(base: str, key: StateKey, principal: Principal,
                       auth_mode: str) -> str:
    """The C{terraform { backend "http" {...} }} block of the state at C{key}."""
    url = f"{base}/v1/states/{key.path}"
    lines = [f"    address        = {_hcl(url)}",
             f"    lock_address   = {_hcl(url)}",
             f"    unlock_address = {_hcl(url)}",
             '    lock_method    = "LOCK"',
             '    unlock_method  = "UNLOCK"']
    if auth_mode == "database":
        workspace = key.path.split("/")[0]
        lines.append(f"    username       = {_hcl(workspace)}")
    elif auth_mode == "static":
        lines.append('    username       = "terraform"')
    block = "terraform {\n  backend \"http\" {\n" + "\n".join(lines) + "\n  }\n}\n"
    if auth_mode != "open":
        block += "# export TF_HTTP_PASSWORD=<your token>\n"
    return block


def cloud_block(base: str, key: StateKey, principal: Principal, auth_mode: str) -> str | None:
    """The C{terraform { cloud {...} }} block that reaches the state at C{key}
    through the TFE lane (L{kilolock.web.tfe}): the workspace named as the
    state, in the caller's organization (C{default}, or the tenant's id in
    the database auth mode, which the lane accepts like its slug); None for a
    state no TFE workspace can name (C{default}, a name with whitespace).

    Terraform discovers the lane over HTTPS only: a plain-http server needs
    the CLI configuration's C{host} block, which the block's comment says."""
    name = key.path.rsplit("/", 1)[-1]
    try:
        check_workspace_name(name)
    except InvalidName:
        return None
    url = urlsplit(base)
    organization = key.tenant if auth_mode == "database" else DEFAULT_TENANT
    block = ("terraform {\n  cloud {\n"
             f"    hostname     = {_hcl(url.netloc)}\n"
             f"    organization = {_hcl(organization)}\n"
             f"    workspaces {{\n      name = {_hcl(name)}\n    }}\n"
             "  }\n}\n")
    if auth_mode != "open" and url.port is None:
        block += f"# export TF_TOKEN_{_token_variable(url.hostname or '')}=<your token>\n"
    elif auth_mode != "open":
        block += (f"# the token: a credentials {_hcl(url.netloc)} block of the CLI\n"
                  "# configuration (a host with a port has no TF_TOKEN_ variable)\n")
    if url.scheme != "https":
        block += ("# plain http: Terraform's discovery needs HTTPS, so add the CLI\n"
                  "# configuration's host block of docs/tfe-lane.md\n")
    return block


def _token_variable(host: str) -> str:
    """The part after C{TF_TOKEN_} of the variable Terraform reads the
    token of C{host} from (dots become underscores)."""
    return host.replace(".", "_").replace("-", "__")
