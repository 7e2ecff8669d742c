"""Values carried out of tests.server.test_nginx_proxy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.nginx import NGINX, NO_NGINX, ConfigMaker, Nginx, NginxFactory


@pytest.fixture
def nginx_factory(tmp_path: Path) -> Iterator[NginxFactory]:
    """C{factory(upstream_port, tls_files=None)} starts an nginx in front of
    that port; all are stopped at the end.  Skips the test when nginx is not
    installed."""
    if NGINX is None:
        pytest.skip(NO_NGINX)
    binary = NGINX
    started: list[Nginx] = []

    def factory(upstream_port: int, tls_files: tuple[Path, Path] | None = None,
                body_limit: str | None = None, config: ConfigMaker | None = None) -> Nginx:
        proxy = Nginx(binary, upstream_port, tmp_path / f"nginx-{len(started)}", tls_files,
                      body_limit, config)
        started.append(proxy)
        return proxy.start()

    yield factory
    for proxy in started:
        proxy.stop()
