"""No group in two splits, for every release (issue 30), shown by property-based tests: hypothesis generates
libraries (clips in folders, with or without the grouping field in their sidecar, of every hazard level and review
state, some simulated, some failed at ingest), releases each through the real code into a real SQLite file, and
checks every manifest against groups computed here, independently of the release's SQL. The placing rule
(data.release.stratify) is checked on its own too: each split within two groups' size of the asked shares."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from data import db as dbmod, taxonomy
from data.clips import Filter
from data.errors import DataError
from data.release import make as rel, stratify as splits
from data.release.options import Options
from tests.support.examples import examples
from tests.support.release_library import ClipSpec, build

LEVELS = taxonomy.HAZARD_LEVELS
SHARES = ["train=0.8,val=0.1,test=0.1", "train=0.5,test=0.5", "a=0.7,b=0.2,c=0.1", "train=0.98,val=0.01,test=0.01"]
# sidecar values as they come: text (with the characters a group name must survive), numbers, empty, nested
VALUES = st.one_of(
    st.sampled_from(["R001", "R002", "a=b", "x/y", "route 9", "é", ""]),
    st.integers(0, 3),
    st.just({"nested": 1}),
)


@st.composite
def clip_specs(draw, field: str) -> ClipSpec:
    sidecar = draw(
        st.one_of(
            st.none(),
            st.fixed_dictionaries({field: VALUES}),
            st.fixed_dictionaries({"camera": st.just("rear")}),  # a sidecar without the field
        )
    )
    return ClipSpec(
        folder=draw(st.sampled_from(["", "d1", "d2", "d2/sub", "d3"])),
        sidecar=sidecar,
        hazard=draw(st.sampled_from(LEVELS)),
        status=draw(st.sampled_from(["approved", "approved", "approved", "unreviewed", "rejected", "broken"])),
        simulated=draw(st.booleans()),
        edited=draw(st.booleans()),
        failed=draw(st.integers(0, 9)) == 0,
    )


@st.composite
def libraries(draw):
    field = draw(st.sampled_from(["route", "vehicle"]))
    specs = draw(st.lists(clip_specs(field), min_size=1, max_size=30))
    return field, specs


def value_of(spec: ClipSpec, field: str) -> str | None:
    """A clip's value of the field as text (a nested object as compact JSON), None without one."""
    value = (spec.sidecar or {}).get(field)
    if value is None or value == "":
        return None
    return json.dumps(value, separators=(",", ":")) if isinstance(value, dict) else str(value)


def expected_group(spec: ClipSpec, field: str, specs: list[ClipSpec]) -> str:
    """A clip's group, computed from what was built (not from the database): the field's value; else the one value
    the other clips of its folder name (every clip of the library, whatever its state); else its folder."""
    value = value_of(spec, field)
    if value is not None:
        return f"{field}={value}"
    votes = {value_of(s, field) for s in specs if s.folder == spec.folder} - {None}
    if len(votes) == 1:
        return f"{field}={votes.pop()}"
    return f"folder={spec.folder or '.'}"


def released(spec: ClipSpec, include_simulated: bool) -> bool:
    return spec.status == "approved" and not spec.failed and (include_simulated or not spec.simulated)


@settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    libraries(),
    st.sampled_from(SHARES),
    st.integers(0, 2**31),
    st.booleans(),
)
def test_no_group_is_in_two_splits_in_any_release(library, shares, seed, include_simulated):
    """Every clip in its drive's group (a clip without the field with the value its folder's clips agree on), and
    no value, no agreeing folder and no folder group in two splits; a field no released clip carries is refused
    with the fields there are, and --group-by folder then groups by folder."""
    field, specs = library
    with tempfile.TemporaryDirectory() as tmp:
        db = dbmod.connect(Path(tmp) / "wb.db")
        try:
            built = build(db, specs)
            want = [cid for cid in built.ids if released(built.specs[cid], include_simulated)]
            options = Options(Filter(), field, tuple(splits.parse(shares).items()), seed, "prop", include_simulated)
            if not want:  # nothing releasable (every clip unapproved, failed at ingest or simulated): refused
                with pytest.raises(DataError, match="Nothing to release"):
                    rel.release(db, options, Path(tmp) / "out", actor="lead", role="lead")
                assert not (Path(tmp) / "out").exists()
                return
            if all(value_of(built.specs[cid], field) is None for cid in want):
                with pytest.raises(DataError, match=f"--group-by {field}: no clip of this release carries"):
                    rel.release(db, options, Path(tmp) / "out", actor="lead", role="lead")
                assert not (Path(tmp) / "out").exists()
                assert not db.execute("SELECT COUNT(*) FROM releases").fetchone()[0]  # no version used
                field = "folder"
                options = dataclasses.replace(options, group_by=field)
            r = rel.release(db, options, Path(tmp) / "out", actor="lead", role="lead")
        finally:
            db.close()
        manifest = [json.loads(line) for line in (r.path / "manifest.jsonl").read_text().splitlines()]
    assert [m["clip_id"] for m in manifest] == want  # exactly what was asked, in clip-id order
    split_of_group: dict[str, set[str]] = defaultdict(set)
    split_of_agreeing_folder: dict[str, set[str]] = defaultdict(set)
    for m in manifest:
        spec = built.specs[m["clip_id"]]
        group = f"folder={spec.folder or '.'}" if field == "folder" else expected_group(spec, field, specs)
        assert m["group"] == group
        split_of_group[group].add(m["split"])
        if field != "folder" and len({value_of(s, field) for s in specs if s.folder == spec.folder} - {None}) == 1:
            split_of_agreeing_folder[spec.folder].add(m["split"])
        assert m["simulated"] == spec.simulated
    assert all(len(s) == 1 for s in split_of_group.values()), dict(split_of_group)
    assert all(len(s) == 1 for s in split_of_agreeing_folder.values()), dict(split_of_agreeing_folder)
    assert sum(r.counts.values()) == len(manifest) and set(r.counts) == set(splits.parse(shares))


GROUP = st.dictionaries(st.sampled_from([*LEVELS, ""]), st.integers(1, 12), min_size=1, max_size=3)


@settings(max_examples=examples(500), deadline=None)
@given(
    st.dictionaries(st.text(min_size=1, max_size=8), GROUP, min_size=1, max_size=60),
    st.sampled_from(SHARES),
    st.integers(0, 2**31),
)
def test_groups_are_placed_within_two_groups_of_the_asked_shares(groups, shares, seed):
    """Every split's count of every hazard level is within 1.5 times the largest group's size of the asked share
    of that level, and its size within twice that: what "as far as the groups allow" comes to."""
    ask = splits.parse(shares)
    placed = splits.assign(groups, ask, seed)
    assert set(placed) == set(groups) and set(placed.values()) <= set(ask)
    assert placed == splits.assign(dict(reversed(list(groups.items()))), ask, seed)  # the order given is irrelevant
    totals: dict[str, int] = defaultdict(int)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for g, hist in groups.items():
        for level, n in hist.items():
            totals[level] += n
            counts[placed[g], level] += n
    biggest = max(sum(h.values()) for h in groups.values())
    for split, share in ask.items():
        size = sum(counts[split, level] for level in totals)
        assert abs(size - share * sum(totals.values())) <= 2 * biggest
        for level, total in totals.items():
            assert abs(counts[split, level] - share * total) <= 1.5 * biggest, (split, level)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.sampled_from(LEVELS), min_size=1, max_size=400), st.sampled_from(SHARES), st.integers(0, 99))
# found by a CI rehearsal: a greedy aiming at the final totals put all 11 in train (val and test empty)
@example(["none", "none", "low", "low", "low", "medium", "medium", "medium", "high", "high", "critical"], SHARES[0], 1)
def test_clips_of_their_own_group_are_stratified_to_within_two_clips(levels, shares, seed):
    """With one clip per group the groups allow nearly any split: within 1.5 clips of the asked share per level
    and 2 in size, however many clips (the deviation does not grow with them)."""
    groups = {f"clip{i}": {level: 1} for i, level in enumerate(levels)}
    ask = splits.parse(shares)
    placed = splits.assign(groups, ask, seed)
    for split, share in ask.items():
        assert abs(sum(1 for g in placed.values() if g == split) - share * len(levels)) <= 2
        for level in set(levels):
            n = sum(1 for i, lv in enumerate(levels) if lv == level and placed[f"clip{i}"] == split)
            assert abs(n - share * levels.count(level)) <= 1.5, (split, level)


def test_the_seed_decides_among_groups_of_like_size():
    groups = {f"g{i}": {"none": 1} for i in range(40)}
    ask = splits.parse(splits.DEFAULT)
    layouts = {tuple(sorted(splits.assign(groups, ask, seed).items())) for seed in range(5)}
    assert len(layouts) == 5


def test_split_shares_say_what_to_write():
    assert splits.parse("train=0.8, val=0.1 ,test=0.1") == {"train": 0.8, "val": 0.1, "test": 0.1}
    for bad, words in (
        ("train=0.8,val=0.1", "add up to 1"),
        ("train=0.5,train=0.5", "twice"),
        ("Train=1", "lower-case"),
        ("train=x", "number"),
        ("train=1.5,val=-0.5", "more than 0"),
        ("", "name=share"),
        ("../x=1", "lower-case"),
    ):
        with pytest.raises(DataError, match=words):
            splits.parse(bad)


def exhaustive_miss(sizes: list[int], ask: dict[str, float]) -> float:
    """The least largest relative size miss over every placement of the groups (all k^n of them, as the set of
    the size vectors they reach: the miss depends on nothing else)."""
    shares = list(ask.values())
    total = sum(sizes)
    reach = {(0,) * len(shares)}
    for g in sizes:
        reach = {r[:i] + (r[i] + g,) + r[i + 1 :] for r in reach for i in range(len(shares))}
    return min(max(abs(n - s * total) / (s * total) for n, s in zip(r, shares)) for r in reach)


HEAVY_TAILED = st.lists(st.one_of(st.integers(1, 4), st.integers(5, 20), st.integers(20, 80)), min_size=1, max_size=14)


@settings(max_examples=examples(150), deadline=None)
@given(HEAVY_TAILED, st.sampled_from(SHARES[:3]), st.integers(0, 2**31), st.data())
@example([40, 9, 4], "train=0.8,val=0.1,test=0.1", 0, None)  # the greedy put 40 and 9 in train: 92.5 / 7.5 / 0
@example([1, 1, 75], "a=0.7,b=0.2,c=0.1", 0, None)  # the bound counted a split at its breakpoint as short: 77 / 0 / 0
def test_up_to_14_groups_are_sized_as_well_as_an_exhaustive_search_does(sizes, shares, seed, data):
    """With up to 14 groups (few, some heavy), the largest relative miss of the sizes equals the least an
    exhaustive search over every placement reaches (data.release.size_search)."""
    levels = [data.draw(st.sampled_from(LEVELS)) if data else LEVELS[i % 5] for i in range(len(sizes))]
    groups = {f"g{i}": {level: n} for i, (n, level) in enumerate(zip(sizes, levels))}
    ask = splits.parse(shares)
    placed = splits.assign(groups, ask, seed)
    got = {s: sum(sizes[i] for i in range(len(sizes)) if placed[f"g{i}"] == s) for s in ask}
    total = sum(sizes)
    miss = max(abs(got[s] - ask[s] * total) / (ask[s] * total) for s in ask)
    assert miss <= exhaustive_miss(sizes, ask) + 1e-9, (got, sizes)


def test_clips_that_lost_their_route_ride_with_it_and_the_card_counts_each_case(db, tmp_path):
    """The issue's case: 5 % of sidecars without the route. Each such clip joins the route its folder's clips
    name (all of them, released or not), so none sits in another split than its drive; a folder whose clips name
    two routes, and one that names none, are groups of their own; the card counts each case."""
    specs = [
        ClipSpec(f"drive{r}", {"route": f"R{r}"} if (r * 10 + k) % 20 else {"camera": "front"}, LEVELS[k % 5])
        for r in range(30)
        for k in range(10)
    ]
    specs += [ClipSpec("drive0", {"route": "R0"}, status="unreviewed")]  # votes too
    specs += [ClipSpec("mixed", {"route": "R1"}), ClipSpec("mixed", {"route": "R2"}), ClipSpec("mixed", None)]
    specs += [ClipSpec("bare", None), ClipSpec("bare", {"camera": "rear"})]
    build(db, specs)
    r = rel.release(db, Options(), tmp_path / "r", actor="lead", role="lead")
    manifest = [json.loads(x) for x in (r.path / "manifest.jsonl").read_text().splitlines()]
    split_of = defaultdict(set)
    for m in manifest:
        folder = m["path"].rpartition("/")[0]
        if folder.startswith("drive"):
            assert m["group"] == f"route=R{folder[5:]}", m
        split_of[m["group"]].add(m["split"])
    assert all(len(s) == 1 for s in split_of.values())
    assert {m["group"] for m in manifest if m["path"].startswith(("mixed/", "bare/"))} >= {
        "folder=mixed",
        "folder=bare",
    }
    assert "| the sidecar's `route` | 287 | 30 |" in r.card
    assert "| no `route`: joined the value its folder's clips agree on | 15 | 15 values |" in r.card
    assert "| no `route`, in a folder whose clips name several values: grouped by folder | 1 | 1 |" in r.card
    assert "| no `route`, in a folder where no clip names one: grouped by folder | 2 | 1 |" in r.card


def test_a_field_no_clip_carries_is_refused_with_the_fields_there_are(db, tmp_path, db_path):
    build(db, [ClipSpec(f"d{i % 4}", {"route": f"R{i % 4}", "camera": "front"}) for i in range(12)])
    build(db, [ClipSpec("loose", {"camera": "rear"})], start=100)
    with pytest.raises(DataError) as e:
        rel.release(db, Options(group_by="rout"), tmp_path / "r", actor="lead", role="lead")
    assert str(e.value) == (
        "--group-by rout: no clip of this release carries that field in its sidecar, so every clip would be grouped "
        "by its folder. The fields its clips carry: camera (13 of 13 clips), route (12 of 13 clips). Give one of "
        "them, or --group-by folder to group every clip by its folder."
    )
    assert not (tmp_path / "r").exists() and db.execute("SELECT COUNT(*) FROM releases").fetchone()[0] == 0
    r = rel.release(db, Options(group_by="folder"), tmp_path / "f", actor="lead", role="lead")
    groups = {json.loads(x)["group"] for x in (r.path / "manifest.jsonl").read_text().splitlines()}
    assert groups == {"folder=d0", "folder=d1", "folder=d2", "folder=d3", "folder=loose"} and r.version == 1


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.integers(0, 90), min_size=2, max_size=4), st.sampled_from(SHARES), st.integers(0, 40))
@example([75, 2, 0], "a=0.7,b=0.2,c=0.1", 0)  # b exactly at its breakpoint, counted short by a rounding: 0.913
def test_the_search_bound_is_the_miss_itself_with_nothing_left_and_never_above_what_free_clips_reach(
    sizes, shares, free
):
    """data.release.size_search.fluid_miss: with no clips left to place it is the sizes' own largest relative miss
    (the search keeps leaves by it: a bound below it kept a placement that missed a split entirely); with `free`
    clips left it is never more than the miss of any way of giving them out one by one."""
    from data.release import size_search as split_search

    ratios = list(splits.parse(shares).values())[: len(sizes)]
    total = sum(sizes) + free
    if not total:
        return
    targets = [r * total for r in ratios]
    sizes = sizes[: len(targets)]
    if free == 0:
        assert split_search.fluid_miss(sizes, targets, 0) == pytest.approx(split_search.miss(sizes, targets), abs=1e-9)
    best = min(
        split_search.miss([n + (free if i == j else 0) for i, n in enumerate(sizes)], targets)
        for j in range(len(sizes))
    )
    assert split_search.fluid_miss(sizes, targets, free) <= best + 1e-9
