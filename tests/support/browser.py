"""A real browser for the dashboard's tests: Debian's headless Chromium,
driven by Selenium through Debian's chromedriver.

Why Selenium: it drives the system chromedriver as it is (no browser or
driver download, which this network refuses); Playwright would need its
own driver bundle matched to the browser build.

Every page a test visits can be checked for: an accessibility audit by
axe-core (vendored under tests/vendor, injected by the test, never
shipped), console errors (a Content-Security-Policy violation is one), and
text that must not be in the DOM.  Screenshots go to the test's tmp dir.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import TESTS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
AXE = TESTS / "vendor" / "axe.min.js"

#: The flags a closed network needs (without the background-networking ones
#: Chromium keeps trying connections that are refused).
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-proxy-server",
                  "--window-size=1280,1000", "--disable-dev-shm-usage")


def require_browser() -> None:
    """Skip (saying why) when Chromium, chromedriver or Selenium is missing;
    .ci/run installs all three."""
    if not Path(CHROMIUM).exists() or not Path(CHROMEDRIVER).exists():
        reason = ("Debian's chromium and chromium-driver are not installed"
                  " (apt-get install chromium chromium-driver; .ci/run does)")
        if os.environ.get("KL_TEST_REQUIRE_BROWSER") == "1":
            pytest.fail(reason + ", and KL_TEST_REQUIRE_BROWSER=1 requires them")
        pytest.skip(reason)
    pytest.importorskip("selenium", reason="selenium is not installed (the test extra has it)")


class Browser:
    """One headless Chromium with a fresh profile."""

    def __init__(self, tmp_path: Path) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        profile = tmp_path / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=True)
        options.add_argument(f"--user-data-dir={profile}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = Service(executable_path=CHROMEDRIVER,
                          log_output=str(tmp_path / "chromedriver.log"))
        self.driver = webdriver.Chrome(options=options, service=service)
        self.driver.set_page_load_timeout(60)
        self.driver.set_script_timeout(60)
        self.shots = tmp_path / "screenshots"
        self.shots.mkdir(exist_ok=True)
        self.console: list[dict[str, Any]] = []

    def quit(self) -> None:
        self.driver.quit()

    # -- looking at pages -------------------------------------------------

    def open(self, url: str) -> None:
        self.driver.get(url)

    def text(self) -> str:
        return str(self.driver.find_element("tag name", "body").text)

    def source(self) -> str:
        """The DOM as it is now (not the bytes that were sent)."""
        return str(self.driver.execute_script("return document.documentElement.outerHTML"))

    def screenshot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def console_errors(self, status: int = 200) -> list[dict[str, Any]]:
        """What the console said since the last call at level SEVERE, or
        about the Content-Security-Policy at any level.  A page answered
        with C{status} 4xx logs its own status: that one is expected."""
        entries = self.driver.get_log("browser")
        self.console.extend(entries)
        own = f"{self.driver.current_url} - Failed to load resource: the server responded" \
              f" with a status of {status}"
        return [entry for entry in entries
                if not entry.get("message", "").startswith(own)
                and (entry.get("level") == "SEVERE"
                     or "Content Security Policy" in entry.get("message", "")
                     or "Content-Security-Policy" in entry.get("message", ""))]

    def accessibility_violations(self) -> list[dict[str, Any]]:
        """axe-core's violations of WCAG 2.1 A and AA rules on the page."""
        self.driver.execute_script(AXE.read_text(encoding="utf-8"))
        found = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, {runOnly: {type: 'tag',"
            " values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice']}})"
            ".then(r => done(JSON.stringify(r.violations)))"
            ".catch(e => done(JSON.stringify([{id: 'axe-error', help: String(e)}])));")
        violations: list[dict[str, Any]] = json.loads(found)
        return violations

    def check_page(self, name: str, forbidden: tuple[str, ...] = (), status: int = 200) -> None:
        """The checks every page passes: a screenshot (saved), no console
        error or CSP violation, no accessibility violation, and none of
        C{forbidden} anywhere in the DOM."""
        self.screenshot(name)
        errors = self.console_errors(status)
        assert errors == [], f"{name}: console errors {errors}"
        source = self.source()
        for text in forbidden:
            assert text not in source, f"{name}: {text!r} is in the DOM"
        violations = self.accessibility_violations()
        described = [(v.get("id"), v.get("help"),
                      [node.get("target") for node in v.get("nodes", [])][:5])
                     for v in violations]
        assert described == [], f"{name}: accessibility violations {described}"
