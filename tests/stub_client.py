"""An in-memory client for the resource tree (treq's StubTreq), plus bodies
shaped exactly like the ones Terraform sends."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from typing import Any

from attrs import frozen
from treq.testing import StubTreq

from kilolock.auth import OpenChecker, StaticTokenChecker, build_portal
from kilolock.interfaces import IStateStore
from kilolock.store.memory import MemoryStateStore
from kilolock.web.site import build_root


@frozen
class Reply:
    status: int
    phrase: bytes
    headers: dict[bytes, list[bytes]]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        values = self.headers.get(name.lower())
        return values[0] if values else None

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error_code(self) -> str:
        code: str = self.json()["error"]["code"]
        return code


class StubClient:
    """Requests against a Kilolock resource tree, answered synchronously."""

    def __init__(self, store: IStateStore | None = None, auth_token: str | None = None) -> None:
        self.store = store if store is not None else MemoryStateStore()
        checker = StaticTokenChecker(auth_token) if auth_token else OpenChecker()
        self.treq = StubTreq(build_root(self.store, build_portal(checker), reactor=None))

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Reply:
        sent_headers = {name: [value] for name, value in (headers or {}).items()}
        pending = self.treq.request(method, "http://kilolock.test" + path, data=body,
                                    headers=sent_headers)
        self.treq.flush()
        result: list[Any] = []
        pending.addBoth(result.append)
        assert result, "no response"
        response = result[0]
        if not hasattr(response, "code"):
            response.raiseException()
        content = self.treq.content(response)
        self.treq.flush()
        body_result: list[bytes] = []
        content.addCallback(body_result.append)
        raw_headers = {name.lower(): values
                       for name, values in response.headers.getAllRawHeaders()}
        return Reply(response.code, response.phrase, raw_headers, body_result[0])

    def get(self, path: str, **kwargs: Any) -> Reply:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: bytes, md5: bool = True, **kwargs: Any) -> Reply:
        headers = kwargs.pop("headers", {}) or {}
        headers.setdefault("Content-Type", "application/json")
        if md5:
            headers.setdefault("Content-MD5", content_md5(body))
        return self.request("POST", path, body=body, headers=headers, **kwargs)

    def lock(self, path: str, body: bytes, **kwargs: Any) -> Reply:
        return self.request("LOCK", path, body=body, headers=terraform_headers(body), **kwargs)

    def unlock(self, path: str, body: bytes = b"", **kwargs: Any) -> Reply:
        return self.request("UNLOCK", path, body=body, headers=terraform_headers(body), **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Reply:
        return self.request("DELETE", path, **kwargs)


def content_md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body).digest()).decode()


def terraform_headers(body: bytes) -> dict[str, str]:
    return {"Content-Type": "application/json", "Content-MD5": content_md5(body)}


def state_body(serial: int, lineage: str = "7b1d5c1e-0000-4000-8000-000000000001",
               resources: list[dict[str, Any]] | None = None,
               outputs: dict[str, Any] | None = None) -> bytes:
    """A Terraform v4 state, pretty-printed with a final newline like Terraform."""
    doc = {
        "version": 4,
        "terraform_version": "1.15.5",
        "serial": serial,
        "lineage": lineage,
        "outputs": outputs or {},
        "resources": resources if resources is not None else [{
            "mode": "managed",
            "type": "terraform_data",
            "name": "example",
            "provider": 'provider["terraform.io/builtin/terraform"]',
            "instances": [{
                "schema_version": 0,
                "attributes": {"id": f"id-{serial}", "input": None, "output": None,
                               "triggers_replace": None},
                "sensitive_attributes": [],
            }],
        }],
        "check_results": None,
    }
    return json.dumps(doc, indent=2).encode() + b"\n"


def lock_body(lock_id: str | None = None, who: str = "alice@laptop",
              created: str = "2026-11-29T23:05:20.206526015Z") -> bytes:
    """A LockInfo exactly as Terraform 1.15.5 sends it (9 fractional digits)."""
    return json.dumps({
        "ID": lock_id or str(uuid.uuid4()),
        "Operation": "OperationTypeApply",
        "Info": "",
        "Who": who,
        "Version": "1.15.5",
        "Created": created,
        "Path": "",
    }, separators=(",", ":")).encode()
