"""The background pruning: a pass every interval on the clock it is given,
page by page, counted in /metrics; it never stops on a failure and stops
with the store.  Time comes from task.Clock."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from twisted.internet.defer import fail
from twisted.internet.task import Clock
from twisted.python.components import proxyForInterface

from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
from kilolock.retention.policy import RetentionPolicy
from kilolock.retention.service import PRUNING_FAILED, STATES_PER_PAGE, RetentionService
from kilolock.server.metrics import Metrics
from kilolock.server.tap import Settings, make_service_from_settings
from kilolock.store.interfaces.retention import IRetentionStore
from kilolock.store.memory.store import MemoryStateStore
from tests.support.at_rest_support import upload
from tests.support.log_events import logged
from tests.support.stub_client import state_body

ALICE = Principal(DEFAULT_TENANT, "alice")
START = datetime(2026, 3, 1, tzinfo=UTC)


def body(serial: int) -> bytes:
    return state_body(serial, resources=[{
        "mode": "managed", "type": "null_resource", "name": "n",
        "provider": 'provider["registry.terraform.io/hashicorp/null"]',
        "instances": [{"schema_version": 0, "sensitive_attributes": [], "attributes": {
            "id": hashlib.sha256(str(serial).encode()).hexdigest()}}]}])


class Times:
    """One clock for the store (datetimes) and the service (task.Clock)."""

    def __init__(self) -> None:
        self.reactor = Clock()
        self.reactor.advance(START.timestamp())

    def __call__(self) -> datetime:
        return datetime.fromtimestamp(self.reactor.seconds(), UTC)

    def advance(self, seconds: float) -> None:
        self.reactor.advance(seconds)


def sample(metrics: Metrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


def filled(times: Times, states: int, versions: int) -> MemoryStateStore:
    store = MemoryStateStore(clock=times)
    for index in range(states):
        for serial in range(1, versions + 1):
            store.write_state(StateKey(DEFAULT_TENANT, f"s{index:03d}"), upload(body(serial)),
                              None, ALICE)
    return store


def test_a_pass_runs_every_interval_and_is_counted() -> None:
    """Nothing before the first interval; then every state is pruned by the
    policy, and /metrics has the versions, the bytes and when it ran."""
    times = Times()
    store = filled(times, 3, 4)
    metrics = Metrics.create()
    service = RetentionService(store, RetentionPolicy(versions=1), times.reactor, 600.0, metrics)
    service.startService()
    times.advance(599)
    assert sample(metrics, "kilolock_versions_pruned_total") == 0
    times.advance(1)
    assert sample(metrics, "kilolock_versions_pruned_total") == 9
    assert sample(metrics, "kilolock_version_bytes_pruned_total") == 3 * sum(
        len(body(serial)) for serial in (1, 2, 3))
    assert sample(metrics, "kilolock_retention_last_run_timestamp_seconds") == \
        times.reactor.seconds()
    assert all(version.pruned for version in store.list_versions(
        StateKey(DEFAULT_TENANT, "s001")).result[:3])
    service.stopService()
    assert not times.reactor.getDelayedCalls()


def test_a_pass_pages_through_many_states() -> None:
    """More states than a page: the pass goes on page after page."""
    times = Times()
    store = filled(times, STATES_PER_PAGE + 5, 2)
    service = RetentionService(store, RetentionPolicy(versions=1), times.reactor, 60.0)
    report = service.run_pass().result
    assert (report.states, report.versions) == (STATES_PER_PAGE + 5, STATES_PER_PAGE + 5)


def test_the_age_limit_follows_the_clock() -> None:
    """A version goes once it is D days old by the service's clock."""
    times = Times()
    store = filled(times, 1, 2)
    service = RetentionService(store, RetentionPolicy(days=2), times.reactor, 3600.0)
    service.startService()
    times.advance(timedelta(days=2).total_seconds() - 3600)
    versions = store.list_versions(StateKey(DEFAULT_TENANT, "s000")).result
    assert not versions[0].pruned
    times.advance(3600)
    versions = store.list_versions(StateKey(DEFAULT_TENANT, "s000")).result
    assert versions[0].pruned and not versions[1].pruned
    service.stopService()


def test_a_failing_pass_is_logged_and_the_next_runs() -> None:
    """A store failure ends the pass, not the loop."""
    times = Times()
    store = filled(times, 1, 3)

    class Flaky(proxyForInterface(IRetentionStore)):  # type: ignore[misc]
        calls = 0

        def retention_candidates(self, *args: Any) -> Any:
            self.calls += 1
            if self.calls == 1:
                return fail(RuntimeError("the database went away"))
            return self.original.retention_candidates(*args)

    metrics = Metrics.create()
    service = RetentionService(Flaky(store), RetentionPolicy(versions=1), times.reactor, 10.0,
                               metrics)
    service.startService()
    with logged(PRUNING_FAILED) as events:
        times.advance(10)
    assert len(events) == 1
    assert sample(metrics, "kilolock_versions_pruned_total") == 0
    times.advance(10)
    assert sample(metrics, "kilolock_versions_pruned_total") == 2
    service.stopService()


def test_without_any_policy_only_overridden_states_are_looked_at() -> None:
    """The server's default keeps everything: a pass asks only for states
    with an override, and prunes by it."""
    times = Times()
    store = filled(times, 2, 3)
    service = RetentionService(store, RetentionPolicy(), times.reactor, 60.0)
    assert service.run_pass().result.versions == 0
    store.set_retention(DEFAULT_TENANT, "s001", RetentionPolicy(versions=2), ALICE)
    report = service.run_pass().result
    assert (report.states, report.versions) == (1, 1)


def test_the_server_runs_the_service_with_its_settings() -> None:
    """twistd kilolock: the store service runs the pruning with the
    server's policy and interval, started and stopped with the store."""
    settings = Settings.from_sources({"store": "memory", "retention-versions": "128",
                                      "retention-days": "28", "retention-interval": "30"},
                                     environ={})
    service = make_service_from_settings(settings, reactor=Clock())
    pruning = service.store_service.background.getServiceNamed("retention")
    assert isinstance(pruning, RetentionService)
    assert (pruning.policy, pruning.interval) == (RetentionPolicy(128, 28), 30.0)


@pytest.mark.parametrize(("option", "value"), [
    ("retention-versions", "0"), ("retention-versions", "many"), ("retention-days", "-3"),
    ("retention-days", "36501"), ("retention-interval", "0"),
])
def test_bad_retention_settings_are_usage_errors(option: str, value: str) -> None:
    """Each bad value is refused before anything is built."""
    from twisted.python import usage

    with pytest.raises(usage.UsageError):
        Settings.from_sources({"store": "memory", option: value}, environ={})


def test_retention_is_off_by_default() -> None:
    """No limit unless configured; off spells no limit too."""
    assert Settings.from_sources({"store": "memory"}, environ={}).retention_versions is None
    settings = Settings.from_sources({"store": "memory"},
                                     environ={"KL_RETENTION_VERSIONS": "off",
                                              "KL_RETENTION_DAYS": "7"})
    assert (settings.retention_versions, settings.retention_days) == (None, 7)


def test_the_command_line_options_are_twistds(tmp_path: Any) -> None:
    """--encryption-keys, --retention-versions, --retention-days and
    --retention-interval are options of `twistd kilolock`, checked at once."""
    from twisted.python import usage

    from kilolock.server.tap import Options

    keys = tmp_path / "keys.toml"
    keys.write_text('active = "k"\n[[keys]]\nid = "k"\n'
                    'secret = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="\n')
    options = Options()
    options.parseOptions(["--store", "memory", "--encryption-keys", str(keys),
                          "--retention-versions", "128", "--retention-days", "off",
                          "--retention-interval", "60"])
    settings = Settings.from_sources(options, environ={})
    assert (settings.encryption_keys, settings.retention_versions, settings.retention_days,
            settings.retention_interval) == (str(keys), 128, None, 60.0)
    keys.write_text('active = "k"\n')
    with pytest.raises(usage.UsageError, match=r"--encryption-keys: .* has no keys"):
        Options().parseOptions(["--store", "memory", "--encryption-keys", str(keys)])
