"""Values carried out of tests.kl.test_kl_hosted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.fixtures_server import ServerFactory
from tests.support.hosted_support import CONTROL_TOKEN, HostedServer, start_hosted_server
from tests.support.kl_runner import KlResult, kl_environment, run_kl


@pytest.fixture
def hosted(kilolock_server_factory: ServerFactory) -> HostedServer:
    return start_hosted_server(kilolock_server_factory)


@pytest.fixture
def kl(hosted: HostedServer, tmp_path: Path) -> Callable[..., KlResult]:
    """kl with the server and control API URLs and the control token set."""
    env = kl_environment(hosted.base_url, home=tmp_path / "home",
                         KL_CONTROL_URL=hosted.control_url, KL_CONTROL_TOKEN=CONTROL_TOKEN)

    def run(*argv: str, token: str | None = None) -> KlResult:
        return run_kl(*argv, env={**env, **({"KL_TOKEN": token} if token else {})})

    return run
