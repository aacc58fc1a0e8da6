"""An informer whose API server is gone backs off (half a second doubling to MAX_RETRY_S)
and logs a few lines, not one a retry (600 warnings a minute were measured)."""

from __future__ import annotations

import itertools

from gpucarve.kube.api.informer import MAX_RETRY_S, RETRY_S, retry_after, worth_saying


def test_retries_back_off_to_a_ceiling() -> None:
    delays = [retry_after(n) for n in range(1, 12)]
    assert delays[0] == RETRY_S and delays[1] == 2 * RETRY_S
    assert all(b >= a for a, b in itertools.pairwise(delays))
    assert delays[-1] == MAX_RETRY_S
    assert retry_after(10_000) == MAX_RETRY_S  # no overflow however long it lasts


def test_a_minute_without_the_api_server_logs_a_handful_of_lines() -> None:
    waited, failures, said = 0.0, 0, 0
    while waited < 60:
        failures += 1
        said += worth_saying(failures)
        waited += retry_after(failures)
    assert failures < 20 and said <= 5  # at RETRY_S fixed: 120 failures, 120 lines
