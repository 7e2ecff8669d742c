"""The blocks a state page offers to copy: the C{backend "http"} block of
the state, and (where that lane exists) the C{cloud {}} block.

Nothing secret is ever in them: the token is read from the environment
(C{TF_HTTP_PASSWORD}), or written by the reader into the CLI configuration
the C{cloud {}} block needs beside it.
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
    It needs the CLI configuration of L{cli_config_block} beside it."""
    name = key.path.rsplit("/", 1)[-1]
    try:
        check_workspace_name(name)
    except InvalidName:
        return None
    organization = key.tenant if auth_mode == "database" else DEFAULT_TENANT
    return ("terraform {\n  cloud {\n"
            f"    hostname     = {_hcl(urlsplit(base).netloc)}\n"
            f"    organization = {_hcl(organization)}\n"
            f"    workspaces {{\n      name = {_hcl(name)}\n    }}\n"
            "  }\n}\n")


#: The token line of the open mode (any value: Terraform only needs one),
#: and of the others (a placeholder: the page never holds a token).
_OPEN_TOKEN_LINE = ('  token = "open"  # authentication is off: any value does,'  # noqa: S105
                    " but Terraform needs one")
_YOUR_TOKEN_LINE = '  token = "REPLACE-WITH-YOUR-KILOLOCK-TOKEN"'  # noqa: S105 - a placeholder

#: Where the CLI configuration of L{cli_config_block} is saved.
CLI_CONFIG_FILE = "kilolock.tfrc"


def cli_config_block(base: str, auth_mode: str) -> str:
    """The Terraform CLI configuration a C{cloud {}} block of this server
    needs: the token (Terraform refuses to start without one, even where the
    server asks for none: "Required token could not be found"), and over
    plain HTTP a C{host} block naming the TFE lane, since Terraform's
    discovery of a host's services is always HTTPS.  The token itself is
    never written here: in the open mode any value does; otherwise the
    reader puts in their own."""
    url = urlsplit(base)
    host = url.netloc
    lines = [f"# save as {CLI_CONFIG_FILE}, then: export TF_CLI_CONFIG_FILE=$PWD/{CLI_CONFIG_FILE}"]
    if url.scheme != "https":
        lines += ["# plain HTTP: name the TFE lane here (discovery is HTTPS only)",
                  f"host {_hcl(host)} {{",
                  "  services = {",
                  f'    "tfe.v2" = {_hcl(base + "/api/v2/")}',
                  "  }",
                  "}"]
    lines += [f"credentials {_hcl(host)} {{",
              _OPEN_TOKEN_LINE if auth_mode == "open" else _YOUR_TOKEN_LINE, "}"]
    if auth_mode != "open" and url.scheme == "https" and url.port is None:
        lines.append(f"# (or no credentials block: export TF_TOKEN_"
                     f"{_token_variable(url.hostname or '')}=<your token>)")
    return "\n".join(lines) + "\n"


def _token_variable(host: str) -> str:
    """The part after C{TF_TOKEN_} of the variable Terraform reads the
    token of C{host} from (dots become underscores)."""
    return host.replace(".", "_").replace("-", "__")
