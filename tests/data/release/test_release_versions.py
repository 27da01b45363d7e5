"""Splits stay put across versions (issue 44): a release of a name keeps every group where the newest earlier
version placed it (its manifest is the record) and places only new groups, toward the asked shares.

Shown through the real release code on real SQLite files: hypothesis grows a library over 10 successive releases,
each adding about 10 % approved clips in new groups and in existing ones (some without the group field, in their
drive's folder); after each, no earlier clip is in another split (compared manifest against manifest, not from the
release's own count, which must say the same: "0 of N earlier clips changed split"), and each split's size is
within the stated bound of its asked share. `--reshuffle` places everything anew and counts what moved; a group the
grouping joins, and a split no longer asked for, are the only ways an earlier clip moves without it, and both are
counted and said."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from data import db as dbmod, taxonomy
from data.clips import Filter
from data.release import make as rel, stratify as splits
from data.release.options import Options
from tests.support.examples import examples
from tests.support.release_library import ClipSpec, build

LEVELS = taxonomy.HAZARD_LEVELS
SHARES = ["train=0.8,val=0.1,test=0.1", "train=0.5,test=0.5", "a=0.7,b=0.2,c=0.1"]


def manifest(r: rel.Result) -> dict[int, dict]:
    return {m["clip_id"]: m for m in map(json.loads, (r.path / "manifest.jsonl").read_text().splitlines())}


def spec(route: int, hazard: str, *, field: bool = True) -> ClipSpec:
    """A clip of drive `route`, in its drive's folder; without the route field when `field` is false."""
    return ClipSpec(
        folder=f"drive{route}", sidecar={"route": f"R{route}"} if field else {"camera": "front"}, hazard=hazard
    )


def release(db, out: Path, shares: str, seed: int, **extra) -> rel.Result:
    options = Options(Filter(), "route", tuple(splits.parse(shares).items()), seed, "grow", **extra)
    return rel.release(db, options, out, actor="lead", role="lead")


@st.composite
def growth(draw):
    """The first library's drives (clips per route) and, for each of 9 later versions, the clips it adds: each
    to an existing drive or a new one, some without the route field."""
    first = draw(st.lists(st.integers(1, 8), min_size=3, max_size=12))
    steps = []
    routes, total = len(first), sum(first)
    for _ in range(9):
        add = max(1, round(total * 0.1))
        clips = []
        for _ in range(add):
            new = draw(st.integers(0, 3)) == 0
            route = routes if new else draw(st.integers(0, routes - 1))
            routes += new
            clips.append((route, draw(st.sampled_from(LEVELS)), draw(st.integers(0, 9)) > 0))
        steps.append(clips)
        total += add
    return first, steps


@settings(
    max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(growth(), st.sampled_from(SHARES), st.integers(0, 2**31))
def test_ten_successive_releases_move_no_earlier_clip_and_keep_the_shares(grow, shares, seed):
    """After each release: 0 earlier clips in another split, as the manifests show and the message says; each
    split's size S within the bound: S - share x N <= E + 2g and share x N - S <= sum(E) + 2g, where g is the
    largest group placed anew in this release and E the clips by which the kept groups alone already exceed a
    split's share (kept groups grow, and only moving them could undo that)."""
    first, steps = grow
    ask = splits.parse(shares)
    with tempfile.TemporaryDirectory() as tmp:
        db = dbmod.connect(Path(tmp) / "wb.db")
        try:
            specs = [spec(route, LEVELS[(route + k) % len(LEVELS)]) for route, n in enumerate(first) for k in range(n)]
            build(db, specs)
            before = manifest(release(db, Path(tmp) / "v1", shares, seed))
            for version, step in enumerate(steps, 2):
                build(db, [spec(route, hazard, field=field) for route, hazard, field in step], start=version * 1000)
                r = release(db, Path(tmp) / f"v{version}", shares, seed)
                after = manifest(r)
                kept = set(before) & set(after)
                moved = [cid for cid in kept if before[cid]["split"] != after[cid]["split"]]
                assert moved == [] and r.changes["moved"] == 0 and r.changes["kept_clips"] == len(kept)
                assert f"0 of {len(kept):,} earlier clips changed split" in rel.summary(r)
                assert f"**0 of {len(kept):,} earlier clips changed split.**" in r.card
                # the bound on each split's size
                n = len(after)
                old_groups = {m["group"] for m in before.values()}
                size = {s: sum(1 for m in after.values() if m["split"] == s) for s in ask}
                pinned = {
                    s: sum(1 for m in after.values() if m["split"] == s and m["group"] in old_groups) for s in ask
                }
                new_sizes = {}
                for m in after.values():
                    if m["group"] not in old_groups:
                        new_sizes[m["group"]] = new_sizes.get(m["group"], 0) + 1
                g = max(new_sizes.values(), default=0)
                excess = {s: max(0.0, pinned[s] - ask[s] * n) for s in ask}
                for s in ask:
                    assert size[s] - ask[s] * n <= excess[s] + 2 * g + 1e-9, (version, s, size, pinned, g)
                    assert ask[s] * n - size[s] <= sum(excess.values()) + 2 * g + 1e-9, (version, s, size, pinned, g)
                before = after
        finally:
            db.close()


def test_reshuffle_places_every_group_anew_and_says_how_many_clips_moved(db, tmp_path):
    build(db, [spec(r, LEVELS[(r + k) % 5]) for r in range(40) for k in range(1 + r % 6)])
    v1 = manifest(release(db, tmp_path / "v1", "train=0.8,val=0.1,test=0.1", 0))
    build(db, [spec(r, "high") for r in range(40, 44)], start=5000)
    v2 = release(db, tmp_path / "v2", "train=0.8,val=0.1,test=0.1", 0)  # kept
    v3 = release(db, tmp_path / "v3", "train=0.8,val=0.1,test=0.1", 1, reshuffle=True)  # another seed, anew
    after2, after3 = manifest(v2), manifest(v3)
    assert all(after2[cid]["split"] == m["split"] for cid, m in v1.items())
    moved = sum(1 for cid, m in after2.items() if after3[cid]["split"] != m["split"])
    assert moved > 0 and v3.changes["moved"] == moved and v3.changes["reshuffled"]
    assert f"{moved:,} of {len(after2):,} earlier clips changed split (--reshuffle placed every group anew)." in (
        rel.summary(v3)
    )
    assert f"**{moved:,} of {len(after2):,} earlier clips changed split.** Every group was placed anew" in v3.card
    # and the version after a reshuffle keeps the reshuffled placement
    v4 = release(db, tmp_path / "v4", "train=0.8,val=0.1,test=0.1", 0)
    assert v4.changes["moved"] == 0 and all(m["split"] == after3[cid]["split"] for cid, m in manifest(v4).items())


def test_a_group_the_grouping_joins_goes_where_most_of_its_earlier_clips_were_and_is_counted(db, tmp_path):
    """v1: drive9's clips carry no route (a folder group); v2: one clip of drive9 names route R9, so the others
    join R9's group. If v1 put R9 elsewhere, the smaller side moves, and the message and card say so."""
    build(db, [spec(r, LEVELS[r % 5]) for r in range(30) for _ in range(3)])
    build(db, [spec(9, "low", field=False) for _ in range(4)], start=2000)  # drive9 has R9 clips: they join R9
    build(db, [ClipSpec(folder="loose", sidecar=None, hazard="none") for _ in range(5)], start=3000)
    v1 = manifest(release(db, tmp_path / "v1", "train=0.5,test=0.5", 0))
    loose = {cid for cid, m in v1.items() if m["group"] == "folder=loose"}
    assert len(loose) == 5 and all(m["group"] == "route=R9" for cid, m in v1.items() if cid >= 2000 and cid < 3000)
    # a clip of route R3 lands in the loose folder: the loose clips now join R3
    build(db, [ClipSpec(folder="loose", sidecar={"route": "R3"}, hazard="none")], start=4000)
    v2 = release(db, tmp_path / "v2", "train=0.5,test=0.5", 0)
    after = manifest(v2)
    assert {after[cid]["group"] for cid in loose} == {"route=R3"}
    r3 = [m["split"] for m in after.values() if m["group"] == "route=R3"]
    assert len(set(r3)) == 1  # one group, one split
    moved = sum(1 for cid, m in v1.items() if after[cid]["split"] != m["split"])
    r3_before = [m["split"] for cid, m in v1.items() if m["group"] in ("route=R3", "folder=loose")]
    assert moved == min(r3_before.count("train"), r3_before.count("test"))  # the smaller side moved
    assert v2.changes["moved"] == moved
    if moved:
        assert "their groups were joined" in rel.summary(v2) and f"**{moved} of" in v2.card


def test_a_split_no_longer_asked_for_is_placed_anew(db, tmp_path):
    build(db, [spec(r, LEVELS[r % 5]) for r in range(30) for _ in range(2)])
    v1 = manifest(release(db, tmp_path / "v1", "train=0.8,val=0.1,test=0.1", 0))
    v2 = release(db, tmp_path / "v2", "train=0.9,test=0.1", 0)
    after = manifest(v2)
    assert all(after[cid]["split"] == m["split"] for cid, m in v1.items() if m["split"] != "val")
    val = [cid for cid, m in v1.items() if m["split"] == "val"]
    assert val and v2.changes["moved"] == len(val)
