"""A bursting fraction's share of its GPU: its request always, an equal part of the room no
request holds up to its limit, and back toward its request as neighbours come."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpucarve.core.fraction_share import Ask, allowed


def test_alone_it_bursts_to_its_limit_and_a_neighbour_takes_it_back_to_the_request() -> None:
    assert allowed([Ask("a", 250, 500)], 1000) == {"a": 500}
    assert allowed([Ask("a", 250, 500), Ask("b", 750, 750)], 1000) == {"a": 250, "b": 750}
    # two bursting: the room is split evenly, each within its limit
    assert allowed([Ask("a", 250, 500), Ask("b", 250, 1000)], 1000) == {"a": 500, "b": 500}
    assert allowed([Ask("a", 100, 1000), Ask("b", 100, 1000)], 1000) == {"a": 500, "b": 500}
    # units that do not split evenly go one each, first by name
    assert allowed([Ask("b", 0, 10), Ask("a", 0, 10)], 3) == {"a": 2, "b": 1}


asks = st.lists(
    st.tuples(st.integers(0, 400), st.integers(0, 600)).map(lambda t: (t[0], t[0] + t[1])),
    min_size=1,
    max_size=6,
)


@given(asks)
def test_requests_held_limits_kept_and_the_room_used_when_someone_can_take_it(
    pairs: list[tuple[int, int]],
) -> None:
    given_asks = [Ask(f"p{i}", r, lim) for i, (r, lim) in enumerate(pairs)]
    capacity = max(1000, sum(r for r, _ in pairs))
    got = allowed(given_asks, capacity)
    for a in given_asks:
        assert a.request <= got[a.pod] <= a.limit
    used = sum(got.values())
    assert used <= capacity
    if used < capacity:  # room left over only when every one is at its limit
        assert all(got[a.pod] == a.limit for a in given_asks)
