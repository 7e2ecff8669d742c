"""One HTTP exchange with a Kilolock server (the standard library's
C{http.client}, a connection per request), and the L{KlError} a refused
answer becomes."""

from __future__ import annotations

import http.client
import io
import json
import socket
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

from attrs import field, frozen

import kilolock
from kilolock.kl.exits import (
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_PROTOCOL,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    KlError,
)
from kilolock.kl.output import Progress, describe_lock_info


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
        """One exchange: C{timeout} bounds each wait for the server (the
        client's own timeout when None); query parameters that are None are
        left out.  @raise Unreachable: when no answer came back in time."""
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


def server_error(answer: Answer, what: str, acquired_at: str | None = None) -> KlError:
    """The KlError for a failed answer: its exit code, and the server's own
    code and message when it sent the JSON error document.  A lock conflict
    names the holder and the server's time of acquisition (the answer's
    C{acquiredAt}, else C{acquired_at})."""
    code, message, lock = None, None, None
    try:
        document = json.loads(answer.body) if answer.body else None
    except (ValueError, UnicodeDecodeError):
        document = None
    if isinstance(document, dict) and isinstance(document.get("error"), dict):
        code = document["error"].get("code")
        message = document["error"].get("message")
        lock = document["error"].get("lock")
        acquired_at = document["error"].get("acquiredAt") or acquired_at
    elif isinstance(document, dict) and isinstance(document.get("errors"), list) \
            and document["errors"] and isinstance(document["errors"][0], dict):
        # A JSON:API error document (the TFE lane).
        first = document["errors"][0]
        message = first.get("detail") or first.get("title")
    elif isinstance(document, dict) and "ID" in document and answer.status in (409, 423):
        lock = document  # the HTTP lane answers a lock conflict with the holder's LockInfo
    if answer.status in (409, 423) and isinstance(lock, dict):
        message = "locked by " + describe_lock_info(lock, acquired_at)
        code = code or "locked"
    if answer.status in (404, 410):  # 410: a version whose bytes were pruned or purged
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
