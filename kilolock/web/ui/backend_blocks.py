"""The blocks a state page offers to copy: the C{backend "http"} block of
the state, and (where that lane exists) the C{cloud {}} block.

Nothing secret is ever in them: the token is read from the environment
(C{TF_HTTP_PASSWORD}, or the CLI credentials for C{cloud {}}).
"""

from __future__ import annotations

import json
import re

from twisted.web.server import Request

from kilolock.model import Principal, StateKey
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
    """HOOK for the TFE lane (issue 14): the C{cloud {}} block of the state
    at C{key}, or None while Kilolock serves no such lane.  The state page
    shows whatever this returns, next to the http block; the lane that
    provides it replaces this function's body."""
    return None
