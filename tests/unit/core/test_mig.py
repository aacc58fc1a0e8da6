"""MIG geometry: the rules naive slice counting gets wrong, and enumeration vs brute force."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucarve.config.catalog_file import packaged_catalog
from gpucarve.core import mig
from gpucarve.core.catalog import Catalog, MigGeometry
from gpucarve.core.mig import Instance, smallest_profile_for


def geom(catalog: Catalog, model: str) -> MigGeometry:
    g = catalog.lookup(model).mig
    assert g is not None
    return g


MIG_MODELS = [
    "A100-SXM4-40GB",
    "A100-80GB",
    "A30-24GB",
    "H100-SXM5-80GB",
    "H100-PCIe-80GB",
    "H100-NVL-94GB",
    "H200-141GB",
    "GH200-96GB",
    "B200-180GB",
]


@pytest.mark.parametrize("model", ["A100-80GB", "H100-SXM5-80GB"])
def test_two_3g_and_a_1g_do_not_fit_although_compute_adds_to_seven(
    catalog: Catalog, model: str
) -> None:
    g = geom(catalog, model)
    result = mig.place(g, {"3g.40gb": 2, "1g.10gb": 1})
    assert not result.ok
    assert any("needs 9 memory slices but the GPU has 8" in r for r in result.reasons)
    # the compute slices alone would have allowed it
    assert g.compute_slices >= 3 + 3 + 1


@pytest.mark.parametrize("model", ["A100-80GB", "H100-SXM5-80GB"])
def test_3g_2g_2g_fits_only_as_3g_at_4_and_2g_at_0_and_2(catalog: Catalog, model: str) -> None:
    g = geom(catalog, model)
    options = mig.all_placements(g, {"3g.40gb": 1, "2g.20gb": 2})
    assert options == [(Instance(0, "2g.20gb"), Instance(2, "2g.20gb"), Instance(4, "3g.40gb"))]
    placed = mig.place(g, {"3g.40gb": 1, "2g.20gb": 2})
    assert placed.instances == options[0]


def test_4g_and_7g_start_only_at_zero(catalog: Catalog) -> None:
    g = geom(catalog, "A100-80GB")
    assert g.profile("4g.40gb").starts == (0,)  # type: ignore[union-attr]
    assert g.profile("7g.80gb").starts == (0,)  # type: ignore[union-attr]
    # a 3g already at 0 blocks any 4g
    assert "4g.40gb" not in mig.fitting_profiles(g, [Instance(0, "3g.40gb")])
    # 4g + 3g works only as 4g@0 + 3g@4
    assert mig.all_placements(g, {"4g.40gb": 1, "3g.40gb": 1}) == [
        (Instance(0, "4g.40gb"), Instance(4, "3g.40gb"))
    ]


def test_seven_1g_leave_memory_slice_7_unusable_for_1g(catalog: Catalog) -> None:
    g = geom(catalog, "A100-80GB")
    seven = mig.place(g, {"1g.10gb": 7})
    assert seven.instances is not None
    used = mig.occupancy(g, seven.instances)
    assert used == 0b0111_1111  # slices 0..6; slice 7 free
    assert mig.fitting_profiles(g, seven.instances) == {}
    eighth = mig.place(g, {"1g.10gb": 8})
    assert not eighth.ok
    assert any("at most 7×1g.10gb" in r for r in eighth.reasons)


def test_a30_has_four_slices(catalog: Catalog) -> None:
    g = geom(catalog, "A30-24GB")
    assert (g.memory_slices, g.compute_slices) == (4, 4)
    assert mig.place(g, {"1g.6gb": 4}).ok
    assert not mig.place(g, {"1g.6gb": 4, "2g.12gb": 1}).ok
    assert mig.place(g, {"2g.12gb": 1, "1g.6gb": 2}).ok


def test_media_extension_profile_at_most_once(catalog: Catalog) -> None:
    g = geom(catalog, "A30-24GB")
    result = mig.place(g, {"1g.6gb+me": 1, "2g.12gb+me": 1})
    assert not result.ok
    assert any("one media-extension" in r for r in result.reasons)


def test_geometry_failure_is_explained_with_the_allowed_starts(catalog: Catalog) -> None:
    g = geom(catalog, "A100-80GB")
    # On an empty GPU every multiset that passes the counting checks has a placement (the
    # brute force below confirms it); beside running instances it need not: a 3g at 0 leaves
    # 4 memory and 4 compute slices, exactly a 4g's size, but a 4g can start only at 0.
    result = mig.place(g, {"4g.40gb": 1}, occupied=[Instance(0, "3g.40gb")])
    assert not result.ok
    (reason,) = result.reasons
    assert (
        "the sizes add up (8 of 8 memory slices) but no placement exists beside 3g.40gb@0" in reason
    )
    assert "4g.40gb can start only at memory slice 0" in reason


def test_every_countable_multiset_fits_an_empty_gpu(catalog: Catalog) -> None:
    g = geom(catalog, "A100-80GB")
    valid = set(mig.enumerate_layouts(g, media=True))
    for counts in itertools.product(*[range(p.max_instances + 1) for p in g.profiles]):
        d = {p.name: c for p, c in zip(g.profiles, counts, strict=True) if c}
        if d and not mig.count_problems(g, d):
            assert mig.layout_key(g, d) in valid, d


def test_placement_problems_names_overlap_and_bad_start(catalog: Catalog) -> None:
    g = geom(catalog, "A100-80GB")
    problems = mig.placement_problems(
        g, [Instance(0, "3g.40gb"), Instance(2, "2g.20gb"), Instance(6, "2g.20gb")]
    )
    assert any("overlap" in p for p in problems)
    assert any("2g.20gb@6" in p and "0, 2, 4" in p for p in problems)
    assert (
        mig.placement_problems(
            g, [Instance(4, "3g.40gb"), Instance(0, "2g.20gb"), Instance(2, "2g.20gb")]
        )
        == []
    )


def test_place_keeps_room_for_a_2g(catalog: Catalog) -> None:
    g = geom(catalog, "A100-80GB")
    placed = mig.place(g, {"3g.40gb": 1, "1g.10gb": 1})
    assert placed.instances == (Instance(0, "1g.10gb"), Instance(4, "3g.40gb"))
    assert "2g.20gb" in mig.fitting_profiles(g, placed.instances)


def test_closest_layouts_for_the_case_study(catalog: Catalog) -> None:
    g = geom(catalog, "A100-80GB")
    closest = [mig.describe_layout(k) for k in mig.closest_layouts(g, {"3g.40gb": 2, "1g.10gb": 1})]
    assert closest[0] == "2×3g.40gb"
    assert "3g.40gb + 2g.20gb + 2×1g.10gb" in closest


def _brute_force_layouts(g: MigGeometry, media: bool) -> set[tuple[tuple[str, int], ...]]:
    """Independent check: every multiset within per-profile limits, feasible if some choice
    of starts (combinations per profile) leaves no two instances overlapping."""
    profiles = [p for p in g.profiles if media or not p.media_extensions]
    found = set()
    ranges = [range(p.max_instances + 1) for p in profiles]
    for counts in itertools.product(*ranges):
        if sum(counts) == 0:
            continue
        chosen = [(p, c) for p, c in zip(profiles, counts, strict=True) if c]
        if sum(p.compute_slices * c for p, c in chosen) > g.compute_slices:
            continue
        if sum(p.memory_slices * c for p, c in chosen) > g.memory_slices:
            continue
        if sum(c for p, c in chosen if p.media_extensions) > 1:
            continue
        per_profile = [list(itertools.combinations(p.starts, c)) for p, c in chosen]
        feasible = False
        for starts in itertools.product(*per_profile):
            cells: list[int] = []
            for (p, _), ss in zip(chosen, starts, strict=True):
                for s in ss:
                    cells.extend(range(s, s + p.memory_slices))
            if len(cells) == len(set(cells)):
                feasible = True
                break
        if feasible:
            found.add(mig.layout_key(g, {p.name: c for p, c in chosen}))
    return found


@pytest.mark.parametrize("model", MIG_MODELS)
@pytest.mark.parametrize("media", [False, True])
def test_enumeration_matches_brute_force(catalog: Catalog, model: str, media: bool) -> None:
    g = geom(catalog, model)
    assert set(mig.enumerate_layouts(g, media)) == _brute_force_layouts(g, media)
    assert len(mig.enumerate_layouts(g, media)) == len(set(mig.enumerate_layouts(g, media)))


def test_a100_80gb_layout_count_is_pinned(catalog: Catalog) -> None:
    # Pinned so that a catalog change that alters the geometry is noticed; the brute-force
    # test above is what proves the number right.
    g = geom(catalog, "A100-80GB")
    assert len(mig.enumerate_layouts(g)) == len(_brute_force_layouts(g, media=False))


def test_maximal_layouts_cannot_be_extended(catalog: Catalog) -> None:
    g = geom(catalog, "H100-SXM5-80GB")
    valid = set(mig.enumerate_layouts(g))
    for key in mig.maximal_layouts(g):
        counts = Counter(dict(key))
        for p in g.profiles:
            if p.media_extensions:
                continue
            counts[p.name] += 1
            assert mig.layout_key(g, counts) not in valid
            counts[p.name] -= 1
    assert ("7g.80gb", 1) in {k[0] for k in mig.maximal_layouts(g)}


@settings(max_examples=300, deadline=None)
@given(data=st.data(), model=st.sampled_from(MIG_MODELS))
def test_place_agrees_with_enumeration(catalog: Catalog, data: st.DataObject, model: str) -> None:
    g = geom(catalog, model)
    names = [p.name for p in g.profiles]
    counts = data.draw(st.dictionaries(st.sampled_from(names), st.integers(1, 4), max_size=4))
    valid = set(mig.enumerate_layouts(g, media=True))
    result = mig.place(g, counts)
    key = mig.layout_key(g, counts)
    if not counts:
        assert result.ok
        return
    assert result.ok == (key in valid)
    if result.instances is not None:
        assert mig.placement_problems(g, result.instances) == []
        assert Counter(i.profile for i in result.instances) == Counter(counts)
    else:
        assert result.reasons


@settings(max_examples=200, deadline=None)
@given(data=st.data(), model=st.sampled_from(MIG_MODELS))
def test_fitting_profiles_are_exactly_the_extensions(
    catalog: Catalog, data: st.DataObject, model: str
) -> None:
    g = geom(catalog, model)
    layouts = mig.enumerate_layouts(g, media=True)
    key = data.draw(st.sampled_from(layouts))
    placed = mig.place(g, dict(key))
    assert placed.instances is not None
    fits = mig.fitting_profiles(g, placed.instances)
    for p in g.profiles:
        for s in p.starts:
            ok = not mig.placement_problems(g, [*placed.instances, Instance(s, p.name)])
            assert ok == (s in fits.get(p.name, ())), (key, p.name, s)


@pytest.mark.parametrize("model", ["A100-80GB", "H100-SXM5-80GB"])
def test_the_smallest_profile_holding_a_gpu_share(model: str) -> None:
    geom = packaged_catalog().lookup(model).mig
    assert geom is not None
    cases = {
        1: "1g.10gb", 142: "1g.10gb", 143: "2g.20gb", 285: "2g.20gb", 286: "3g.40gb",
        428: "3g.40gb", 429: "4g.40gb", 571: "4g.40gb", 572: "7g.80gb", 1000: "7g.80gb",
    }  # fmt: skip
    for milli, profile in cases.items():
        assert smallest_profile_for(milli, geom) == profile, milli
    with pytest.raises(ValueError, match=r"1\.\.1000"):
        smallest_profile_for(0, geom)
