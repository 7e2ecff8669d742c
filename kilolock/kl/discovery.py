"""Lane discovery: which base path serves each lane of one server.

Every state command reads C{/.well-known/kilolock}, then probes the HTTP
lane and the KL-native lane concurrently (a thread each), every request
bounded by what is left of one short discovery deadline
(C{--discovery-timeout}, default 3 s; separate from the per-request
C{--timeout}).  A command waits only for the lane it needs, so a hung lane
fails only the commands that use it, each with its own lane's error.  A
discovery document that advertises a percent-encoded path is rejected: a
Kilolock path is plain segments, and such a document means something between
kl and Kilolock rewrote it (docs/kl.md, "Lane discovery").
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote

from attrs import define, field

from kilolock.kl.client import Answer, Unreachable
from kilolock.kl.exits import EXIT_PROTOCOL, EXIT_UNAVAILABLE, KlError

HTTP_LANE = "terraform-http"
NATIVE_LANE = "kilolock-native"
LANE_TITLES = {HTTP_LANE: "the HTTP lane", NATIVE_LANE: "the native lane"}

#: How long past the deadline a command still waits for a probe that has not
#: finished: a probe's own request times out at the deadline, so only a probe
#: stuck outside its socket wait (e.g. resolving the host name) needs this.
PROBE_GRACE_SECONDS = 0.5


class DiscoveryClient(Protocol):
    """What discovery needs of an HTTP client (L{kilolock.kl.client.HttpClient})."""

    @property
    def base_url(self) -> str: ...

    def request(self, method: str, path: str, *, timeout: float | None = None) -> Answer:
        """One exchange, waiting at most C{timeout} seconds for the server.
        @raise Unreachable: when no answer came back in time."""


@define
class LaneProbe:
    """One lane's discovery outcome, filled in by its probe thread."""

    name: str
    base_path: str | None = None
    entry: dict[str, Any] = field(factory=dict)
    error: KlError | None = None
    finished: threading.Event = field(factory=threading.Event)


def encoded_paths(document: Any) -> list[str]:
    """Every advertised path of a discovery document that is percent-encoded
    (or would need to be): a path must equal its escaped form."""
    found: list[str] = []

    def walk(node: Any, key: str = "") -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                walk(value, str(name))
        elif isinstance(node, list):
            for value in node:
                walk(value, key)
        elif (isinstance(node, str) and (key.endswith(("Path", "Suffix"))
                                         or node.startswith("/"))
              and quote(node, safe="/") != node):
            found.append(node)

    walk(document)
    return found


def _json_object(answer: Answer) -> dict[str, Any] | None:
    try:
        document = json.loads(answer.body)
    except (ValueError, UnicodeDecodeError):
        return None
    return document if isinstance(document, dict) else None


class Discovery:
    """The lanes of one server, probed concurrently under one short deadline.

    @param clock: the monotonic clock the deadline is measured on.
    """

    def __init__(self, client: DiscoveryClient, deadline_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.seconds = deadline_seconds
        self.clock = clock
        self.deadline = float("inf")  # set when discovery starts
        self.document: dict[str, Any] | None = None
        self.lanes: dict[str, LaneProbe] = {}
        self._started = False
        self._failure: KlError | None = None

    def remaining(self) -> float:
        """Seconds left until the deadline (a little at least, never none)."""
        return max(0.01, self.deadline - self.clock())

    def start(self) -> None:
        """Fetch the discovery document, then start one probe thread per lane."""
        if self._started:
            return
        self._started = True
        self.deadline = self.clock() + self.seconds
        try:
            self.document = self._fetch_document()
        except KlError as error:
            self._failure = error
            return
        entries = {lane.get("name"): lane for lane in self.document["lanes"]
                   if isinstance(lane, dict)}
        for name in (HTTP_LANE, NATIVE_LANE):
            probe = LaneProbe(name)
            self.lanes[name] = probe
            entry = entries.get(name)
            if entry is None or not isinstance(entry.get("basePath"), str):
                probe.error = KlError(EXIT_PROTOCOL, f"{LANE_TITLES[name]} ({name}) is not"
                                      f" offered by {self.client.base_url}")
                probe.finished.set()
                continue
            probe.entry = entry
            probe.base_path = entry["basePath"].rstrip("/")
            threading.Thread(target=self._probe, args=(probe,), daemon=True,
                             name=f"kl-probe-{name}").start()

    def _fetch_document(self) -> dict[str, Any]:
        """The server's discovery document.  @raise KlError: unreachable, not
        Kilolock's, or advertising percent-encoded paths."""
        base = self.client.base_url
        where = f"{base}/.well-known/kilolock"
        try:
            answer = self.client.request("GET", "/.well-known/kilolock",
                                         timeout=self.remaining())
        except Unreachable as error:
            raise KlError(EXIT_UNAVAILABLE, f"cannot reach the server at {base}: {error}"
                          f" (discovery, deadline {self.seconds:g} s)") from None
        if answer.status != 200:
            raise KlError(EXIT_UNAVAILABLE if answer.status >= 500 else EXIT_PROTOCOL,
                          f"{where} answered {answer.status}: is {base} a Kilolock server?")
        document = _json_object(answer)
        if document is None or not isinstance(document.get("lanes"), list):
            raise KlError(EXIT_PROTOCOL, f"{where} is not a Kilolock discovery document")
        encoded = encoded_paths(document)
        if encoded:
            raise KlError(
                EXIT_PROTOCOL, f"rejected the discovery document of {base}:"
                f" it advertises percent-encoded paths ({', '.join(sorted(encoded))});"
                " Kilolock paths are plain segments, never a percent-encoded slash")
        return document

    def _probe(self, probe: LaneProbe) -> None:
        title = f"{LANE_TITLES[probe.name]} ({probe.base_path})"
        try:
            answer = self.client.request("GET", probe.base_path or "/",
                                         timeout=self.remaining())
            if answer.status >= 500:
                probe.error = KlError(EXIT_UNAVAILABLE, f"{title} is unavailable: it answered"
                                      f" {answer.status}")
                return
            document = _json_object(answer)
            if document is None:
                kind = answer.headers.get("content-type", "no content type")
                probe.error = KlError(EXIT_PROTOCOL, f"{title} answered {answer.status}"
                                      f" ({kind}), not Kilolock's JSON: is a proxy routing it"
                                      " elsewhere?")
            elif probe.name == NATIVE_LANE and document.get("lane") != NATIVE_LANE:
                probe.error = KlError(EXIT_PROTOCOL, f"{title} does not identify itself as"
                                      f" {NATIVE_LANE}")
        except Unreachable as error:
            probe.error = KlError(EXIT_UNAVAILABLE, f"{title} is unavailable: {error}"
                                  f" (discovery deadline {self.seconds:g} s)")
        except Exception as error:  # a probe thread must always finish
            probe.error = KlError(EXIT_PROTOCOL, f"{title} could not be probed: {error}")
        finally:
            probe.finished.set()

    def lane(self, name: str) -> str:
        """The base path of lane C{name}, waiting for its probe only (at most
        until the discovery deadline and L{PROBE_GRACE_SECONDS}).
        @raise KlError: its own error."""
        self.start()
        if self._failure is not None:
            raise self._failure
        probe = self.lanes[name]
        if not probe.finished.wait(self.remaining() + PROBE_GRACE_SECONDS):
            raise KlError(EXIT_UNAVAILABLE, f"{LANE_TITLES[name]} ({probe.base_path}) is"
                          f" unavailable: no answer within the discovery deadline of"
                          f" {self.seconds:g} s")
        if probe.error is not None:
            raise probe.error
        assert probe.base_path is not None
        return probe.base_path
