"""JSON:API answers of the TFE lane: documents and error documents, each
with C{TFP-API-Version}.

Every error of the lane is a JSON:API error document
(C{{"errors": [{"status", "title", "detail", "source"}]}}), made from the
L{KilolockError} that carries its status.  Not-found answers are one
constant document: an unknown id and another tenant's id answer the same
bytes.
"""

from __future__ import annotations

import json
from typing import Any

from kilolock.core.errors import KilolockError, LockConflict, MethodNotAllowed
from kilolock.web.documents import json_bytes
from kilolock.web.resource import Response
from kilolock.web.tfe import API_VERSION

MEDIA_TYPE = b"application/vnd.api+json"

_TITLES = {400: "bad request", 401: "unauthorized", 403: "forbidden", 404: "not found",
           405: "method not allowed", 409: "conflict", 413: "payload too large",
           422: "invalid attribute", 429: "too many requests", 500: "internal error",
           503: "service unavailable"}

#: The one document every "no such thing" answers.
NOT_FOUND_BODY = json.dumps({"errors": [{"status": "404", "title": "not found"}]}).encode()


def api_headers(extra: dict[bytes, bytes] | None = None) -> dict[bytes, bytes]:
    """The headers of every answer of the lane (plus C{extra})."""
    return {b"TFP-API-Version": API_VERSION, b"Cache-Control": b"no-store", **(extra or {})}


def jsonapi_response(document: Any, status: int = 200) -> Response:
    """C{document} as a JSON:API answer (whatever a stored state holds:
    L{json_bytes})."""
    return Response(status, json_bytes(document, indent=None), MEDIA_TYPE, api_headers())


def error_document(status: int, detail: str | None = None,
                   pointer: str | None = None) -> bytes:
    """A JSON:API error document of one error."""
    error: dict[str, Any] = {"status": str(status), "title": _TITLES.get(status, "error")}
    if detail:
        error["detail"] = detail
    if pointer is not None:
        error["source"] = {"pointer": pointer}
    return json.dumps({"errors": [error]}).encode()


def not_found() -> Response:
    """The lane's one not-found answer (unknown and foreign ids alike)."""
    return Response(404, NOT_FOUND_BODY, MEDIA_TYPE, api_headers())


def jsonapi_error_response(error: KilolockError) -> Response:
    """The JSON:API answer of C{error}: its status (a lock conflict is 409,
    as the TFE API answers), its message as the detail, the JSON pointer at
    fault when it names one, and the headers it needs (C{Retry-After},
    C{WWW-Authenticate}, C{Allow})."""
    if error.status == 404:
        return not_found()
    status = 409 if isinstance(error, LockConflict) else error.status
    detail = error.message
    if isinstance(error, LockConflict):
        detail = "the workspace is locked by another client"
    headers = dict(error.headers())
    if isinstance(error, MethodNotAllowed):
        headers = {b"Allow": b", ".join(error.allowed)}
    body = error_document(status, detail, getattr(error, "pointer", None))
    return Response(status, body, MEDIA_TYPE, api_headers(headers))
