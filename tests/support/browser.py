"""A real browser for the dashboard's tests: Debian's headless Chromium,
driven by Selenium through Debian's chromedriver.

Why Selenium: it drives the system chromedriver as it is (no browser or
driver download, which this network refuses); Playwright would need its
own driver bundle matched to the browser build.

Every page a test visits can be checked for: an accessibility audit by
axe-core (vendored under tests/vendor, injected by the test, never
shipped), console errors (a Content-Security-Policy violation is one), and
text that must not be in the DOM; and, at a desktop's width and a phone's,
what a person would see wrong: the page wider than the window, text too
small to read, things drawn over each other.  Screenshots of every page at
both widths go to the test's tmp dir.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.fixtures_server import poll_until
from tests.support.paths import TESTS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
AXE = TESTS / "vendor" / "axe.min.js"

#: The flags a closed network needs (without the background-networking ones
#: Chromium keeps trying connections that are refused).
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-proxy-server",
                  "--window-size=1400,1000", "--disable-dev-shm-usage",
                  "--hide-scrollbars", "--force-device-scale-factor=1")

#: The widths every page is looked at: a desktop, and a phone.
WIDTHS = (1400, 390)
#: The smallest font size (px) text may have; resource addresses included.
MIN_FONT_PX = 12

#: What a person would notice on the page as it is laid out now: the page
#: wider than the window, text smaller than MIN_FONT_PX, and text or
#: controls drawn over each other.  Text is measured line by line (a Range
#: over each text node), controls by their boxes; what a scrolling box or
#: a closed <details> hides is not seen, so not counted.  Returns a list of
#: descriptions.
LAYOUT_CHECK = """
const minFont = arguments[0];
const problems = [];
const root = document.documentElement;
if (root.scrollWidth > window.innerWidth + 1) {
  problems.push(`the page is ${root.scrollWidth}px wide in a ${window.innerWidth}px window`);
}
function describe(node) {
  const element = node.nodeType === 1 ? node : node.parentElement;
  const text = (node.textContent || "").trim().slice(0, 40);
  return `${element.tagName.toLowerCase()}.${element.className.baseVal ?? element.className}`
         + ` "${text}"`;
}
function clip(element, rect) {
  let r = {left: rect.left, top: rect.top, right: rect.right, bottom: rect.bottom};
  for (let e = element.parentElement; e; e = e.parentElement) {
    const style = getComputedStyle(e);
    if (style.overflowX !== "visible" || style.overflowY !== "visible") {
      const b = e.getBoundingClientRect();
      r = {left: Math.max(r.left, b.left), top: Math.max(r.top, b.top),
           right: Math.min(r.right, b.right), bottom: Math.min(r.bottom, b.bottom)};
    }
  }
  return r;
}
function hiddenInDetails(element) {
  // a closed <details> keeps its content laid out, unseen (content-visibility)
  for (let d = element.closest("details"); d; d = d.parentElement.closest("details")) {
    if (!d.open && !element.closest("summary")) return true;
  }
  return false;
}
const boxes = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  if (!node.textContent.trim()) continue;
  const element = node.parentElement;
  if (element.closest("title, script, style, .skip, svg defs")) continue;
  if (hiddenInDetails(element)) continue;
  const style = getComputedStyle(element);
  if (style.visibility === "hidden" || style.display === "none") continue;
  const range = document.createRange();
  range.selectNodeContents(node);
  const rects = Array.from(range.getClientRects()).filter(r => r.width > 0 && r.height > 0);
  if (!rects.length) continue;
  const size = parseFloat(style.fontSize);
  if (size < minFont) problems.push(`${describe(node)} is ${size}px`);
  for (const rect of rects) {
    const seen = clip(element, rect);
    if (seen.right - seen.left > 1 && seen.bottom - seen.top > 1) {
      boxes.push({node, rect: seen});
    }
  }
}
const controls = "input, select, button, textarea, svg.graph rect";
for (const element of document.querySelectorAll(controls)) {
  const rect = element.getBoundingClientRect();
  if (rect.width === 0 || rect.height === 0 || hiddenInDetails(element)) continue;
  const seen = clip(element, rect);
  if (seen.right - seen.left > 1 && seen.bottom - seen.top > 1) {
    boxes.push({node: element, rect: seen});
  }
}
boxes.sort((a, b) => a.rect.top - b.rect.top);
for (let i = 0; i < boxes.length; i++) {
  const a = boxes[i];
  for (let j = i + 1; j < boxes.length && boxes[j].rect.top < a.rect.bottom - 1; j++) {
    const b = boxes[j];
    if (a.node === b.node) continue;
    const ea = a.node.nodeType === 1 ? a.node : a.node.parentElement;
    const eb = b.node.nodeType === 1 ? b.node : b.node.parentElement;
    // a box's own label: the text of a graph node over its rect
    if (ea.parentElement && eb.parentElement && ea.closest("svg.graph .node") &&
        ea.closest("svg.graph .node") === eb.closest("svg.graph .node")) continue;
    if (ea.contains(eb) && eb.matches("input, select, button, textarea, rect")) continue;
    if (eb.contains(ea) && eb.matches("input, select, button, textarea, rect")) continue;
    const width = Math.min(a.rect.right, b.rect.right) - Math.max(a.rect.left, b.rect.left);
    const height = Math.min(a.rect.bottom, b.rect.bottom) - Math.max(a.rect.top, b.rect.top);
    if (width > 1 && height > 1) {
      const size = `${Math.round(width)}x${Math.round(height)}px`;
      problems.push(`${describe(a.node)} overlaps ${describe(b.node)} (${size})`);
    }
  }
}
return problems.slice(0, 20);
"""


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

    def resize(self, width: int, height: int = 1000) -> None:
        self.driver.set_window_size(width, height)
        poll_until(lambda: self.driver.execute_script("return window.innerWidth") == width, 30,
                   f"the window to be {width}px wide")

    def layout_problems(self) -> list[str]:
        """What L{LAYOUT_CHECK} finds on the page as it is laid out now."""
        found: list[str] = self.driver.execute_script(LAYOUT_CHECK, MIN_FONT_PX)
        return found

    def full_screenshot(self, name: str, width: int) -> Path:
        """The whole page at C{width}: the window made as tall as the page."""
        height = int(self.driver.execute_script(
            "return document.documentElement.scrollHeight"))
        self.driver.set_window_size(width, min(max(height, 600), 8000))
        path = self.shots / f"{name}-{width}.png"
        self.driver.save_screenshot(str(path))
        self.driver.set_window_size(width, 1000)
        return path

    def check_page(self, name: str, forbidden: tuple[str, ...] = (), status: int = 200) -> None:
        """The checks every page passes, as a person would look at it: at
        each of L{WIDTHS}, a screenshot of the whole page (saved), nothing
        wider than the window, no text under L{MIN_FONT_PX}, nothing drawn
        over anything else, no accessibility violation; no console error
        or CSP violation; none of C{forbidden} anywhere in the DOM."""
        errors = self.console_errors(status)
        assert errors == [], f"{name}: console errors {errors}"
        source = self.source()
        for text in forbidden:
            assert text not in source, f"{name}: {text!r} is in the DOM"
        try:
            for width in WIDTHS:
                self.resize(width)
                self.full_screenshot(name, width)
                problems = self.layout_problems()
                assert problems == [], f"{name} at {width}px: {problems}"
                violations = self.accessibility_violations()
                described = [(v.get("id"), v.get("help"),
                              [node.get("target") for node in v.get("nodes", [])][:5])
                             for v in violations]
                assert described == [], \
                    f"{name} at {width}px: accessibility violations {described}"
        finally:
            self.resize(WIDTHS[0])
