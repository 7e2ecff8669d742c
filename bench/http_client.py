"""A small keep-alive HTTP/1.1 client on asyncio streams, cheap enough per
request that the server, not the client, is what a benchmark measures."""

from __future__ import annotations

import asyncio
import base64
import hashlib


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
                digest = base64.b64encode(hashlib.md5(body).digest()).decode()
                head.append(f"Content-Md5: {digest}")
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        if body:
            self.writer.write(body)
        await self.writer.drain()
        status_line = await self.reader.readline()
        status = int(status_line.split(b" ", 2)[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        payload = await self.reader.readexactly(length) if length else b""
        return status, payload

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()
