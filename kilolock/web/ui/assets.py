"""The dashboard's static files: package data, served under names that carry
a digest of their content, and cached for a year.

The names are computed when the server starts (no build step): C{ui.css}
is served as C{ui.<12 hex of its SHA-256>.css}.  A changed file gets a new
name, so a browser never uses a stale copy, and an old name is a 404.
"""

from __future__ import annotations

import hashlib
from importlib import resources

from attrs import frozen
from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import NotFound
from kilolock.web.resource import AsyncResource, ErrorPage, Response, render_async
from kilolock.web.ui import BASE_PATH
from kilolock.web.ui.headers import SECURITY_HEADERS

#: The files, and the type each is served with.
ASSET_TYPES = {"ui.css": b"text/css; charset=utf-8",
               "ui.js": b"text/javascript; charset=utf-8",
               "favicon.svg": b"image/svg+xml"}

IMMUTABLE = b"public, max-age=31536000, immutable"


@frozen
class Asset:
    name: str
    hashed_name: str
    content: bytes
    content_type: bytes


def hashed(name: str, content: bytes) -> str:
    """C{name} with 12 hex digits of the SHA-256 of C{content} before its extension."""
    stem, _, extension = name.rpartition(".")
    return f"{stem}.{hashlib.sha256(content).hexdigest()[:12]}.{extension}"


class Assets:
    """The static files, read from the package once."""

    def __init__(self) -> None:
        folder = resources.files("kilolock.web.ui") / "static"
        self.by_name: dict[str, Asset] = {}
        self.by_hashed_name: dict[str, Asset] = {}
        for name, content_type in ASSET_TYPES.items():
            content = (folder / name).read_bytes()
            asset = Asset(name, hashed(name, content), content, content_type)
            self.by_name[name] = asset
            self.by_hashed_name[asset.hashed_name] = asset

    def url(self, name: str) -> str:
        """The path a page links C{name} by."""
        return f"{BASE_PATH}/static/{self.by_name[name].hashed_name}"


class AssetResource(AsyncResource):
    """C{GET /ui/static/{hashed name}}: one file, cacheable for a year."""

    route = BASE_PATH + "/static/{asset}"

    def __init__(self, asset: Asset) -> None:
        super().__init__()
        self.asset = asset

    @render_async
    async def render_GET(self, request: Request) -> Response:
        return Response(200, self.asset.content, self.asset.content_type,
                        {**SECURITY_HEADERS, b"Cache-Control": IMMUTABLE})


class StaticFolder(ErrorPage):
    """C{/ui/static}: the files by their hashed names; anything else a 404."""

    def __init__(self, assets: Assets) -> None:
        super().__init__(NotFound("no such file"), BASE_PATH + "/static/{asset}")
        self.assets = assets

    def getChild(self, path: bytes, request: Request) -> Resource:
        asset = self.assets.by_hashed_name.get(path.decode("utf-8", "replace"))
        if asset is None or request.postpath:
            return self
        return AssetResource(asset)
