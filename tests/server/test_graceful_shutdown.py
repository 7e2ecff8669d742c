"""SIGTERM on a real server: a write in flight is finished and acknowledged,
then the process exits; on PostgreSQL the acknowledged write survives."""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading

from tests.support.fixtures_server import KilolockServer, ServerFactory, StoreLaunch, poll_until
from tests.support.stub_client import content_md5


def large_state(serial: int, resources: int = 60_000) -> bytes:
    doc = {"version": 4, "terraform_version": "1.15.5", "serial": serial,
           "lineage": "graceful", "outputs": {},
           "resources": [{"mode": "managed", "type": "terraform_data", "name": f"r{index}",
                          "provider": 'provider["terraform.io/builtin/terraform"]',
                          "instances": [{"schema_version": 0, "sensitive_attributes": [],
                                         "attributes": {"id": str(index), "input": "x" * 300}}]}
                         for index in range(resources)]}
    return json.dumps(doc, indent=2).encode() + b"\n"


def test_sigterm_finishes_an_in_flight_write(kilolock_server_factory: ServerFactory,
                                             server_store: StoreLaunch) -> None:
    """A POST whose body was sent before SIGTERM is committed and answered 200;
    the process then stops cleanly and exits by the signal, and (PostgreSQL) a
    new server reads the bytes."""
    server: KilolockServer = kilolock_server_factory(args=("--shutdown-grace", "60"))
    body = large_state(1)
    sent = threading.Event()
    outcome: dict[str, object] = {}

    def post() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        try:
            connection.request("POST", "/v1/states/graceful", body=body,
                               headers={"Content-Type": "application/json",
                                        "Content-MD5": content_md5(body)})
            sent.set()
            response = connection.getresponse()
            outcome["status"] = response.status
            outcome["body"] = response.read()
        except OSError as error:
            outcome["error"] = repr(error)
        finally:
            sent.set()
            connection.close()

    writer = threading.Thread(target=post)
    writer.start()
    assert sent.wait(60), "the body was not sent"
    assert server.process is not None
    os.killpg(server.process.pid, signal.SIGTERM)
    writer.join(120)
    assert not writer.is_alive()
    assert outcome.get("status") == 200, outcome
    poll_until(lambda: server.process is not None and server.process.poll() is not None,
               60, "the server to exit after SIGTERM")
    # A clean stop: the reactor ran its shutdown, then twist re-raised the signal.
    assert server.process.returncode == -signal.SIGTERM
    log = server.log_text()
    assert "Received SIGTERM, shutting down." in log
    assert "Main loop terminated." in log
    assert "Traceback" not in log
    if "postgres" in server_store.args:
        again = kilolock_server_factory()
        reply = again.request("GET", "/v1/states/graceful", timeout=120)
        assert reply.status == 200
        assert reply.body == body
