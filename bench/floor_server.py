"""The framework floor: a minimal twisted.web server that reads the body and
answers 200 to every request.  What Kilolock is compared against.

    python bench/floor_server.py PORT
"""

from __future__ import annotations

import sys
from typing import Any

from twisted.internet import reactor
from twisted.web.resource import Resource
from twisted.web.server import Site


class Floor(Resource):
    isLeaf = True

    def render(self, request: Any) -> bytes:
        request.content.read()
        request.setHeader(b"Content-Type", b"application/json")
        return b""


if __name__ == "__main__":
    site = Site(Floor())
    reactor.listenTCP(int(sys.argv[1]), site, interface="127.0.0.1")  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]
