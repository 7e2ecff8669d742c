"""Terraform configurations for the refactoring tests: a monolith before and
after state operations, written so that the real Terraform plans no change
when (and only when) the state was refactored exactly as the configuration
was.

The monolith has modules (nested too), ``count`` and ``for_each``
instances, a data source (``terraform_remote_state`` reading a local state
file: no network) and dependencies (``depends_on`` and references), all
with the built-in ``terraform_data``: no provider is downloaded.

Layouts (``write_layout(directory, layout, backend)``):

  - ``before``: the monolith as first applied;
  - ``renamed``: after the moves within the state (see ``RENAMES``) and the
    removal of ``terraform_data.legacy`` (``REMOVED``);
  - ``trunk``: ``renamed`` without ``module.net`` (split out) and without
    ``module.application`` (moved to the ``apps`` state);
  - ``network``: the split-out state, ``module.net`` kept as a module;
  - ``network_root``: the split-out state with the module's resources at
    the root;
  - ``apps_before`` / ``apps_after``: another state, before and after
    ``module.application`` moved into it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.terraform import HttpBackend

#: The moves within the monolith, in order: (from, to).
RENAMES = (
    ("terraform_data.old", "terraform_data.renamed"),
    ("module.app", "module.application"),
    ("terraform_data.items[2]", "terraform_data.extra"),
    ("terraform_data.keyed", "terraform_data.colours"),
    ("data.terraform_remote_state.peer", "data.terraform_remote_state.upstream"),
)
#: What is removed from the monolith (and from its configuration).
REMOVED = ("terraform_data.legacy",)

_NET = """
variable "prefix" {
  type = string
}

resource "terraform_data" "subnet" {
  count = 2
  input = "${var.prefix}-subnet-${count.index}"
}

resource "terraform_data" "vpc" {
  input      = "${var.prefix}-vpc"
  depends_on = [terraform_data.subnet]
}

output "subnet" {
  value = terraform_data.subnet[0].output
}
"""

_APP = """
variable "name" {
  type = string
}

resource "terraform_data" "server" {
  for_each = toset(["a", "b"])
  input    = "${var.name}-${each.key}"
}

module "inner" {
  source = "../inner"
  label  = var.name
}
"""

_INNER = """
variable "label" {
  type = string
}

resource "terraform_data" "leaf" {
  input = "leaf-${var.label}"
}
"""

_PEER_STATE = {
    "version": 4, "terraform_version": "1.15.5", "serial": 1,
    "lineage": "00000000-0000-4000-8000-0000000000aa",
    "outputs": {"colour": {"value": "teal", "type": "string"}},
    "resources": [], "check_results": None,
}


def _peer(name: str) -> str:
    return f"""
data "terraform_remote_state" "{name}" {{
  backend = "local"
  config = {{
    path = "${{path.module}}/peer.tfstate"
  }}
}}
"""


def _monolith(renamed: bool, trunk: bool) -> str:
    peer = "upstream" if renamed else "peer"
    old = "renamed" if renamed else "old"
    colour = f"${{data.terraform_remote_state.{peer}.outputs.colour}}"
    parts = [_peer(peer), """
variable "generation" {
  type    = number
  default = 1
}
"""]
    if not trunk:
        parts.append("""
module "net" {
  source = "./modules/net"
  prefix = "net"
}
""")
        parts.append(f"""
module "{'application' if renamed else 'app'}" {{
  source = "./modules/app"
  name   = "app"
}}
""")
    parts.append(f"""
resource "terraform_data" "{old}" {{
  input = "old-${{var.generation}}"
}}

resource "terraform_data" "items" {{
  count = {2 if renamed else 3}
  input = "item-${{count.index}}"
}}

resource "terraform_data" "{'colours' if renamed else 'keyed'}" {{
  for_each = toset(["blue", "green"])
  input    = each.key
}}

resource "terraform_data" "dep" {{
  input      = "${{terraform_data.{old}.output}}-{colour}"
  depends_on = [{'' if trunk else 'module.net, '}terraform_data.items]
}}
""")
    if renamed:
        parts.append("""
resource "terraform_data" "extra" {
  input = "item-2"
}
""")
    else:
        parts.append("""
resource "terraform_data" "legacy" {
  input = "legacy"
}
""")
    return "".join(parts)


def _network(root: bool) -> str:
    if root:
        # Root outputs are not part of a state a split writes: none here.
        return _NET.replace('type = string', 'type    = string\n  default = "net"').split(
            'output "subnet"')[0]
    return """
module "net" {
  source = "./modules/net"
  prefix = "net"
}
"""


def _apps(after: bool) -> str:
    text = """
resource "terraform_data" "existing" {
  input = "existing"
}
"""
    if after:
        text += """
module "application" {
  source = "./modules/app"
  name   = "app"
}
"""
    return text


def layout_source(layout: str) -> str:
    """The root module's text of C{layout} (without a backend block)."""
    return {
        "before": lambda: _monolith(False, False),
        "renamed": lambda: _monolith(True, False),
        "trunk": lambda: _monolith(True, True),
        "network": lambda: _network(False),
        "network_root": lambda: _network(True),
        "apps_before": lambda: _apps(False),
        "apps_after": lambda: _apps(True),
    }[layout]()


def write_layout(directory: Path, layout: str, backend: HttpBackend | None = None) -> Path:
    """Write C{layout} (and the modules and peer state it uses) into
    C{directory}, replacing its C{main.tf}; with C{backend}, a C{backend
    "http"} block."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (("net", _NET), ("app", _APP), ("inner", _INNER)):
        module = directory / "modules" / name
        module.mkdir(parents=True, exist_ok=True)
        (module / "main.tf").write_text(text)
    (directory / "peer.tfstate").write_text(json.dumps(_PEER_STATE))
    header = "" if backend is None else "terraform {\n" + backend.hcl() + "}\n"
    (directory / "main.tf").write_text(header + layout_source(layout))
    return directory
