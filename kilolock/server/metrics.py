"""Prometheus metrics, in a registry of their own (one per server).

Labels are route templates (C{/v1/states/{name}}), never concrete paths, so
state names, tenants and tokens never become label values.
"""

from __future__ import annotations

from attrs import frozen
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0)


@frozen
class Metrics:
    """Every metric a Kilolock server exports."""

    registry: CollectorRegistry
    requests: Counter
    latency: Histogram
    lock_acquisitions: Counter
    lock_conflicts: Counter
    lock_force_releases: Counter
    writes: Counter
    bytes_stored: Counter
    database_up: Gauge
    database_connections: Gauge
    in_flight: Gauge
    versions_pruned: Counter
    version_bytes_pruned: Counter
    retention_last_run: Gauge
    retention_duration: Gauge
    refusals: Counter
    large_body_bytes: Gauge
    large_bodies_waiting: Gauge
    ui_sign_in_refusals: Counter

    @classmethod
    def create(cls) -> Metrics:
        registry = CollectorRegistry(auto_describe=True)
        return cls(
            registry=registry,
            requests=Counter("kilolock_http_requests", "HTTP requests answered",
                             ["route", "method", "status"], registry=registry),
            latency=Histogram("kilolock_http_request_duration_seconds",
                              "Time from a request's arrival to its answer",
                              ["route", "method"], buckets=LATENCY_BUCKETS,
                              registry=registry),
            lock_acquisitions=Counter("kilolock_lock_acquisitions",
                                      "Locks acquired (idempotent replays excluded)",
                                      registry=registry),
            lock_conflicts=Counter("kilolock_lock_conflicts",
                                   "Requests refused because another client holds the lock",
                                   registry=registry),
            lock_force_releases=Counter("kilolock_lock_force_releases",
                                        "Locks released by force-unlock", registry=registry),
            writes=Counter("kilolock_state_writes", "State versions stored",
                           registry=registry),
            bytes_stored=Counter("kilolock_state_bytes_stored",
                                 "Bytes of state versions stored", registry=registry),
            database_up=Gauge("kilolock_database_up",
                              "1 when the last database probe succeeded", registry=registry),
            database_connections=Gauge(
                "kilolock_database_connections",
                "Database connections in the pool: state=alive (connected) or total",
                ["state"], registry=registry),
            in_flight=Gauge("kilolock_http_requests_in_flight",
                            "Requests being processed", registry=registry),
            versions_pruned=Counter("kilolock_versions_pruned",
                                    "State versions pruned by retention (tombstones left)",
                                    registry=registry),
            version_bytes_pruned=Counter(
                "kilolock_version_bytes_pruned",
                "Stored bytes of the versions retention pruned (as stored: compressed,"
                " and encrypted when on; raw bytes in the memory store)", registry=registry),
            retention_last_run=Gauge("kilolock_retention_last_run_timestamp_seconds",
                                     "When the last retention pass ended (Unix time)",
                                     registry=registry),
            retention_duration=Gauge("kilolock_retention_last_run_duration_seconds",
                                     "How long the last retention pass took",
                                     registry=registry),
            refusals=Counter("kilolock_http_refusals",
                             "Requests and connections refused at the edge of a listener,"
                             " by reason (the JSON error code)", ["listener", "reason"],
                             registry=registry),
            large_body_bytes=Gauge(
                "kilolock_large_body_bytes",
                "Bytes of large request bodies in the budgets: stage=admitted (arriving,"
                " waiting or processing) or processing", ["stage"], registry=registry),
            large_bodies_waiting=Gauge(
                "kilolock_large_bodies_waiting",
                "Large request bodies received and waiting for the parse budget",
                registry=registry),
            ui_sign_in_refusals=Counter(
                "kilolock_ui_sign_in_refusals",
                "Dashboard sign-ins refused: reason=bad_token (counted against the client"
                " address) or throttled (too many bad tokens from it)", ["reason"],
                registry=registry),
        )
