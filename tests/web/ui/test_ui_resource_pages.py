"""A resource's page, a version's pages (its resources, its JSON, its
download) and the history's provenance, in memory: what each shows, what
it masks, how it words things, and every bad request a clear 4xx page."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.ui_support import DashboardSite

SECRET = "s3cr3t-db-password"
AWS = 'provider["registry.terraform.io/hashicorp/aws"]'
BUILTIN = 'provider["terraform.io/builtin/terraform"]'
HOSTILE = "<script>alert(1)</script> \u202eevil\u202c"


def instance(attributes: dict[str, Any], key: Any = None, sensitive: Any = None,
             dependencies: list[str] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"schema_version": 0, "attributes": attributes,
                             "sensitive_attributes": sensitive or []}
    if key is not None:
        found["index_key"] = key
    if dependencies:
        found["dependencies"] = dependencies
    return found


def state(serial: int, web_type: str = "t3.micro", generation: int = 1,
          extra_outputs: dict[str, Any] | None = None) -> bytes:
    """A network module (a VPC, subnets by for_each), servers by count
    depending on them, a database whose password is sensitive, a copy of
    that password in an unmarked attribute, and hostile text."""
    resources = [
        {"module": "module.net", "mode": "managed", "type": "aws_vpc", "name": "main",
         "provider": AWS, "instances": [instance({"id": "vpc-1", "cidr_block": "10.0.0.0/16"})]},
        {"module": "module.net", "mode": "managed", "type": "aws_subnet", "name": "private",
         "provider": AWS, "instances": [
             instance({"id": f"subnet-{zone}", "zone": zone}, key=zone,
                      dependencies=["module.net.aws_vpc.main"]) for zone in ("a", "b")]},
        {"mode": "managed", "type": "aws_instance", "name": "web", "provider": AWS,
         "instances": [instance({"id": f"i-{index}", "instance_type": web_type,
                                 "tags": {"Name": f"web-{index}"}}, key=index,
                                dependencies=["module.net.aws_subnet.private",
                                              "module.net.aws_vpc.main"])
                       for index in range(3)]},
        {"mode": "managed", "type": "aws_db_instance", "name": "main", "provider": AWS,
         "instances": [instance({"id": "db-1", "password": SECRET, "port": 5432},
                                sensitive=[[{"type": "get_attr", "value": "password"}]],
                                dependencies=["aws_instance.web"])]},
        {"mode": "managed", "type": "terraform_data", "name": "copy", "provider": BUILTIN,
         "instances": [instance({"id": "copy", "output": {"value": f"postgres://app:{SECRET}@db",
                                                          "type": "string"},
                                 "note": HOSTILE, "nul": "a\u0000b"})]},
    ]
    outputs = {"zones": {"value": ["a", "b"], "type": ["tuple", ["string", "string"]]},
               "generation": {"value": generation, "type": "number"},
               "db_password": {"value": SECRET, "type": "string", "sensitive": True},
               "dsn": {"value": f"postgres://app:{SECRET}@db", "type": "string"},
               **(extra_outputs or {})}
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": "lineage-1", "outputs": outputs,
                       "resources": resources}).encode()


def site_with_history() -> DashboardSite:
    """Version 1; version 2 changes the servers' type; version 3 changes an
    output only; version 4 rolls back to version 1; version 5 changes
    nothing but the serial."""
    site = DashboardSite()
    for body in (state(1), state(2, web_type="t3.large"), state(3, web_type="t3.large",
                                                                 generation=2)):
        site.clock.advance(3600)
        assert site.api("POST", "/v1/states/app", body).status == 200
    site.clock.advance(3600)
    assert site.api("POST", "/v1/native/states/app/-/rollback",
                    json.dumps({"version": 1}).encode()).status == 200
    site.clock.advance(60)
    current = json.loads(site.api("GET", "/v1/states/app").body)
    current["serial"] += 1
    assert site.api("POST", "/v1/states/app", json.dumps(current).encode()).status == 200
    return site


def text_of(body: bytes) -> str:
    """The page's text, tags removed, whitespace collapsed."""
    return " ".join(re.sub(rb"<[^>]+>", b" ", body).decode().split())


def resource(site: DashboardSite, address: str, **query: str) -> Any:
    extra = "".join(f"&{name}={value}" for name, value in query.items())
    return site.browser().get(f"/ui/states/app/-/resource?address={quote(address)}{extra}")


def test_a_resource_page_shows_an_instance_as_terraform_writes_it() -> None:
    """Type, name, module, provider as `hashicorp/aws`, its key; every
    attribute by path, strings quoted and numbers bare; what it depends
    on and what depends on it, as links to their pages."""
    site = site_with_history()
    page = resource(site, "aws_instance.web[1]")
    assert page.status == 200
    text = text_of(page.body)
    assert "Provider hashicorp/aws" in text and 'provider[' not in text
    assert "Instance key 1" in text and "Module (root module)" in text
    assert 'instance_type "t3.micro"' in text and 'tags.Name "web-1"' in text
    body = page.body.decode()
    assert 'href="/ui/states/app/-/resource?address=module.net.aws_subnet.private"' in body
    assert 'href="/ui/states/app/-/resource?address=aws_db_instance.main"' in body
    assert "<h1>aws_instance.web[1]</h1>" in body


def test_sensitive_values_and_values_holding_them_are_never_sent() -> None:
    """The marked password is masked on its resource's page; the unmarked
    copy holding it is masked too; no page of the state sends it."""
    site = site_with_history()
    database = resource(site, "aws_db_instance.main")
    assert database.status == 200
    assert "password (sensitive)" in text_of(database.body) and "port 5432" in text_of(
        database.body)
    copy = resource(site, "terraform_data.copy")
    assert copy.status == 200 and "output (sensitive)" in text_of(copy.body)
    for path in ("/ui/states/app", "/ui/states/app/-/history", "/ui/states/app/-/versions/2",
                 "/ui/states/app/-/versions/2/json", "/ui/states/app/-/diff?from=1&to=2",
                 "/ui/states/app/-/resource?address=aws_db_instance.main&version=1"):
        reply = site.browser().get(path)
        assert reply.status == 200, path
        assert SECRET.encode() not in reply.body, path


def test_hostile_text_in_attributes_is_escaped() -> None:
    """Markup is text; an RTL override is shown as its escape (the value
    reads as what it holds, not reversed); a NUL is replaced: on the
    resource's page and in the version's JSON."""
    site = site_with_history()
    for page in (resource(site, "terraform_data.copy"),
                 site.browser().get("/ui/states/app/-/versions/1/json")):
        assert page.status == 200
        assert b"<script>" not in page.body and b"&lt;script&gt;" in page.body
        assert b"\x00" not in page.body
        assert "\u202e".encode() not in page.body
        assert b"\\u202eevil\\u202c" in page.body


def test_a_resource_of_several_instances_lists_them() -> None:
    """The resource address (as the graph and dependencies name it) lists
    its instances, each a link; so does a resource inside a module."""
    site = site_with_history()
    page = resource(site, "aws_instance.web")
    assert page.status == 200
    assert "3 instances of the resource aws_instance.web" in text_of(page.body)
    assert page.body.count(b'href="/ui/states/app/-/resource?address=aws_instance.web%5B') == 3
    subnets = resource(site, "module.net.aws_subnet.private")
    assert subnets.status == 200 and "2 instances" in text_of(subnets.body)


def test_the_history_says_when_it_last_changed_and_by_whom() -> None:
    """Created in version 1, changed in 2, changed back by the rollback in
    4 (marked); the outputs-only version 3 and the serial bump 5 are not
    changes of it."""
    site = site_with_history()
    text = text_of(resource(site, "aws_instance.web[0]").body)
    assert "Last changed: version 4" in text
    rows = re.findall(r"Version (\d) (created|changed)", text)
    assert rows == [("4", "changed"), ("2", "changed"), ("1", "created")]
    assert "rollback to version 1" in text


def test_an_old_versions_resource_is_shown_as_it_was() -> None:
    """`&version=2`: the attributes of version 2, and a note that it is not
    the current version."""
    site = site_with_history()
    page = resource(site, "aws_instance.web[0]", version="2")
    assert page.status == 200
    text = text_of(page.body)
    assert 'instance_type "t3.large"' in text
    assert "Version 2 of app: not the current one." in text


@pytest.mark.parametrize(("query", "status", "says"), [
    ("", 400, "address is required"),
    ("address=" + "a" * 5000, 400, "longer than 4096"),
    ("address=aws_instance.nothing", 404, "nothing here"),
    ("address=aws_instance.web[0]&version=0", 400, "version must be a whole number"),
    ("address=aws_instance.web[0]&version=abc", 400, "version must be a whole number"),
    ("address=aws_instance.web[0]&version=99", 404, "nothing here"),
    ("address=aws_instance.web[0]&version=" + "9" * 40, 400, "version must be"),
    ("address=%00%ff", 400, ""),
])
def test_bad_resource_requests_are_clear_4xx_pages(query: str, status: int, says: str) -> None:
    """A missing, overlong or unknown address, a bad or unknown version:
    the HTML page of a 4xx naming the problem, never a 500."""
    site = site_with_history()
    reply = site.browser().get(f"/ui/states/app/-/resource?{query}")
    assert reply.status == status, (query, reply.status, reply.body[:300])
    assert says in text_of(reply.body)
    assert reply.header(b"content-type").startswith(b"text/html")


def test_the_history_marks_current_rollback_outputs_only_and_no_change() -> None:
    """Newest first: version 5 current (no resource or output changed),
    4 a rollback to 1, 3 outputs only, 2 changed resources; with how long
    ago beside each time."""
    site = site_with_history()
    page = site.browser().get("/ui/states/app/-/history")
    assert page.status == 200
    items = re.findall(rb'<li value="(\d)"[^>]*>(.*?)</li>', page.body, flags=re.DOTALL)
    text = {int(number): text_of(item) for number, item in items}
    assert "current" in text[5] and "No resource or output changed" in text[5]
    assert "rollback to version 1" in text[4] and "current" not in text[4]
    assert "~3 changed resource instances" in text[4]
    assert "Outputs only ~1 changed output" in text[3]
    assert "~3 changed resource instances" in text[2] and "Outputs only" not in text[2]
    assert "+8 added resource instances; +4 added outputs" in text[1]
    assert "(1 h ago)" in text[3] and "(just now)" in text[5]
    assert "5 versions, newest first." in text_of(page.body)


def test_a_versions_page_browses_its_resources_and_outputs() -> None:
    """Version 2's resources (links to their page in version 2), its
    outputs (types as Terraform writes them, sensitive ones masked), and
    links to its JSON, its download and its diff."""
    site = site_with_history()
    page = site.browser().get("/ui/states/app/-/versions/2")
    assert page.status == 200
    body = page.body.decode()
    assert 'href="/ui/states/app/-/resource?address=aws_instance.web%5B0%5D&amp;version=2"' \
        in body
    text = text_of(page.body)
    assert "zones tuple([string, string])" in text
    assert "db_password string (sensitive)" in text
    assert "dsn string (sensitive)" in text  # it holds the password
    assert "/ui/states/app/-/versions/2/json" in body
    assert "/ui/states/app/-/diff?from=1&amp;to=2" in body
    filtered = site.browser().get("/ui/states/app/-/versions/2?address=subnet")
    assert "2 of 8 resource instances." in text_of(filtered.body)


def test_a_versions_json_is_masked() -> None:
    """The JSON view: the version as indented JSON, sensitive values as
    "(sensitive)" (marked paths, sensitive outputs, and text embedding a
    sensitive value), everything else as it is."""
    site = site_with_history()
    page = site.browser().get("/ui/states/app/-/versions/2/json")
    assert page.status == 200
    body = page.body.decode()
    assert SECRET not in body
    assert '"password": "(sensitive)"' in body
    assert '"db_password": {\n      "value": "(sensitive)"' in body
    assert '"instance_type": "t3.large"' in body
    assert "postgres://app:(sensitive)@db" in body


def test_the_diff_shows_added_values_and_outputs_as_values() -> None:
    """An added output shows its value (not a quoted "(added)"), a removed
    one its last value, a sensitive one masked; an added resource its
    attributes, masked where sensitive."""
    site = DashboardSite()
    site.api("POST", "/v1/states/app", state(1, extra_outputs={"old": {
        "value": "gone", "type": "string"}}))
    later = json.loads(state(2, extra_outputs={"fresh": {"value": {"a": 1}, "type": [
        "object", {"a": "number"}]}}))
    later["resources"].append({"mode": "managed", "type": "aws_db_instance", "name": "replica",
                               "provider": AWS, "instances": [instance(
                                   {"id": "db-2", "password": SECRET + "-2"},
                                   sensitive=[[{"type": "get_attr", "value": "password"}]])]})
    site.api("POST", "/v1/states/app", json.dumps(later).encode())
    page = site.browser().get("/ui/states/app/-/diff?from=1&to=2")
    assert page.status == 200
    body = page.body.decode()
    assert "(added)" not in body and "&quot;(added)&quot;" not in body
    text = text_of(page.body)
    assert 'fresh (absent: added) { "a": 1 }' in text
    assert 'old "gone" (absent: removed)' in text
    assert "Added: 1 resource instance" in text
    assert 'id "db-2"' in text and "password (sensitive)" in text
    assert SECRET not in body


@pytest.mark.parametrize(("path", "status"), [
    ("/ui/states/app/-/diff?from=1&to=2&page=2", 400),
    ("/ui/states/app/-/diff?from=1&to=9", 404),
    ("/ui/states/app/-/diff?from=x&to=2", 400),
    ("/ui/states/app/-/versions/0", 404),
    ("/ui/states/app/-/versions/%E2%80%AE1", 404),
    ("/ui/states/app/-/versions/" + "9" * 30, 404),
    ("/ui/states/app/-/versions/9/json", 404),
    ("/ui/states/app/-/versions/1/json/more", 404),
    ("/ui/states/nothing/-/versions/1", 404),
    ("/ui/states/app/-/resource", 400),
    ("/ui/states/" + "x" * 300 + "/-/history", 400),
])
def test_bad_version_and_diff_requests_are_clear_4xx_pages(path: str, status: int) -> None:
    """Unknown versions, malformed numbers and pages, long names: an HTML
    4xx page, never a 500."""
    site = site_with_history()
    reply = site.browser().get(path)
    assert reply.status == status, (path, reply.status, reply.body[:300])
    assert reply.header(b"content-type").startswith(b"text/html")
