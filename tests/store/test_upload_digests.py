"""A large upload's digests are computed beside its parse
(L{kilolock.web.body}): the answers are those of the plain path, in the same
order -- a wrong Content-MD5 first, then what the parse refuses."""

from __future__ import annotations

import base64
import hashlib

import pytest

from kilolock.core.errors import ChecksumMismatch, InvalidState, InvalidText
from kilolock.web.body import THREAD_THRESHOLD, _prepare_large_upload, prepare_upload
from tests.support.stub_client import state_body

PADDING = "p" * THREAD_THRESHOLD


def _large(serial: int = 3) -> bytes:
    resource = {"mode": "managed", "type": "terraform_data", "name": "big",
                "provider": 'provider["terraform.io/builtin/terraform"]',
                "instances": [{"schema_version": 0, "attributes": {"id": PADDING},
                               "sensitive_attributes": []}]}
    return state_body(serial, resources=[resource])


def _md5(body: bytes) -> bytes:
    return base64.b64encode(hashlib.md5(body).digest())


@pytest.mark.parametrize("with_md5", [True, False], ids=["Content-MD5", "none"])
def test_the_large_path_prepares_what_the_plain_one_does(with_md5: bool) -> None:
    body = _large()
    header = _md5(body) if with_md5 else None
    large = _prepare_large_upload(body, header)
    assert large == prepare_upload(body, header)
    assert large.sha256 == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize(("body", "md5_of", "error"), [
    (_large(), b"other", ChecksumMismatch),
    (b"{" + PADDING.encode(), b"other", ChecksumMismatch),
    (b"{" + PADDING.encode(), None, InvalidState),
    (b"[" * 600 + b"\"" + PADDING.encode() + b"\"" + b"]" * 600, None, InvalidText),
    (b"[" * 600 + b"\"" + PADDING.encode() + b"\"" + b"]" * 600, b"other", ChecksumMismatch),
], ids=["wrong md5", "wrong md5 and not JSON", "not JSON", "too deep",
        "wrong md5 and too deep"])
def test_the_large_path_refuses_in_the_plain_paths_order(body: bytes, md5_of: bytes | None,
                                                         error: type[Exception]) -> None:
    header = None if md5_of is None else _md5(md5_of)
    with pytest.raises(error) as large:
        _prepare_large_upload(body, header)
    with pytest.raises(error) as plain:
        prepare_upload(body, header)
    assert str(large.value) == str(plain.value)


def test_a_content_md5_that_is_not_base64_is_refused() -> None:
    with pytest.raises(ChecksumMismatch, match="not valid base64"):
        _prepare_large_upload(_large(), b"***")
