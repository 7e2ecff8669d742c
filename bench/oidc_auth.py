"""What a CI token costs per request: authentication of a static token
against a CI token (RS256 and ES256, verified and matched against the
documented static-mode policy, keys configured inline), and a whole GET of
the Terraform lane in memory with each.  Medians of several rounds, in
microseconds per request; ratios against the static token measured in the
same run.

    python bench/oidc_auth.py [--rounds 5] [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from twisted.internet.defer import Deferred  # noqa: E402

from kilolock.auth.portal import authenticate  # noqa: E402
from tests.support.oidc_issuer import github_claims  # noqa: E402
from tests.support.oidc_support import STATIC_TOKEN, OidcLane, bearer, oidc_basic  # noqa: E402


def synchronously(pending: Any) -> Any:
    results: list[Any] = []
    Deferred.fromCoroutine(pending).addBoth(results.append)
    if not results or hasattr(results[0], "raiseException"):
        raise RuntimeError(f"not done synchronously: {results}")
    return results[0]


def per_call(function: Callable[[], Any], calls: int, rounds: int) -> float:
    """The median over C{rounds} of the mean microseconds per call."""
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            function()
        samples.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    options = parser.parse_args()
    lane = OidcLane()
    portal = lane.site.site.resource.children[b"v1"].children[b"states"].child(
        "x").lane.portal
    rsa = lane.token()
    es = lane.issuer.mint(github_claims(lane.issuer.url, iat=lane.now), kid=lane.issuer.ec_kid)
    lane.request("POST", "/v1/states/prod-network", b'{"version": 4, "serial": 1, '
                 b'"lineage": "l", "resources": [], "outputs": {}}', bearer(STATIC_TOKEN))
    headers = {"static token": bearer(STATIC_TOKEN)["Authorization"],
               "CI token, RS256": oidc_basic(rsa)["Authorization"],
               "CI token, ES256": oidc_basic(es)["Authorization"]}
    print(f"{'credential':<18} {'authenticate':>14} {'ratio':>6} {'GET (in memory)':>16}"
          f" {'ratio':>6}")
    base_auth = base_get = 0.0
    for name, header in headers.items():
        auth = per_call(lambda header=header: synchronously(  # type: ignore[misc]
            authenticate(portal, header.encode())), options.calls, options.rounds)
        get = per_call(lambda header=header: lane.request(  # type: ignore[misc]
            "GET", "/v1/states/prod-network", headers={"Authorization": header}),
            max(options.calls // 10, 50), options.rounds)
        base_auth, base_get = (auth, get) if name == "static token" else (base_auth, base_get)
        print(f"{name:<18} {auth:>11.1f} us {auth / base_auth:>5.1f}x {get:>13.1f} us"
              f" {get / base_get:>5.2f}x")


if __name__ == "__main__":
    main()
