"""A small keep-alive HTTP/1.1 client on asyncio streams, cheap enough per
request that the server, not the client, is what a benchmark measures."""

from __future__ import annotations

import asyncio
import base64
import hashlib


def content_md5(body: bytes) -> str:
    """The C{Content-MD5} header Terraform sends with C{body}."""
    return base64.b64encode(hashlib.md5(body).digest()).decode()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response: its status, its headers (names lowercase) and body."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionResetError("the server closed the connection without an answer")
    status = int(status_line.split(b" ", 2)[1])
    headers: dict[str, str] = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    return status, headers, await reader.readexactly(length) if length else b""


class Connection:
    """One keep-alive connection; requests are sent one at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**20)
        return cls(reader, writer)

    async def request(self, method: str, path: str, body: bytes = b"",
                      md5: bool = True) -> tuple[int, bytes]:
        head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1",
                "User-Agent: Go-http-client/1.1", f"Content-Length: {len(body)}"]
        if body:
            head.append("Content-Type: application/json")
            if md5:
                head.append(f"Content-Md5: {content_md5(body)}")
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        if body:
            self.writer.write(body)
        await self.writer.drain()
        status, _, payload = await read_response(self.reader)
        return status, payload

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()
