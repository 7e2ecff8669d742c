"""What a command works with: the settings, the output, the server's lanes
and its control API; and the names of states as URL paths."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

from kilolock.kl.client import Answer, HttpClient, Unreachable, server_error
from kilolock.kl.config import Settings
from kilolock.kl.discovery import HTTP_LANE, LANE_TITLES, NATIVE_LANE, Discovery
from kilolock.kl.exits import EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, KlError
from kilolock.kl.output import Output

#: Where the control API's routes start on its own listener.
CONTROL_API_PREFIX = "/v1/api"


def state_segments(name: str) -> list[str]:
    """A state name as its segments: C{NAME} or C{WORKSPACE_ID/ENV_PUBLIC_ID/NAME}."""
    segments = name.split("/")
    if len(segments) not in (1, 3) or not all(segments):
        raise KlError(EXIT_USAGE, f"{name!r} is not a state name: use NAME or"
                      " WORKSPACE_ID/ENV_PUBLIC_ID/NAME")
    return segments


def state_path(name: str) -> str:
    """The URL path of a state name, each segment escaped on its own (a C{/}
    only ever separates segments)."""
    return "/".join(quote(segment, safe="") for segment in state_segments(name))


class Context:
    """What a command works with: settings, output, the server's lanes."""

    def __init__(self, settings: Settings, output: Output) -> None:
        self.settings = settings
        self.out = output
        self.client = HttpClient(settings.url, settings.token, settings.timeout,
                                 settings.ca_file)
        self.discovery = Discovery(
            HttpClient(settings.url, settings.token, settings.discovery_timeout,
                       settings.ca_file),
            settings.discovery_timeout)

    def native(self, path: str, what: str, method: str = "GET", expect: int = 200,
               **kwargs: Any) -> Answer:
        """A request on the native lane.  @raise KlError: the lane or the
        answer failed (C{what} names the action in the message)."""
        return self._call(NATIVE_LANE, path, what, method, expect, **kwargs)

    def http_lane(self, path: str, what: str, method: str = "GET",
                  expect: Iterable[int] = (200,), **kwargs: Any) -> Answer:
        """A request on the HTTP lane, answered with one of C{expect}."""
        return self._call(HTTP_LANE, path, what, method, expect, **kwargs)

    def _call(self, lane: str, path: str, what: str, method: str, expect: int | Iterable[int],
              **kwargs: Any) -> Answer:
        base = self.discovery.lane(lane)
        try:
            answer = self.client.request(method, base + path, **kwargs)
        except Unreachable as error:
            raise KlError(EXIT_UNAVAILABLE, f"{what}: {LANE_TITLES[lane]} ({base}) did not"
                          f" answer: {error}") from None
        accepted = {expect} if isinstance(expect, int) else set(expect)
        if answer.status not in accepted:
            acquired = None
            if lane == HTTP_LANE and answer.status in (409, 423):
                acquired = self._acquired_at(path)
            raise server_error(answer, what, acquired)
        return answer

    def _acquired_at(self, http_path: str) -> str | None:
        """When the server says the lock of the state at C{http_path} (a path
        on the HTTP lane) was taken: the HTTP lane answers a conflict with
        the holder's LockInfo only, whose C{Created} is the client's clock.
        None when the native lane cannot say."""
        try:
            held = self.native_json(f"/states{http_path}/-/lock", "reading the lock")
        except KlError:
            return None
        lock = held.get("lock") if isinstance(held, dict) else None
        acquired = lock.get("acquiredAt") if isinstance(lock, dict) else None
        return acquired if isinstance(acquired, str) else None

    def native_json(self, path: str, what: str, **kwargs: Any) -> Any:
        """The JSON document of a native-lane request."""
        return self.native(path, what, **kwargs).json()

    def show(self, path: str, what: str, render: Callable[[Output, Any], None],
             **kwargs: Any) -> int:
        """A command that shows one native-lane document: fetch it, print it
        as is with C{--json}, else C{render(output, document)}.
        @return: the exit code."""
        document = self.native_json(path, what, **kwargs)
        if not self.out.json_if_asked(document):
            render(self.out, document)
        return EXIT_OK

    def control(self, method: str, path: str, what: str, expect: Iterable[int] = (200,),
                body: Any = None, query: Mapping[str, Any] | None = None) -> Any:
        """A control-API request with its token (JSON in, JSON out; None for
        an empty answer).  @raise KlError: no token, no answer, or refused."""
        settings = self.settings
        if not settings.control_token:
            raise KlError(EXIT_USAGE, "the control API needs its token: set KL_CONTROL_TOKEN,"
                          " --control-token or control_token in kl.toml")
        client = HttpClient(settings.control_url, settings.control_token, settings.timeout,
                            settings.ca_file)
        payload = None if body is None else json.dumps(body).encode()
        try:
            answer = client.request(
                method, CONTROL_API_PREFIX + path, body=payload, query=query,
                headers={"Content-Type": "application/json"} if payload else None)
        except Unreachable as error:
            raise KlError(EXIT_UNAVAILABLE, f"{what}: the control API at"
                          f" {settings.control_url} did not answer: {error}") from None
        if answer.status not in set(expect):
            raise server_error(answer, what)
        return answer.json() if answer.body else None
