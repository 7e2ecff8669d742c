"""The hand-off between a large upload's parse and the transaction that
streams its rows (L{kilolock.store.upload_feed}), with real threads and no
database: rows arrive in order, a parse that starts its rows over is
noticed, a failed parse or an abandoned feed never hands out an upload."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import pytest

from kilolock.core.errors import InvalidState
from kilolock.core.model import StateUpload
from kilolock.store.upload_feed import FeedAbandoned, UploadFeed
from kilolock.tfstate.parse import parse_state
from kilolock.tfstate.projection import StreamedResources
from tests.support.stub_client import state_body

PROVIDER = 'provider["terraform.io/builtin/terraform"]'


def resource(name: str) -> dict[str, Any]:
    return {"mode": "managed", "type": "terraform_data", "name": name, "provider": PROVIDER,
            "instances": [{"attributes": {"id": name}}]}


def upload_of(raw: bytes) -> StateUpload:
    return StateUpload(raw=raw, sha256=hashlib.sha256(raw).hexdigest(), parsed=parse_state(raw))


def test_the_rows_come_in_order_and_are_the_projections() -> None:
    raw = state_body(1, resources=[resource(f"r{index}") for index in range(5)])
    feed = UploadFeed(len(raw))
    first_rows = threading.Event()
    go_on = threading.Event()

    def parse(streamed: StreamedResources) -> StateUpload:
        for index in range(2):
            streamed.add(resource(f"r{index}"))
        first_rows.set()
        go_on.wait()
        for index in range(2, 5):
            streamed.add(resource(f"r{index}"))
        return upload_of(raw)

    worker = threading.Thread(target=feed.parse_with, args=(parse,))
    worker.start()
    stream = feed.stream()
    rows = iter(stream)
    first_rows.wait()
    got = [next(rows), next(rows)]
    go_on.set()
    got.extend(rows)
    worker.join()
    projection = feed.wait_parsed().parsed.projection
    assert projection is not None
    assert tuple(got) == projection.resources
    assert (stream.sent, stream.restarted) == (5, False)
    # The rows sent are the parse's own (by identity, as a projection built
    # from them holds them); equal rows made by another parse are not.
    assert stream.is_prefix_of(tuple(feed.streamed.rows))
    assert not stream.is_prefix_of(projection.resources)


def test_rows_started_over_are_noticed() -> None:
    raw = state_body(1, resources=[resource("b0")])
    feed = UploadFeed(len(raw))
    streamed_once = threading.Event()
    go_on = threading.Event()

    def parse(streamed: StreamedResources) -> StateUpload:
        streamed.add(resource("a0"))
        streamed_once.set()
        go_on.wait()
        streamed.restart().add(resource("b0"))
        return upload_of(raw)

    worker = threading.Thread(target=feed.parse_with, args=(parse,))
    worker.start()
    stream = feed.stream()
    rows = iter(stream)
    streamed_once.wait()
    assert next(rows).name == "a0"
    go_on.set()
    assert list(rows) == []
    worker.join()
    projection = feed.wait_parsed().parsed.projection
    assert projection is not None
    assert [row.name for row in projection.resources] == ["b0"]
    assert (stream.restarted, stream.is_prefix_of(projection.resources)) == (True, False)


def test_a_failed_parse_hands_out_nothing() -> None:
    feed = UploadFeed(10)

    def parse(streamed: StreamedResources) -> StateUpload:
        streamed.add(resource("a0"))
        raise InvalidState("the body is not valid JSON")

    with pytest.raises(InvalidState):
        feed.parse_with(parse)
    assert [row.name for row in feed.stream()] == ["a0"]
    with pytest.raises(FeedAbandoned):
        feed.wait_parsed()


def test_an_abandoned_feed_stops_its_reader() -> None:
    feed = UploadFeed(10)
    feed.streamed.add(resource("a0"))
    feed.abandon()
    assert list(feed.stream()) == []  # ends, without failing the COPY
    with pytest.raises(FeedAbandoned):
        feed.wait_parsed()
