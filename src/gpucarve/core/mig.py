"""MIG geometry as pure functions.

A GPU instance of a profile occupies the memory slices `[start, start + memory_slices)`, where
`start` must be one of the profile's allowed starts, and two instances may not overlap on that
axis. Compute slices are implied by the profile and may not exceed the GPU's total. At most one
instance with media extensions (`+me`) exists per GPU. Counting slices is not enough: on an
A100-80GB `3g.40gb + 3g.40gb + 1g.10gb` needs only 7 compute slices but 9 memory slices.

A *layout* is a multiset of profiles (what mig-parted's `mig-devices` writes); a *placement*
fixes each instance's start.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from gpucarve.core.amounts import ProfileName
from gpucarve.core.catalog import MigGeometry, MigProfile


@dataclass(frozen=True, order=True, slots=True)
class Instance:
    """One placed GPU instance: a profile at a start on the memory-slice axis."""

    start: int
    profile: ProfileName

    def describe(self) -> str:
        return f"{self.profile}@{self.start}"


Counts = Mapping[str, int]
LayoutKey = tuple[tuple[str, int], ...]


def _mask(profile: MigProfile, start: int) -> int:
    return ((1 << profile.memory_slices) - 1) << start


def profile_order(geom: MigGeometry) -> dict[str, int]:
    """Display order: largest instances first, then by name."""
    ranked = sorted(geom.profiles, key=lambda p: (-p.compute_slices, -p.memory_slices, p.name))
    return {p.name: i for i, p in enumerate(ranked)}


def layout_key(geom: MigGeometry, counts: Counts) -> LayoutKey:
    """The canonical form of a multiset of profiles (largest first, zero counts dropped)."""
    order = profile_order(geom)
    items = [(n, c) for n, c in counts.items() if c > 0]
    return tuple(sorted(items, key=lambda it: (order.get(it[0], len(order)), it[0])))


def describe_layout(counts: Counts | LayoutKey, geom: MigGeometry | None = None) -> str:
    """`3g.40gb + 2g.20gb + 2×1g.10gb`."""
    items: Iterable[tuple[str, int]]
    if isinstance(counts, tuple):
        items = counts
    elif geom is not None:
        items = layout_key(geom, counts)
    else:
        items = sorted(counts.items())
    parts = [name if c == 1 else f"{c}×{name}" for name, c in items if c > 0]
    return " + ".join(parts) if parts else "(no instances)"


def unknown_profiles(geom: MigGeometry, names: Iterable[str]) -> list[str]:
    known = set(geom.profile_names)
    return sorted({n for n in names if n not in known})


def count_problems(geom: MigGeometry, counts: Counts) -> list[str]:
    """Reasons a multiset of profiles can never fit, found without searching placements.

    Unknown profile names are not checked here (see `unknown_profiles`).
    """
    reasons: list[str] = []
    profiles = {n: geom.profile(n) for n in counts}
    chosen = [(p, c) for n, c in counts.items() if c > 0 and (p := profiles[n]) is not None]
    for p, c in chosen:
        if c > p.max_instances:
            reasons.append(f"at most {p.max_instances}×{p.name} fit on one GPU, {c} asked")
    media = [(p, c) for p, c in chosen if p.media_extensions]
    if sum(c for _, c in media) > 1:
        names = describe_layout({p.name: c for p, c in media}, geom)
        reasons.append(
            f"only one media-extension (+me) instance fits per GPU, {names} asked: "
            "the GPU's media engines go to that one instance"
        )
    mem = sum(p.memory_slices * c for p, c in chosen)
    if mem > geom.memory_slices:
        reasons.append(
            f"needs {mem} memory slices but the GPU has {geom.memory_slices}: "
            + _breakdown(chosen, "memory_slices", "memory slice")
        )
    comp = sum(p.compute_slices * c for p, c in chosen)
    if comp > geom.compute_slices:
        reasons.append(
            f"needs {comp} compute slices but the GPU has {geom.compute_slices}: "
            + _breakdown(chosen, "compute_slices", "compute slice")
        )
    return reasons


def _breakdown(chosen: Sequence[tuple[MigProfile, int]], attr: str, unit: str) -> str:
    parts = []
    for p, c in chosen:
        each = int(getattr(p, attr))
        s = f"{p.name} takes {each} {unit}{'s' if each != 1 else ''}"
        if c > 1:
            s += f" (×{c} = {each * c})"
        parts.append(s)
    return ", ".join(parts)


def _expand(geom: MigGeometry, counts: Counts) -> list[MigProfile]:
    """Instances to place, largest first: big instances have the fewest starts."""
    out: list[MigProfile] = []
    for name, c in counts.items():
        p = geom.profile(name)
        assert p is not None, name
        out.extend([p] * c)
    out.sort(key=lambda p: (-p.memory_slices, -p.compute_slices, len(p.starts), p.name))
    return out


def all_placements(
    geom: MigGeometry, counts: Counts, occupied: Sequence[Instance] = (), limit: int = 100_000
) -> list[tuple[Instance, ...]]:
    """Every way to place `counts` beside the `occupied` instances (identical instances in
    ascending start order, so each placement appears once)."""
    base = 0
    for inst in occupied:
        p = geom.profile(inst.profile)
        assert p is not None, inst.profile
        base |= _mask(p, inst.start)
    todo = _expand(geom, counts)
    found: list[tuple[Instance, ...]] = []
    chosen: list[Instance] = []

    def dfs(i: int, used: int) -> None:
        if len(found) >= limit:
            return
        if i == len(todo):
            found.append(tuple(sorted(chosen)))
            return
        p = todo[i]
        low = chosen[-1].start + 1 if i > 0 and todo[i - 1] is p else -1
        for s in p.starts:
            if s < low:
                continue
            m = _mask(p, s)
            if used & m:
                continue
            chosen.append(Instance(s, p.name))
            dfs(i + 1, used | m)
            chosen.pop()

    dfs(0, base)
    return found


@dataclass(frozen=True, slots=True)
class PlaceResult:
    instances: tuple[Instance, ...] | None
    reasons: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.instances is not None


def place(geom: MigGeometry, counts: Counts, occupied: Sequence[Instance] = ()) -> PlaceResult:
    """Find starts for a multiset of profiles, or say exactly why there are none.

    Among all valid placements, pick the one that leaves the most room for further instances
    (so a 3g with a 1g goes to 3g@4 + 1g@0, keeping 0–3 usable by a 2g), then the lowest starts.
    """
    bad = unknown_profiles(geom, counts)
    if bad:
        return PlaceResult(None, tuple(f"unknown MIG profile {b!r}" for b in bad))
    total = Counter({k: v for k, v in counts.items() if v > 0})
    for inst in occupied:
        total[inst.profile] += 1
    reasons = count_problems(geom, total)
    if reasons:
        return PlaceResult(None, tuple(reasons))
    if any(c < 0 for c in counts.values()):
        return PlaceResult(None, ("instance counts must not be negative",))
    options = all_placements(geom, {k: v for k, v in counts.items() if v > 0}, occupied)
    if not options:
        return PlaceResult(None, (_geometry_reason(geom, total, occupied),))
    best = max(options, key=lambda opt: (_room_left(geom, (*occupied, *opt)), _neg(opt)))
    return PlaceResult(best, ())


def _neg(opt: tuple[Instance, ...]) -> tuple[int, ...]:
    return tuple(-i.start for i in opt)


def _room_left(geom: MigGeometry, instances: Sequence[Instance]) -> int:
    """Compute slices of the free candidate placements: a proxy for future flexibility."""
    used = occupancy(geom, instances)
    comp = sum(profile_of(geom, i.profile).compute_slices for i in instances)
    room = 0
    for p in geom.profiles:
        if p.media_extensions or p.compute_slices > geom.compute_slices - comp:
            continue
        room += p.compute_slices * sum(1 for s in p.starts if not used & _mask(p, s))
    return room


def profile_of(geom: MigGeometry, name: str) -> MigProfile:
    """The named profile of a geometry; the name must exist (checked by the caller)."""
    p = geom.profile(name)
    assert p is not None, name
    return p


def _geometry_reason(geom: MigGeometry, total: Counts, occupied: Sequence[Instance]) -> str:
    mem = sum(profile_of(geom, n).memory_slices * c for n, c in total.items())
    starts = "; ".join(
        f"{n} can start only at memory slice{'s' if len(p.starts) > 1 else ''} "
        f"{', '.join(map(str, p.starts))} and takes {p.memory_slices}"
        for n, _ in layout_key(geom, total)
        if (p := profile_of(geom, n))
    )
    where = ""
    if occupied:
        where = " beside " + ", ".join(i.describe() for i in sorted(occupied))
    return (
        f"the sizes add up ({mem} of {geom.memory_slices} memory slices) but no placement "
        f"exists{where}: {starts}"
    )


def occupancy(geom: MigGeometry, instances: Sequence[Instance]) -> int:
    used = 0
    for inst in instances:
        used |= _mask(profile_of(geom, inst.profile), inst.start)
    return used


def placement_problems(geom: MigGeometry, instances: Sequence[Instance]) -> list[str]:
    """Why an explicit placement is invalid (empty when it is valid)."""
    reasons: list[str] = []
    known: list[Instance] = []
    for inst in instances:
        p = geom.profile(inst.profile)
        if p is None:
            reasons.append(f"unknown MIG profile {inst.profile!r}")
            continue
        if inst.start not in p.starts:
            reasons.append(
                f"{inst.describe()}: {p.name} can start only at memory slices "
                f"{', '.join(map(str, p.starts))}"
            )
            continue
        known.append(inst)
    ordered = sorted(known)
    for a, b in itertools.combinations(ordered, 2):
        if _mask(profile_of(geom, a.profile), a.start) & _mask(
            profile_of(geom, b.profile), b.start
        ):
            reasons.append(f"{a.describe()} and {b.describe()} overlap on the memory slices")
    reasons.extend(count_problems(geom, Counter(i.profile for i in known)))
    return reasons


def fitting_profiles(
    geom: MigGeometry, occupied: Sequence[Instance], media: bool = True
) -> dict[str, tuple[int, ...]]:
    """Profiles that can still be created beside running instances, with their free starts."""
    used = occupancy(geom, occupied)
    counts = Counter(i.profile for i in occupied)
    comp = sum(profile_of(geom, i.profile).compute_slices for i in occupied)
    has_media = any(profile_of(geom, i.profile).media_extensions for i in occupied)
    out: dict[str, tuple[int, ...]] = {}
    for p in geom.profiles:
        if p.media_extensions and (has_media or not media):
            continue
        if counts[p.name] >= p.max_instances or comp + p.compute_slices > geom.compute_slices:
            continue
        starts = tuple(s for s in p.starts if not used & _mask(p, s))
        if starts:
            out[p.name] = starts
    return out


# Every real GPU's layouts are found in under 2,400 steps (A100, H100, B200 with +me: 2,319); a
# made-up catalog geometry with many small profiles would take billions.
MAX_LAYOUT_SEARCH = 50_000


class LayoutSearchTooLarge(ValueError):
    """Listing every layout of this geometry would not finish in reasonable time."""


@lru_cache(maxsize=64)
def enumerate_layouts(geom: MigGeometry, media: bool = False) -> tuple[LayoutKey, ...]:
    """Every valid non-empty layout (distinct multiset of profiles) of a GPU.

    Found by a depth-first search over placements; `+me` profiles only when `media`.
    """
    candidates = [
        (p, s, _mask(p, s))
        for p in geom.profiles
        if media or not p.media_extensions
        for s in p.starts
    ]
    seen: set[LayoutKey] = set()
    counts: Counter[str] = Counter()
    steps = 0

    def dfs(i: int, used: int, comp: int, me: int) -> None:
        nonlocal steps
        steps += 1
        if steps > MAX_LAYOUT_SEARCH:
            raise LayoutSearchTooLarge(
                f"more than {MAX_LAYOUT_SEARCH:,} placements to search: the geometry has too "
                "many profiles and starts to list every layout"
            )
        for j in range(i, len(candidates)):
            p, _, m = candidates[j]
            if used & m or comp + p.compute_slices > geom.compute_slices:
                continue
            if counts[p.name] >= p.max_instances or (p.media_extensions and me):
                continue
            counts[p.name] += 1
            seen.add(layout_key(geom, counts))
            dfs(j + 1, used | m, comp + p.compute_slices, me + p.media_extensions)
            counts[p.name] -= 1

    dfs(0, 0, 0, 0)
    order = profile_order(geom)
    return tuple(sorted(seen, key=lambda k: _sort_key(k, order)))


def _sort_key(key: LayoutKey, order: Mapping[str, int]) -> tuple[tuple[int, int], ...]:
    return tuple((order[n], -c) for n, c in key)


def maximal_layouts(geom: MigGeometry, media: bool = False) -> tuple[LayoutKey, ...]:
    """Layouts to which no further instance of any (considered) profile can be added."""
    valid = set(enumerate_layouts(geom, media))
    names = [p.name for p in geom.profiles if media or not p.media_extensions]
    out = []
    for key in enumerate_layouts(geom, media):
        counts = Counter(dict(key))
        extendable = False
        for n in names:
            counts[n] += 1
            if layout_key(geom, counts) in valid:
                extendable = True
            counts[n] -= 1
            if extendable:
                break
        if not extendable:
            out.append(key)
    return tuple(out)


def closest_layouts(geom: MigGeometry, counts: Counts, n: int = 3) -> tuple[LayoutKey, ...]:
    """Valid full layouts nearest to a requested one: keep as much of the request as possible
    (by compute, then memory), then change as few instances as possible."""
    media = any((p := geom.profile(k)) is not None and p.media_extensions for k in counts)
    want = Counter({k: v for k, v in counts.items() if v > 0 and geom.profile(k) is not None})

    def rank(key: LayoutKey) -> tuple[int, int, int, int, tuple[tuple[int, int], ...]]:
        have = Counter(dict(key))
        kept = want & have
        kept_comp = sum(profile_of(geom, k).compute_slices * c for k, c in kept.items())
        kept_mem = sum(profile_of(geom, k).memory_slices * c for k, c in kept.items())
        removed = sum((want - have).values())
        added = sum((have - want).values())
        return (-kept_comp, -kept_mem, removed, added, _sort_key(key, profile_order(geom)))

    return tuple(sorted(maximal_layouts(geom, media), key=rank)[:n])


def profiles_by_size(geom: MigGeometry) -> list[tuple[int, ProfileName]]:
    """(compute slices, name) of the profiles without media extensions, smallest first (then
    by memory: 1g.10gb before 1g.20gb)."""
    plain = [p for p in geom.profiles if not p.media_extensions]
    ordered = sorted(plain, key=lambda p: (p.compute_slices, p.memory_slices, p.name))
    return [(p.compute_slices, p.name) for p in ordered]


def smallest_profile_for(milli: int, geom: MigGeometry) -> str:
    """The smallest profile whose compute share of the GPU holds `milli` thousandths of it
    (on an A100-80GB: up to 142 -> 1g.10gb, 285 -> 2g.20gb, 428 -> 3g.40gb, 571 -> 4g.40gb,
    above -> 7g.80gb, since no 5g or 6g profile exists)."""
    if not 0 < milli <= 1000:
        raise ValueError(f"a GPU share is 1..1000 milli, not {milli}")
    for compute, name in profiles_by_size(geom):
        if milli * geom.compute_slices <= compute * 1000:
            return name
    raise ValueError(f"no profile holds {milli} milli")  # unreachable: the whole-GPU one does
