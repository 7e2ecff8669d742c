"""C{kl}: inspect and repair Kilolock states from a terminal or a script.

Synchronous on purpose (the standard library's C{http.client}, threads for
lane discovery): a command is a few requests and then the process ends.

Configuration, first found wins: command-line flags, C{KL_*} environment
variables, the config file (C{--config}, C{KL_CONFIG}, else
C{$XDG_CONFIG_HOME/kilolock/kl.toml}, i.e. C{~/.config/kilolock/kl.toml}),
the defaults.  See docs/kl.md for every command, option and exit code.

Lane discovery (ADR 0018 rule 4): every state command reads
C{/.well-known/kilolock}, then probes the HTTP lane and the KL-native lane
concurrently, each bounded by the short discovery deadline
(C{--discovery-timeout}, default 3 s; separate from the per-request
C{--timeout}).  A command waits only for the lane it needs, so a hung lane
fails only the commands that use it, each with its own lane's error.  A
discovery document that advertises a percent-encoded path is rejected.
"""

from __future__ import annotations

import argparse
import base64
import getpass
import hashlib
import http.client
import io
import json
import os
import socket
import ssl
import sys
import threading
import time
import tomllib
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, NoReturn
from urllib.parse import quote, urlencode, urlsplit

from attrs import define, field, frozen

import kilolock
from kilolock.audit import MISSING, NOT_GENESIS, UNLINKED, verify_chain
from kilolock.errors import KilolockError
from kilolock.model import AuditEvent, parse_created, rfc3339
from kilolock.statediff import restore_body
from kilolock.tfstate import parse_state

# -- exit codes (docs/kl.md) ---------------------------------------------------------

EXIT_OK = 0
#: The server refused the request (400, 401, 403, another 4xx) or the input is unusable.
EXIT_REFUSED = 1
#: The command line or the configuration is wrong.
EXIT_USAGE = 2
#: The state, version, tenant or token does not exist (404).
EXIT_NOT_FOUND = 3
#: Locked by someone else, or a conflict (423, 409; push lineage/serial checks).
EXIT_CONFLICT = 4
#: The server or the lane a command needs cannot be reached, timed out, or
#: failed (5xx).
EXIT_UNAVAILABLE = 5
#: The server's discovery document or a lane answered something unusable
#: (e.g. a percent-encoded path).
EXIT_PROTOCOL = 6
#: C{kl events verify}: the audit chain does not verify.
EXIT_BROKEN_CHAIN = 7

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_CONTROL_URL = "http://127.0.0.1:8090"
DEFAULT_TIMEOUT = 60.0
DEFAULT_DISCOVERY_TIMEOUT = 3.0
#: Files at least this big get a progress bar on an interactive stderr.
PROGRESS_THRESHOLD = 1 << 20

HTTP_LANE = "terraform-http"
NATIVE_LANE = "kilolock-native"
_LANE_TITLES = {HTTP_LANE: "the HTTP lane", NATIVE_LANE: "the native lane"}
_DEFAULT_BASES = {HTTP_LANE: "/v1/states", NATIVE_LANE: "/v1/native"}

CONFIG_KEYS = ("url", "token", "control_url", "control_token", "timeout",
               "discovery_timeout", "ca_file")


class KlError(Exception):
    """A failure with its exit code and the one-line message kl prints."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- configuration -------------------------------------------------------------------


@frozen
class Settings:
    url: str = DEFAULT_URL
    token: str | None = None
    control_url: str = DEFAULT_CONTROL_URL
    control_token: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    discovery_timeout: float = DEFAULT_DISCOVERY_TIMEOUT
    ca_file: str | None = None


def default_config_path(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kilolock" / "kl.toml"


def load_config_file(path: Path, explicit: bool, warn: Callable[[str], None]) -> dict[str, Any]:
    """The settings of a kl.toml (top-level keys of L{CONFIG_KEYS})."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        if explicit:
            raise KlError(EXIT_USAGE, f"the config file {path} does not exist") from None
        return {}
    except OSError as error:
        raise KlError(EXIT_USAGE, f"cannot read the config file {path}: {error}") from None
    try:
        document = tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise KlError(EXIT_USAGE, f"the config file {path} is not valid TOML: {error}") from None
    unknown = sorted(set(document) - set(CONFIG_KEYS))
    if unknown:
        raise KlError(EXIT_USAGE, f"the config file {path} has unknown keys: {', '.join(unknown)}"
                      f" (known: {', '.join(CONFIG_KEYS)})")
    if any(document.get(key) for key in ("token", "control_token")):
        try:
            mode = path.stat().st_mode
        except OSError:
            mode = 0
        if mode & 0o077:
            warn(f"{path} holds a token and is readable by others: chmod 600 {path}")
    return document


def resolve_settings(args: argparse.Namespace, environ: Mapping[str, str],
                     warn: Callable[[str], None]) -> Settings:
    """Flags, then C{KL_*} variables, then the config file, then defaults."""
    explicit = getattr(args, "config", None) or environ.get("KL_CONFIG")
    path = Path(explicit) if explicit else default_config_path(environ)
    config = load_config_file(path, bool(explicit), warn)

    def pick(name: str, default: Any) -> Any:
        flag = getattr(args, name, None)
        if flag is not None:
            return flag
        env = environ.get("KL_" + name.upper())
        if env:
            return env
        value = config.get(name)
        return default if value is None or value == "" else value

    def seconds(name: str, default: float) -> float:
        value = pick(name, default)
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise KlError(EXIT_USAGE, f"{name} must be a number of seconds, not {value!r}") \
                from None
        if number <= 0:
            raise KlError(EXIT_USAGE, f"{name} must be a positive number of seconds")
        return number

    settings = Settings(
        url=str(pick("url", DEFAULT_URL)).rstrip("/"),
        token=pick("token", None),
        control_url=str(pick("control_url", DEFAULT_CONTROL_URL)).rstrip("/"),
        control_token=pick("control_token", None),
        timeout=seconds("timeout", DEFAULT_TIMEOUT),
        discovery_timeout=seconds("discovery_timeout", DEFAULT_DISCOVERY_TIMEOUT),
        ca_file=pick("ca_file", None),
    )
    for name in ("url", "control_url"):
        parts = urlsplit(getattr(settings, name))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise KlError(EXIT_USAGE, f"{name} must be an http:// or https:// URL,"
                          f" not {getattr(settings, name)!r}")
    return settings


# -- HTTP ------------------------------------------------------------------------------


@frozen
class Answer:
    """One HTTP answer."""

    status: int
    headers: Mapping[str, str]
    body: bytes = field(repr=lambda body: f"<{len(body)} bytes>")

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            raise KlError(EXIT_PROTOCOL, f"the server answered {self.status} with a body that"
                          " is not JSON") from None


class Unreachable(Exception):
    """No answer: refused, reset, timed out, TLS failure."""


class Progress:
    """A progress bar on a terminal: C{kl: uploading  12.0 MiB / 100.0 MiB [###...]  12%}."""

    WIDTH = 30

    def __init__(self, total: int, stream: IO[str], label: str = "uploading") -> None:
        self.total = max(total, 1)
        self.stream = stream
        self.label = label
        self.done = 0
        self._shown = -1.0

    def advance(self, count: int) -> None:
        self.done += count
        fraction = min(1.0, self.done / self.total)
        if fraction - self._shown >= 0.01 or fraction == 1.0:
            self._shown = fraction
            filled = int(fraction * self.WIDTH)
            self.stream.write(f"\rkl: {self.label} {self.done / 2**20:6.1f} MiB /"
                              f" {self.total / 2**20:.1f} MiB"
                              f" [{'#' * filled}{'.' * (self.WIDTH - filled)}]"
                              f" {fraction * 100:3.0f}%")
            self.stream.flush()

    def finish(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


class _ProgressReader(io.RawIOBase):
    """Bytes read out in blocks, each block counted on a L{Progress}."""

    def __init__(self, data: bytes, progress: Progress) -> None:
        super().__init__()
        self._view = memoryview(data)
        self._position = 0
        self._progress = progress

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = len(self._view) if size is None or size < 0 else min(size, 1 << 16)
        chunk = bytes(self._view[self._position:self._position + size])
        self._position += len(chunk)
        if chunk:
            self._progress.advance(len(chunk))
        return chunk


class HttpClient:
    """Requests to one base URL with a Bearer token, each on its own connection."""

    def __init__(self, base_url: str, token: str | None, timeout: float,
                 ca_file: str | None = None) -> None:
        parts = urlsplit(base_url)
        self.scheme = parts.scheme
        self.host = parts.hostname or "localhost"
        self.port = parts.port
        self.prefix = parts.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.ca_file = ca_file
        self.base_url = base_url

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                body: bytes | None = None, headers: Mapping[str, str] | None = None,
                timeout: float | None = None, progress: Progress | None = None) -> Answer:
        """@raise Unreachable: when no answer came back within the timeout."""
        target = self.prefix + path
        if query:
            pairs = [(key, value) for key, value in query.items() if value is not None]
            if pairs:
                target += "?" + urlencode(pairs, doseq=True)
        sent = {"User-Agent": f"kl/{kilolock.__version__}", "Accept": "application/json"}
        if self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        sent.update(headers or {})
        seconds = self.timeout if timeout is None else timeout
        connection: http.client.HTTPConnection
        if self.scheme == "https":
            context = ssl.create_default_context(cafile=self.ca_file)
            connection = http.client.HTTPSConnection(self.host, self.port, timeout=seconds,
                                                     context=context)
        else:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=seconds)
        try:
            payload: Any = body
            if body is not None:
                sent["Content-Length"] = str(len(body))
                if progress is not None:
                    payload = _ProgressReader(body, progress)
            connection.request(method, target, body=payload, headers=sent)
            response = connection.getresponse()
            content = response.read()
            return Answer(response.status,
                          {name.lower(): value for name, value in response.getheaders()},
                          content)
        except TimeoutError:
            raise Unreachable(f"no answer within {seconds:g} s") from None
        except ssl.SSLError as error:
            raise Unreachable(f"TLS failed: {error.reason or error}") from None
        except (OSError, http.client.HTTPException) as error:
            raise Unreachable(_describe_os_error(error)) from None
        finally:
            connection.close()


def _describe_os_error(error: Exception) -> str:
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, socket.gaierror):
        return f"cannot resolve the host name ({error.strerror})"
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return text


def server_error(answer: Answer, what: str) -> KlError:
    """The KlError for a failed answer: its exit code, and the server's own
    code and message when it sent the JSON error document."""
    code, message, lock = None, None, None
    try:
        document = json.loads(answer.body) if answer.body else None
    except (ValueError, UnicodeDecodeError):
        document = None
    if isinstance(document, dict) and isinstance(document.get("error"), dict):
        code = document["error"].get("code")
        message = document["error"].get("message")
        lock = document["error"].get("lock")
    elif isinstance(document, dict) and "ID" in document and answer.status in (409, 423):
        lock = document  # the HTTP lane answers a lock conflict with the holder's LockInfo
    if answer.status in (409, 423) and isinstance(lock, dict):
        message = "locked by " + describe_lock_info(lock)
        code = code or "locked"
    if answer.status == 404:
        exit_code = EXIT_NOT_FOUND
    elif answer.status in (409, 423):
        exit_code = EXIT_CONFLICT
    elif answer.status >= 500:
        exit_code = EXIT_UNAVAILABLE
    else:
        exit_code = EXIT_REFUSED
    if message is None:
        message = {401: "missing or wrong token (set KL_TOKEN or --token)",
                   404: "not found"}.get(answer.status, "the server refused the request")
    suffix = f" [{answer.status} {code}]" if code else f" [{answer.status}]"
    retry = answer.headers.get("retry-after")
    if answer.status == 503 and retry:
        suffix += f" (retry after {retry} s)"
    return KlError(exit_code, f"{what}: {message}{suffix}")


def describe_lock_info(info: Mapping[str, Any]) -> str:
    who = info.get("Who") or info.get("who") or "someone"
    operation = info.get("Operation") or info.get("operation") or "an operation"
    lock_id = info.get("ID") or info.get("id") or "?"
    created = info.get("Created") or info.get("created")
    since = ""
    if isinstance(created, str) and parse_created(created) is not None:
        moment = parse_created(created)
        assert moment is not None
        since = f" since {_time(moment)} ({_age((datetime.now(UTC) - moment).total_seconds())})"
    return f"{who} ({operation}){since}, lock ID {lock_id}"


# -- lane discovery --------------------------------------------------------------------


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


class Discovery:
    """The lanes of one server, probed concurrently under one short deadline."""

    def __init__(self, client: HttpClient, deadline_seconds: float) -> None:
        self.client = client
        self.seconds = deadline_seconds
        self.deadline = float("inf")  # set when discovery starts
        self.document: dict[str, Any] | None = None
        self.lanes: dict[str, LaneProbe] = {}
        self._started = False
        self._failure: KlError | None = None

    def remaining(self) -> float:
        return max(0.01, self.deadline - time.monotonic())

    def start(self) -> None:
        """Fetch the discovery document, then start one probe thread per lane."""
        if self._started:
            return
        self._started = True
        self.deadline = time.monotonic() + self.seconds
        where = f"{self.client.base_url}/.well-known/kilolock"
        try:
            answer = self.client.request("GET", "/.well-known/kilolock",
                                         timeout=self.remaining())
        except Unreachable as error:
            self._failure = KlError(EXIT_UNAVAILABLE, f"cannot reach the server at"
                                    f" {self.client.base_url}: {error} (discovery,"
                                    f" deadline {self.seconds:g} s)")
            return
        if answer.status != 200:
            self._failure = KlError(
                EXIT_UNAVAILABLE if answer.status >= 500 else EXIT_PROTOCOL,
                f"{where} answered {answer.status}: is {self.client.base_url} a Kilolock"
                " server?")
            return
        try:
            document = json.loads(answer.body)
        except (ValueError, UnicodeDecodeError):
            document = None
        if not isinstance(document, dict) or not isinstance(document.get("lanes"), list):
            self._failure = KlError(EXIT_PROTOCOL, f"{where} is not a Kilolock discovery"
                                    " document")
            return
        encoded = encoded_paths(document)
        if encoded:
            self._failure = KlError(
                EXIT_PROTOCOL, f"rejected the discovery document of {self.client.base_url}:"
                f" it advertises percent-encoded paths ({', '.join(sorted(encoded))});"
                " Kilolock paths are plain segments (ADR 0018 rule 1)")
            return
        self.document = document
        entries = {lane.get("name"): lane for lane in document["lanes"] if isinstance(lane, dict)}
        for name in (HTTP_LANE, NATIVE_LANE):
            probe = LaneProbe(name)
            self.lanes[name] = probe
            entry = entries.get(name)
            if entry is None or not isinstance(entry.get("basePath"), str):
                probe.error = KlError(EXIT_PROTOCOL, f"{_LANE_TITLES[name]} ({name}) is not"
                                      f" offered by {self.client.base_url}")
                probe.finished.set()
                continue
            probe.entry = entry
            probe.base_path = entry["basePath"].rstrip("/")
            threading.Thread(target=self._probe, args=(probe,), daemon=True,
                             name=f"kl-probe-{name}").start()

    def _probe(self, probe: LaneProbe) -> None:
        title = f"{_LANE_TITLES[probe.name]} ({probe.base_path})"
        try:
            answer = self.client.request("GET", probe.base_path or "/",
                                         timeout=self.remaining())
            if answer.status >= 500:
                probe.error = KlError(EXIT_UNAVAILABLE, f"{title} is unavailable: it answered"
                                      f" {answer.status}")
                return
            try:
                document = json.loads(answer.body)
            except (ValueError, UnicodeDecodeError):
                document = None
            if not isinstance(document, dict):
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
        until the discovery deadline).  @raise KlError: its own error."""
        self.start()
        if self._failure is not None:
            raise self._failure
        probe = self.lanes[name]
        if not probe.finished.wait(self.remaining() + 0.5):
            raise KlError(EXIT_UNAVAILABLE, f"{_LANE_TITLES[name]} ({probe.base_path}) is"
                          f" unavailable: no answer within the discovery deadline of"
                          f" {self.seconds:g} s")
        if probe.error is not None:
            raise probe.error
        assert probe.base_path is not None
        return probe.base_path


# -- state names -----------------------------------------------------------------------


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


# -- output ----------------------------------------------------------------------------


def _time(moment: datetime | str | None) -> str:
    if moment is None:
        return "-"
    if isinstance(moment, str):
        parsed = parse_created(moment)
        if parsed is None:
            return moment
        moment = parsed
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    if size < 1024:
        return f"{size} B"
    for unit in ("KiB", "MiB", "GiB"):
        size_f = size / 1024
        if size_f < 1024 or unit == "GiB":
            return f"{size_f:.1f} {unit}"
        size = int(size_f)
    return f"{size} B"  # pragma: no cover


def _compact(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[:width - 1] + "…"


@define
class Output:
    stdout: IO[str]
    stderr: IO[str]
    as_json: bool = False

    def json_if_asked(self, document: Any) -> bool:
        """With C{--json}, print C{document} and say so (the command is done)."""
        if self.as_json:
            self.json(document)
        return self.as_json

    def json(self, document: Any) -> None:
        self.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")

    def line(self, text: str = "") -> None:
        self.stdout.write(text + "\n")

    def note(self, text: str) -> None:
        self.stderr.write(f"kl: {text}\n")

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        cells = [[str(cell) for cell in row] for row in rows]
        widths = [max([len(header)] + [len(row[i]) for row in cells])
                  for i, header in enumerate(headers)]
        self.line("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
        for row in cells:
            self.line("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


# -- the commands ----------------------------------------------------------------------


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

    # lanes

    def native(self, path: str, what: str, method: str = "GET", expect: int = 200,
               **kwargs: Any) -> Answer:
        return self._call(NATIVE_LANE, path, what, method, expect, **kwargs)

    def http_lane(self, path: str, what: str, method: str = "GET",
                  expect: Iterable[int] = (200,), **kwargs: Any) -> Answer:
        return self._call(HTTP_LANE, path, what, method, expect, **kwargs)

    def _call(self, lane: str, path: str, what: str, method: str, expect: int | Iterable[int],
              **kwargs: Any) -> Answer:
        base = self.discovery.lane(lane)
        try:
            answer = self.client.request(method, base + path, **kwargs)
        except Unreachable as error:
            raise KlError(EXIT_UNAVAILABLE, f"{what}: {_LANE_TITLES[lane]} ({base}) did not"
                          f" answer: {error}") from None
        accepted = {expect} if isinstance(expect, int) else set(expect)
        if answer.status not in accepted:
            raise server_error(answer, what)
        return answer

    def native_json(self, path: str, what: str, **kwargs: Any) -> Any:
        return self.native(path, what, **kwargs).json()


def cmd_states(ctx: Context, args: argparse.Namespace) -> int:
    document = ctx.native_json("/states", "listing states")
    if ctx.out.json_if_asked(document):
        return EXIT_OK
    rows = []
    for state in document["states"]:
        lock = state.get("lock")
        rows.append([
            state["name"], _none(state.get("serial")), state.get("versionCount", 0),
            state.get("resourceCount", 0), _size(state.get("size")),
            _time(state.get("updatedAt")),
            "-" if not lock else f"{lock.get('who') or lock.get('principal')}"
                                 f" ({_age(lock.get('ageSeconds', 0))})",
            "yes" if state.get("ready") else "no",
        ])
    if not rows:
        ctx.out.note("no states yet")
        return EXIT_OK
    ctx.out.table(["NAME", "SERIAL", "VERSIONS", "RESOURCES", "SIZE", "UPDATED", "LOCKED BY",
                   "READY"], rows)
    return EXIT_OK


def _none(value: Any) -> str:
    return "-" if value is None else str(value)


def cmd_state_show(ctx: Context, args: argparse.Namespace) -> int:
    document = ctx.native_json(f"/states/{state_path(args.name)}", f"state {args.name}")
    if ctx.out.json_if_asked(document):
        return EXIT_OK
    lock = document.get("lock")
    fields = [
        ("name", document["name"]),
        ("serial", _none(document.get("serial"))),
        ("lineage", _none(document.get("lineage"))),
        ("version", f"{_none(document.get('currentVersion'))} of"
                    f" {document.get('versionCount', 0)}"),
        ("size", _size(document.get("size"))),
        ("sha256", _none(document.get("sha256"))),
        ("resources", str(document.get("resourceCount", 0))),
        ("updated", _time(document.get("updatedAt"))),
        ("lock", "none" if not lock else
         f"{lock.get('who') or lock.get('principal')} ({lock.get('operation') or '-'}),"
         f" held {_age(lock.get('ageSeconds', 0))}, ID {lock.get('id')}"),
        ("ready", "yes" if document.get("ready") else "no"),
    ]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        ctx.out.line(f"{name.ljust(width)}  {value}")
    ctx.out.line()
    ctx.out.table(["CONDITION", "STATUS", "REASON", "SINCE", "MESSAGE"], [
        [c["type"], c["status"], c["reason"], _time(c.get("lastTransitionTime")), c["message"]]
        for c in document.get("conditions", [])])
    return EXIT_OK


def cmd_state_history(ctx: Context, args: argparse.Namespace) -> int:
    document = ctx.native_json(f"/states/{state_path(args.name)}/-/versions",
                               f"history of {args.name}")
    if ctx.out.json_if_asked(document):
        return EXIT_OK
    rows = []
    for version in document["versions"]:
        kind = version.get("kind", "state_write")
        what = (f"rollback to {version.get('restoredFrom')}" if kind == "state_rollback"
                else "write")
        rows.append([("*" if version.get("current") else " ") + str(version["number"]),
                     version["serial"], version["sha256"][:12], _size(version["size"]),
                     version["principal"], _time(version["createdAt"]), what])
    if not rows:
        ctx.out.note(f"{args.name} has no versions yet")
        return EXIT_OK
    ctx.out.table(["VERSION", "SERIAL", "SHA256", "SIZE", "BY", "WRITTEN", "WHAT"], rows)
    return EXIT_OK


def cmd_state_diff(ctx: Context, args: argparse.Namespace) -> int:
    query = {"from": args.old, "to": args.new}
    document = ctx.native_json(f"/states/{state_path(args.name)}/-/diff",
                               f"diff of {args.name}", query=query)
    if ctx.out.json_if_asked(document):
        return EXIT_OK
    old, new = document["from"], document["to"]
    ctx.out.line(f"{document['state']}: version {old['number']} (serial {old['serial']})"
                 f" -> version {new['number']} (serial {new['serial']})")
    if document.get("lineageChanged"):
        ctx.out.line(f"  lineage changed: {old['lineage']} -> {new['lineage']}")
    resources = document["resources"]
    outputs = document["outputs"]
    if not any(resources.values()) and not any(outputs.values()):
        ctx.out.line("no changes")
        return EXIT_OK

    def label(entry: Mapping[str, Any]) -> str:
        deposed = entry.get("deposed")
        return str(entry["address"]) + (f" (deposed {deposed})" if deposed else "")

    for entry in resources["added"]:
        ctx.out.line(f"+ {label(entry)}")
    for entry in resources["removed"]:
        ctx.out.line(f"- {label(entry)}")
    for entry in resources["changed"]:
        ctx.out.line(f"~ {label(entry)}")
        for change in entry["changes"]:
            ctx.out.line(f"    {change['path']}: {_change_text(change)}")
    for name in outputs["added"]:
        ctx.out.line(f"+ output.{name}")
    for name in outputs["removed"]:
        ctx.out.line(f"- output.{name}")
    for change in outputs["changed"]:
        ctx.out.line(f"~ output.{change['name']}: {_change_text(change)}")
    return EXIT_OK


def _change_text(change: Mapping[str, Any]) -> str:
    if change.get("sensitive"):
        return "(sensitive value changed)"
    before = _compact(change["before"]) if "before" in change else "(absent)"
    after = _compact(change["after"]) if "after" in change else "(absent)"
    return f"{before} -> {after}"


def cmd_state_pull(ctx: Context, args: argparse.Namespace) -> int:
    if args.version is not None:
        answer = ctx.native(f"/states/{state_path(args.name)}/-/versions/{args.version}",
                            f"version {args.version} of {args.name}")
    else:
        answer = ctx.http_lane(f"/{state_path(args.name)}", f"state {args.name}",
                               expect=(200, 404))
        if answer.status == 404:
            raise KlError(EXIT_NOT_FOUND, f"state {args.name}: no version has been written"
                          " (the HTTP lane answered 404)")
    if args.output and args.output != "-":
        Path(args.output).write_bytes(answer.body)
        ctx.out.note(f"wrote {len(answer.body)} bytes to {args.output}")
    else:
        ctx.out.stdout.flush()
        buffer = getattr(ctx.out.stdout, "buffer", None)
        if buffer is not None:
            buffer.write(answer.body)
            buffer.flush()
        else:
            ctx.out.stdout.write(answer.body.decode("utf-8", "replace"))
    return EXIT_OK


def lock_info(operation: str) -> bytes:
    """A LockInfo like Terraform's, naming kl and the local user."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return json.dumps({
        "ID": str(uuid.uuid4()), "Operation": operation, "Info": "",
        "Who": f"{user}@{socket.gethostname()}", "Version": f"kl {kilolock.__version__}",
        "Created": rfc3339(datetime.now(UTC)), "Path": "",
    }, separators=(",", ":")).encode()


def _content_md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body).digest()).decode()  # noqa: S324 - integrity


def _is_empty_state(document: Any) -> bool:
    """Terraform's State.Empty(): no resource instances and no outputs."""
    if not isinstance(document, dict):
        return True
    resources = document.get("resources") or []
    instances = any(resource.get("instances") for resource in resources
                    if isinstance(resource, dict))
    return not instances and not document.get("outputs")


def cmd_state_push(ctx: Context, args: argparse.Namespace) -> int:
    if args.file == "-":
        raw = sys.stdin.buffer.read()
        source = "stdin"
    else:
        try:
            raw = Path(args.file).read_bytes()
        except OSError as error:
            raise KlError(EXIT_USAGE, f"cannot read {args.file}: {error.strerror}") from None
        source = args.file
    try:
        parsed = parse_state(raw)
    except KilolockError as error:
        raise KlError(EXIT_REFUSED, f"{source} is not a state Kilolock accepts: {error.message}") \
            from None
    path = f"/{state_path(args.name)}"
    lock_id = args.lock_id
    own_lock: bytes | None = None
    if lock_id is None and args.lock:
        own_lock = lock_info("OperationTypeStatePush")
        ctx.http_lane(path, f"locking {args.name}", method="LOCK", body=own_lock,
                      headers={"Content-Type": "application/json",
                               "Content-MD5": _content_md5(own_lock)})
        lock_id = json.loads(own_lock)["ID"]
    try:
        answer = ctx.http_lane(path, f"reading {args.name}", expect=(200, 404))
        remote = None if answer.status == 404 else answer.json()
        if remote is not None and raw == answer.body:
            body, serial = raw, parsed.serial
        else:
            body, serial = _push_body(raw, parsed.serial, parsed.lineage, remote, args.force,
                                      args.name, source)
        if remote is not None and body == answer.body:
            ctx.out.note(f"{args.name} already holds exactly {source}: nothing to push")
            result = {"state": args.name, "serial": serial, "lineage": parsed.lineage,
                      "size": len(body), "pushed": False}
        else:
            progress = None
            if args.progress or (args.progress is None and len(body) >= PROGRESS_THRESHOLD
                                 and ctx.out.stderr.isatty()):
                progress = Progress(len(body), ctx.out.stderr)
            ctx.http_lane(path, f"writing {args.name}", method="POST", body=body,
                          query={"ID": lock_id} if lock_id else None,
                          headers={"Content-Type": "application/json",
                                   "Content-MD5": _content_md5(body)},
                          progress=progress)
            if progress is not None:
                progress.finish()
            result = {"state": args.name, "serial": serial, "lineage": parsed.lineage,
                      "size": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                      "pushed": True}
    finally:
        if own_lock is not None:
            try:
                ctx.http_lane(path, f"unlocking {args.name}", method="UNLOCK", body=own_lock,
                              headers={"Content-Type": "application/json",
                                       "Content-MD5": _content_md5(own_lock)})
            except KlError as error:
                ctx.out.note(f"could not release kl's lock {lock_id}: {error.message}")
    if ctx.out.as_json:
        ctx.out.json(result)
    elif result["pushed"]:
        ctx.out.line(f"pushed {source} to {args.name}: serial {serial}, lineage"
                     f" {parsed.lineage}, {_size(len(body))}")
    return EXIT_OK


def _push_body(raw: bytes, serial: int, lineage: str, remote: Any, force: bool, name: str,
               source: str) -> tuple[bytes, int]:
    """Terraform's checks for C{state push} (unless C{force}) and the bytes to
    send: the file itself, or re-serialised with a serial above the remote one
    when its own serial is not (equal serial with other content, or C{--force})."""
    if remote is None:
        return raw, serial
    if not isinstance(remote, dict):
        raise KlError(EXIT_PROTOCOL, f"the current state of {name} is not a JSON object")
    remote_serial = remote.get("serial")
    remote_lineage = remote.get("lineage")
    if not isinstance(remote_serial, int):
        raise KlError(EXIT_PROTOCOL, f"the current state of {name} has no serial")
    if not force and not _is_empty_state(remote):
        if remote_lineage != lineage:
            raise KlError(EXIT_CONFLICT, f"cannot push {source} (lineage {lineage}) over"
                          f" {name}, an unrelated state (lineage {remote_lineage});"
                          " --force pushes anyway")
        if serial < remote_serial:
            raise KlError(EXIT_CONFLICT, f"cannot push {source} (serial {serial}) over {name},"
                          f" which is newer (serial {remote_serial}); --force pushes anyway")
    if serial > remote_serial:
        return raw, serial
    new_serial = remote_serial + 1
    try:
        return restore_body(raw, new_serial, lineage), new_serial
    except KilolockError:
        raise KlError(EXIT_CONFLICT, f"{source} is an encrypted state with serial {serial},"
                      f" not above {name}'s serial {remote_serial}: re-encrypt it with a"
                      " higher serial") from None


def cmd_state_rollback(ctx: Context, args: argparse.Namespace) -> int:
    body = json.dumps({"version": args.version}).encode()
    document = ctx.native_json(f"/states/{state_path(args.name)}/-/rollback",
                               f"rolling back {args.name}", method="POST", body=body,
                               query={"ID": args.lock_id} if args.lock_id else None,
                               headers={"Content-Type": "application/json"})
    if ctx.out.json_if_asked(document):
        return EXIT_OK
    version = document["version"]
    ctx.out.line(f"restored version {document['restoredFrom']} of {document['state']} as"
                 f" version {version['number']} (serial {version['serial']}, lineage"
                 f" {version['lineage']})")
    ctx.out.line("run `terraform plan` to see what the restored state means for the real"
                 " infrastructure")
    return EXIT_OK


def cmd_lock_status(ctx: Context, args: argparse.Namespace) -> int:
    document = ctx.native_json(f"/states/{state_path(args.name)}/-/lock",
                               f"lock of {args.name}")
    if ctx.out.json_if_asked(document):
        return EXIT_OK
    lock = document.get("lock")
    if not lock:
        ctx.out.line(f"{document['state']} is not locked")
        return EXIT_OK
    ctx.out.line(f"{document['state']} is locked")
    for name, value in (("who", lock.get("who") or "-"), ("operation", lock.get("operation")),
                        ("since", _time(lock.get("acquiredAt"))),
                        ("age", _age(lock.get("ageSeconds", 0))), ("lock ID", lock.get("id")),
                        ("principal", lock.get("principal"))):
        ctx.out.line(f"  {name.ljust(9)}  {value}")
    return EXIT_OK


def cmd_unlock(ctx: Context, args: argparse.Namespace) -> int:
    if not args.force:
        raise KlError(EXIT_USAGE, f"kl unlock releases whoever holds the lock of {args.name}:"
                      " pass --force to confirm (check `kl lock status` first)")
    held = None
    try:  # best effort: say what is released (the native lane may be down)
        held = ctx.native_json(f"/states/{state_path(args.name)}/-/lock",
                               f"lock of {args.name}").get("lock")
    except KlError:
        held = None
    ctx.http_lane(f"/{state_path(args.name)}", f"unlocking {args.name}", method="UNLOCK",
                  body=b"", headers={"Content-Type": "application/json",
                                     "Content-MD5": _content_md5(b"")})
    if ctx.out.as_json:
        ctx.out.json({"state": args.name, "released": held})
    elif held:
        ctx.out.line(f"released the lock of {args.name} held by"
                     f" {held.get('who') or held.get('principal')} for"
                     f" {_age(held.get('ageSeconds', 0))} (lock ID {held.get('id')})")
    else:
        ctx.out.line(f"{args.name} is not locked (any lock is released)")
    return EXIT_OK


def cmd_resources(ctx: Context, args: argparse.Namespace) -> int:
    query = {"type": args.type, "address": args.address, "module": args.module,
             "attribute": args.attribute, "state": args.state, "limit": args.limit}
    document = ctx.native_json("/resources", "searching resources", query=query)
    if ctx.out.json_if_asked(document):
        return EXIT_OK
    rows = [[r["state"], r["address"], r["type"], r["module"] or "(root)",
             _compact(r["attributes"].get(args.show), 40) if args.show else ""]
            for r in document["resources"]]
    if not rows:
        ctx.out.note("no resource matches")
        return EXIT_OK
    headers = ["STATE", "ADDRESS", "TYPE", "MODULE"] + ([args.show.upper()] if args.show else [])
    ctx.out.table(headers, [row[:len(headers)] for row in rows])
    if document.get("truncated"):
        ctx.out.note(f"showing the first {len(rows)} matches: narrow the search or raise"
                     " --limit")
    return EXIT_OK


def cmd_outputs(ctx: Context, args: argparse.Namespace) -> int:
    document = ctx.native_json(f"/states/{state_path(args.name)}/-/outputs",
                               f"outputs of {args.name}", query={"version": args.version})
    if ctx.out.json_if_asked(document):
        return EXIT_OK
    rows = [[o["name"], "(sensitive)" if o["sensitive"] else _compact(o["value"], 80)]
            for o in document["outputs"]]
    if not rows:
        ctx.out.note(f"version {document['version']} of {args.name} has no outputs")
        return EXIT_OK
    ctx.out.table(["OUTPUT", "VALUE"], rows)
    return EXIT_OK


def _event_query(args: argparse.Namespace) -> dict[str, Any]:
    return {"state": args.state, "kind": ",".join(args.kind) if args.kind else None,
            "since": args.since, "until": args.until}


def _print_events(ctx: Context, events: list[dict[str, Any]]) -> None:
    if ctx.out.as_json:
        for event in events:  # one JSON document per line: follows stream cleanly
            ctx.out.line(json.dumps(event, ensure_ascii=False))
        return
    for event in events:
        detail = event.get("detail") or {}
        facts = []
        if event.get("serial") is not None:
            facts.append(f"serial {event['serial']}")
        if isinstance(detail, dict):
            if "version" in detail:
                facts.append(f"version {detail['version']}")
            if "restored_version" in detail:
                facts.append(f"restored {detail['restored_version']}")
            if detail.get("who"):
                facts.append(f"who {detail['who']}")
        if event.get("lockId"):
            facts.append(f"lock {event['lockId']}")
        ctx.out.line(f"{event['seq']:>6}  {_time(event['at'])}  {event['kind']:<18}"
                     f"  {event.get('state') or '-':<24}  {event['principal']:<16}"
                     f"  {', '.join(facts)}".rstrip())
    ctx.out.stdout.flush()


def cmd_events(ctx: Context, args: argparse.Namespace) -> int:
    query = _event_query(args)
    if args.all:
        events, after = [], 0
        while True:
            page = ctx.native_json("/events", "listing events",
                                   query={**query, "after": after, "limit": 10000})
            events.extend(page["events"])
            if not page.get("more"):
                break
            after = page["next"]
    else:
        last = args.last if args.last is not None else (10 if args.follow else 100)
        events = ctx.native_json("/events", "listing events",
                                 query={**query, "last": last})["events"]
    if not ctx.out.as_json and not events and not args.follow:
        ctx.out.note("no events")
    if ctx.out.as_json and not args.follow:
        ctx.out.json({"events": events})
    else:
        _print_events(ctx, events)
    if not args.follow:
        return EXIT_OK
    seen = 0
    after = events[-1]["seq"] if events else _head_seq(ctx, query)
    try:
        while args.stop_after is None or seen < args.stop_after:
            time.sleep(args.interval)
            page = ctx.native_json("/events", "following events",
                                   query={**query, "after": after, "limit": 1000})
            fresh = page["events"]
            if args.stop_after is not None:
                fresh = fresh[:args.stop_after - seen]
            if fresh:
                _print_events(ctx, fresh)
                after = fresh[-1]["seq"]
                seen += len(fresh)
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def _head_seq(ctx: Context, query: Mapping[str, Any]) -> int:
    page = ctx.native_json("/events", "following events", query={**query, "last": 1})
    return int(page["events"][-1]["seq"]) if page["events"] else 0


def cmd_events_verify(ctx: Context, args: argparse.Namespace) -> int:
    server = ctx.native_json("/events/verify", "verifying events")
    events: list[dict[str, Any]] = []
    after, scoped = 0, False
    while True:
        page = ctx.native_json("/events", "reading events", query={"after": after,
                                                                   "limit": 10000})
        events.extend(page["events"])
        scoped = scoped or bool(page.get("scoped"))
        if not page.get("more"):
            break
        after = page["next"]
    problem = check_chain(events, complete=not scoped)
    verified = server.get("verified") is True and problem is None
    result = {"verified": verified, "server": server, "checkedEvents": len(events),
              "scoped": scoped, "problem": problem}
    if ctx.out.as_json:
        ctx.out.json(result)
    elif verified:
        ctx.out.line(f"the audit chain verifies: {server['events']} events, head"
                     f" #{server['headSeq']} {server.get('headHash') or '-'}")
        ctx.out.line(f"checked here too: {len(events)} events"
                     + (" (those this token may see)" if scoped else ""))
    else:
        if server.get("verified") is not True:
            ctx.out.line(f"the server finds the chain broken at event #"
                         f"{server.get('firstBrokenSeq')}")
        if problem is not None:
            ctx.out.line(f"kl finds the chain broken: {problem}")
    return EXIT_OK if verified else EXIT_BROKEN_CHAIN


def check_chain(events: list[dict[str, Any]], complete: bool) -> str | None:
    """Recompute every event's hash and each link to its predecessor (all links
    from genesis when C{complete}); None when everything holds, else what broke."""
    chain: list[AuditEvent] = []
    for document in events:
        at = parse_created(document.get("at") or "")
        if at is None:
            return f"event #{document.get('seq')} has no readable time"
        chain.append(AuditEvent(
            seq=document["seq"], tenant=document.get("tenant", ""), kind=document["kind"],
            state_path=document.get("state"), principal=document["principal"], at=at,
            lock_id=document.get("lockId"), serial=document.get("serial"),
            sha256=document.get("sha256"), detail=document.get("detailText", ""),
            prev_hash=document.get("prevHash", ""), hash=document.get("hash", "")))
    broken = verify_chain(chain, complete=complete)
    if broken is None:
        return None
    if broken.expected_seq == 1 and broken.problem in (MISSING, NOT_GENESIS):
        return f"the chain does not start at genesis (first event #{broken.seq})"
    if broken.problem == MISSING:
        return f"event #{broken.expected_seq} is missing"
    if broken.problem == UNLINKED:
        return f"event #{broken.seq} does not link to event #{broken.seq - 1}"
    return f"event #{broken.seq} does not match its hash"


# -- the control API -------------------------------------------------------------------


def control(ctx: Context, method: str, path: str, what: str, expect: Iterable[int] = (200,),
            body: Any = None, query: Mapping[str, Any] | None = None) -> Any:
    settings = ctx.settings
    if not settings.control_token:
        raise KlError(EXIT_USAGE, "the control API needs its token: set KL_CONTROL_TOKEN,"
                      " --control-token or control_token in kl.toml")
    client = HttpClient(settings.control_url, settings.control_token, settings.timeout,
                        settings.ca_file)
    payload = None if body is None else json.dumps(body).encode()
    try:
        answer = client.request(method, "/v1/api" + path, body=payload, query=query,
                                headers={"Content-Type": "application/json"} if payload else None)
    except Unreachable as error:
        raise KlError(EXIT_UNAVAILABLE, f"{what}: the control API at {settings.control_url}"
                      f" did not answer: {error}") from None
    if answer.status not in set(expect):
        raise server_error(answer, what)
    return answer.json() if answer.body else None


def _items(document: Any, *keys: str) -> list[dict[str, Any]]:
    if isinstance(document, list):
        return document
    if isinstance(document, dict):
        for key in keys:
            if isinstance(document.get(key), list):
                return list(document[key])
    return []


def _pick(item: Mapping[str, Any], *names: str) -> str:
    for name in names:
        if item.get(name) not in (None, ""):
            value = item[name]
            return _time(value) if name.endswith(("_at", "At")) else str(value)
    return "-"


def cmd_tenants(ctx: Context, args: argparse.Namespace) -> int:
    action = args.tenants_command or "list"
    slug = quote(args.slug, safe="") if getattr(args, "slug", None) else None
    if action == "list":
        document = control(ctx, "GET", "/tenants", "listing tenants",
                           query={"deleted": "true"} if args.deleted else None)
    elif action == "show":
        document = control(ctx, "GET", f"/tenants/{slug}", f"tenant {args.slug}")
    elif action == "create":
        body = {"slug": args.slug, "name": args.display_name or args.slug}
        document = control(ctx, "POST", "/tenants", f"creating tenant {args.slug}",
                           expect=(200, 201), body=body)
    else:
        if not args.yes:
            raise KlError(EXIT_USAGE, f"deleting tenant {args.slug} revokes its tokens: pass"
                          " --yes to confirm")
        document = control(ctx, "DELETE", f"/tenants/{slug}", f"deleting tenant {args.slug}",
                           expect=(200, 204),
                           query={"states": "delete"} if args.delete_states else None)
    if ctx.out.as_json:
        ctx.out.json(document)
    elif action == "list":
        ctx.out.table(["SLUG", "NAME", "ID", "CREATED", "DELETED"], [
            [_pick(t, "slug"), _pick(t, "name"), _pick(t, "id"),
             _pick(t, "created_at", "createdAt"), _pick(t, "deleted_at", "deletedAt")]
            for t in _items(document, "tenants", "items")])
    elif action == "delete":
        states = (document or {}).get("deleted_states") or []
        tokens = (document or {}).get("revoked_tokens") or []
        ctx.out.line(f"deleted tenant {args.slug}: {_count(len(states), 'state')} deleted,"
                     f" {_count(len(tokens), 'token')} revoked")
    else:
        _print_tenant(ctx, document or {}, created=action == "create")
    return EXIT_OK


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _print_tenant(ctx: Context, tenant: Mapping[str, Any], created: bool) -> None:
    if created:
        ctx.out.line(f"created tenant {_pick(tenant, 'slug')} ({_pick(tenant, 'id')})")
    else:
        for name, keys in (("slug", ("slug",)), ("name", ("name",)), ("id", ("id",)),
                           ("created", ("created_at",)), ("deleted", ("deleted_at",)),
                           ("states", ("state_count",))):
            ctx.out.line(f"{name.ljust(8)}  {_pick(tenant, *keys)}")
    rows = []
    for workspace in tenant.get("workspaces") or []:
        for environment in workspace.get("environments") or [{}]:
            rows.append([_pick(workspace, "name"), _pick(workspace, "id"),
                         _pick(environment, "name"), _pick(environment, "id")])
    if rows:
        ctx.out.line()
        ctx.out.table(["WORKSPACE", "WORKSPACE ID", "ENVIRONMENT", "ENV PUBLIC ID"], rows)


def cmd_tokens(ctx: Context, args: argparse.Namespace) -> int:
    action = args.tokens_command or "list"
    slug = quote(args.slug, safe="")
    if action == "list":
        document = control(ctx, "GET", f"/tenants/{slug}/tokens",
                           f"tokens of tenant {args.slug}")
    elif action == "create":
        body: dict[str, Any] = {"name": args.token_name, "environment": args.environment}
        if args.workspace:
            body["workspace"] = args.workspace
        if args.scope:
            body["scope"] = args.scope
        document = control(ctx, "POST", f"/tenants/{slug}/tokens",
                           f"creating a token for tenant {args.slug}", expect=(200, 201),
                           body=body)
    else:
        document = control(ctx, "DELETE",
                           f"/tenants/{slug}/tokens/{quote(args.token_id, safe='')}",
                           f"revoking token {args.token_id}", expect=(200, 204))
    if ctx.out.as_json:
        ctx.out.json(document)
    elif action == "list":
        ctx.out.table(["ID", "NAME", "WORKSPACE", "ENVIRONMENT", "SCOPE", "LAST USED",
                       "REVOKED"], [
            [_pick(t, "id"), _pick(t, "name"), _pick(t, "workspace_id", "workspaceId"),
             _pick(t, "env_public_id", "envPublicId", "environment"), _pick(t, "scope"),
             _pick(t, "last_used_at", "lastUsedAt"), _pick(t, "revoked_at", "revokedAt")]
            for t in _items(document, "tokens", "items")])
    elif action == "create":
        document = document if isinstance(document, dict) else {}
        ctx.out.line(f"token_secret    {_pick(document, 'token_secret')}")
        ctx.out.note("the secret is shown once: store it now (e.g. as KL_TOKEN or"
                     " TF_HTTP_PASSWORD)")
        for key in ("id", "scope", "workspace_id", "env_public_id", "username",
                    "state_address"):
            if key in document:
                ctx.out.line(f"{key.ljust(14)}  {document[key]}")
        block = document.get("backend_block") or document.get("remote_state_block")
        if isinstance(block, str):
            ctx.out.line()
            ctx.out.line(block.rstrip())
    else:
        ctx.out.line(f"revoked token {args.token_id}")
    return EXIT_OK


# -- the command line ------------------------------------------------------------------


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1")
    return int(text)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not positive")
    return value


def _rfc3339(text: str) -> str:
    if parse_created(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not an RFC 3339 time"
                                         " (2026-01-02T03:04:05Z)")
    return text


def _attribute(text: str) -> str:
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError("use PATH=VALUE, e.g. tags.Name=web")
    return text


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are exit code 2 with one clear line."""

    def error(self, message: str) -> NoReturn:
        raise KlError(EXIT_USAGE, f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection and output (also KL_* variables, kl.toml)")
    group.add_argument("--url", default=argparse.SUPPRESS,
                       help=f"the Kilolock server [KL_URL, default {DEFAULT_URL}]")
    group.add_argument("--token", default=argparse.SUPPRESS,
                       help="API token, sent as a Bearer token [KL_TOKEN]")
    group.add_argument("--control-url", dest="control_url", default=argparse.SUPPRESS,
                       help=f"the control API [KL_CONTROL_URL, default {DEFAULT_CONTROL_URL}]")
    group.add_argument("--control-token", dest="control_token", default=argparse.SUPPRESS,
                       help="the control API's token [KL_CONTROL_TOKEN]")
    group.add_argument("--config", default=argparse.SUPPRESS,
                       help="config file [KL_CONFIG, default ~/.config/kilolock/kl.toml]")
    group.add_argument("--timeout", type=_positive_float, default=argparse.SUPPRESS,
                       help=f"seconds per request [KL_TIMEOUT, default {DEFAULT_TIMEOUT:g}]")
    group.add_argument("--discovery-timeout", dest="discovery_timeout", type=_positive_float,
                       default=argparse.SUPPRESS,
                       help="seconds lane discovery may take [KL_DISCOVERY_TIMEOUT, default"
                            f" {DEFAULT_DISCOVERY_TIMEOUT:g}]")
    group.add_argument("--ca-file", dest="ca_file", default=argparse.SUPPRESS,
                       help="CA bundle for https URLs [KL_CA_FILE]")
    group.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="print JSON for scripts instead of tables")

    parser = _Parser(prog="kl", parents=[common],
                     description="Inspect and repair the states of a Kilolock server.",
                     epilog="Exit codes: 0 ok, 1 refused, 2 usage, 3 not found, 4 locked or"
                            " conflict, 5 unreachable, 6 protocol, 7 broken audit chain."
                            " Reference: docs/kl.md")
    parser.add_argument("--version", action="version", version=f"kl {kilolock.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=_Parser)

    def command(parent: Any, name: str, handler: Callable[..., int], help_text: str) -> Any:
        sub = parent.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    command(commands, "states", cmd_states, "list the states: serial, versions, lock, readiness")

    state = commands.add_parser("state", help="one state: show, history, diff, pull, push,"
                                " rollback")
    state_commands = state.add_subparsers(dest="state_command", required=True,
                                          metavar="SUBCOMMAND", parser_class=_Parser)
    name_help = "the state: NAME or WORKSPACE_ID/ENV_PUBLIC_ID/NAME"
    sub = command(state_commands, "show", cmd_state_show, "a state's summary and conditions")
    sub.add_argument("name", help=name_help)
    sub = command(state_commands, "history", cmd_state_history, "a state's versions")
    sub.add_argument("name", help=name_help)
    sub = command(state_commands, "diff", cmd_state_diff,
                  "what changed between two versions (default: the last change)")
    sub.add_argument("name", help=name_help)
    sub.add_argument("old", nargs="?", type=_positive_int, help="the older version number")
    sub.add_argument("new", nargs="?", type=_positive_int,
                     help="the newer version number (default: the current one)")
    sub = command(state_commands, "pull", cmd_state_pull,
                  "print a state's bytes exactly (the current version, or --version N)")
    sub.add_argument("name", help=name_help)
    sub.add_argument("--version", type=_positive_int, help="a stored version number")
    sub.add_argument("-o", "--output", help="write to this file instead of stdout")
    sub = command(state_commands, "push", cmd_state_push,
                  "write a state file as the new current version (Terraform's checks)")
    sub.add_argument("name", help=name_help)
    sub.add_argument("file", help="the state file ('-' for stdin)")
    sub.add_argument("--force", action="store_true",
                     help="skip the lineage and serial checks")
    sub.add_argument("--lock-id", dest="lock_id",
                     help="write under this lock, which you already hold")
    sub.add_argument("--no-lock", dest="lock", action="store_false",
                     help="do not lock the state while pushing")
    sub.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="always show the upload progress bar on stderr")
    sub.add_argument("--no-progress", dest="progress", action="store_false",
                     help="never show the progress bar")
    sub = command(state_commands, "rollback", cmd_state_rollback,
                  "restore version N as a new current version")
    sub.add_argument("name", help=name_help)
    sub.add_argument("version", type=_positive_int, help="the version number to restore")
    sub.add_argument("--lock-id", dest="lock_id",
                     help="the ID of the lock you hold on the state, if any")

    lock = commands.add_parser("lock", help="lock status")
    lock_commands = lock.add_subparsers(dest="lock_command", required=True,
                                        metavar="SUBCOMMAND", parser_class=_Parser)
    sub = command(lock_commands, "status", cmd_lock_status, "who holds a state's lock, and"
                  " for how long")
    sub.add_argument("name", help=name_help)

    sub = command(commands, "unlock", cmd_unlock, "force-release a state's lock")
    sub.add_argument("name", help=name_help)
    sub.add_argument("--force", action="store_true",
                     help="required: release whoever holds the lock")

    resources = commands.add_parser("resources", help="search resources across states")
    resource_commands = resources.add_subparsers(dest="resources_command", required=True,
                                                 metavar="SUBCOMMAND", parser_class=_Parser)
    sub = command(resource_commands, "search", cmd_resources,
                  "resources of the current versions, by type, address, module, attribute")
    sub.add_argument("--type", help="the resource type, e.g. aws_instance")
    sub.add_argument("--address", help="an address pattern; * matches anything")
    sub.add_argument("--module", help="the module path exactly ('' for the root module)")
    sub.add_argument("--attr", "--attribute", dest="attribute", type=_attribute,
                     help="PATH=VALUE: an attribute's value, e.g. tags.Name=web")
    sub.add_argument("--state", help="only this state")
    sub.add_argument("--limit", type=_positive_int, help="at most this many (default 1000)")
    sub.add_argument("--show", help="also show this top-level attribute")

    sub = command(commands, "outputs", cmd_outputs, "a state's outputs (sensitive withheld)")
    sub.add_argument("name", help=name_help)
    sub.add_argument("--version", type=_positive_int, help="a stored version number")

    events = command(commands, "events", cmd_events, "the audit trail")
    events.add_argument("--state", help="only this state's events")
    events.add_argument("--kind", action="append",
                        help="only this kind (repeatable), e.g. state_write, state_rollback")
    events.add_argument("--since", type=_rfc3339, help="from this time (RFC 3339)")
    events.add_argument("--until", type=_rfc3339, help="before this time (RFC 3339)")
    events.add_argument("--last", type=_positive_int,
                        help="the last N events (default 100; 10 with --follow)")
    events.add_argument("--all", action="store_true", help="every event")
    events.add_argument("--follow", "-f", action="store_true",
                        help="keep printing new events (Ctrl-C stops)")
    events.add_argument("--interval", type=_positive_float, default=2.0,
                        help="seconds between polls with --follow (default 2)")
    events.add_argument("--stop-after", dest="stop_after", type=_positive_int,
                        help="with --follow: stop after N new events")
    event_commands = events.add_subparsers(dest="events_command", metavar="SUBCOMMAND",
                                           parser_class=_Parser)
    command(event_commands, "verify", cmd_events_verify, "check the audit hash chain")

    tenants = command(commands, "tenants", cmd_tenants, "tenants (control API)")
    tenants.set_defaults(deleted=False)
    tenant_commands = tenants.add_subparsers(dest="tenants_command", metavar="SUBCOMMAND",
                                             parser_class=_Parser)
    sub = command(tenant_commands, "list", cmd_tenants, "list tenants")
    sub.add_argument("--deleted", action="store_true", help="include deleted tenants")
    sub = command(tenant_commands, "show", cmd_tenants, "one tenant")
    sub.add_argument("slug")
    sub = command(tenant_commands, "create", cmd_tenants, "create a tenant")
    sub.add_argument("slug")
    sub.add_argument("--name", dest="display_name", help="its display name (default: the slug)")
    sub = command(tenant_commands, "delete", cmd_tenants, "delete a tenant (revokes its tokens)")
    sub.add_argument("slug")
    sub.add_argument("--delete-states", dest="delete_states", action="store_true",
                     help="also delete its states (their audit events are kept)")
    sub.add_argument("--yes", action="store_true", help="required: confirm the deletion")

    tokens = commands.add_parser("tokens", help="API tokens of a tenant (control API)")
    token_commands = tokens.add_subparsers(dest="tokens_command", required=True,
                                           metavar="SUBCOMMAND", parser_class=_Parser)
    sub = command(token_commands, "list", cmd_tokens, "a tenant's tokens (never secrets)")
    sub.add_argument("slug")
    sub = command(token_commands, "create", cmd_tokens, "issue a token (its secret shown once)")
    sub.add_argument("slug")
    sub.add_argument("--name", dest="token_name", required=True, help="what the token is for")
    sub.add_argument("--environment", required=True, help="the environment it may use")
    sub.add_argument("--workspace", help="the workspace (default: the tenant's default)")
    sub.add_argument("--scope", choices=("write", "read"), help="default write")
    sub = command(token_commands, "revoke", cmd_tokens, "revoke a token")
    sub.add_argument("slug")
    sub.add_argument("token_id")
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: IO[str] | None = None,
         stderr: IO[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run one kl command.  @return: the exit code (docs/kl.md)."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    env = os.environ if environ is None else environ
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        output = Output(out, err, as_json=bool(getattr(args, "json", False)))
        settings = resolve_settings(args, env, output.note)
        return int(args.handler(Context(settings, output), args))
    except KlError as error:
        err.write(f"kl: {error.message}\n")
        return error.code
    except KeyboardInterrupt:
        err.write("kl: interrupted\n")
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
