"""The headers every dashboard answer carries, and HTML responses.

The Content-Security-Policy allows nothing inline: scripts, styles and
images come only from the dashboard's own static files, forms post only
back to it, and no page can be framed.
"""

from __future__ import annotations

from kilolock.web.resource import Response

CONTENT_SECURITY_POLICY = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self';"
    b" connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")

#: On every answer under /ui/ (pages, assets, errors).
SECURITY_HEADERS = {
    b"Content-Security-Policy": CONTENT_SECURITY_POLICY,
    b"X-Content-Type-Options": b"nosniff",
    b"Referrer-Policy": b"same-origin",
    b"X-Frame-Options": b"DENY",
    b"Cross-Origin-Opener-Policy": b"same-origin",
}

HTML = b"text/html; charset=utf-8"
DOCTYPE = b"<!DOCTYPE html>\n"


def page_response(body: bytes, status: int = 200,
                  headers: dict[bytes, bytes] | None = None) -> Response:
    """A rendered page: never cached (it shows one principal's data)."""
    return Response(status, DOCTYPE + body, HTML,
                    {**SECURITY_HEADERS, b"Cache-Control": b"no-store", **(headers or {})})


def redirect(location: str, headers: dict[bytes, bytes] | None = None) -> Response:
    """A 303 to C{location} (a path on this server): after a form, or to sign in."""
    return Response(303, b"", None, {**SECURITY_HEADERS, b"Cache-Control": b"no-store",
                                     b"Location": location.encode("utf-8"),
                                     **(headers or {})})
