"""A lead releases a training set on the stack `./launch.sh` starts (router gate, fleet key, supervised runner, login
on), in a real Chromium, and reads its per-split counts where a lead reads them: the message and the dataset card
(issue 30; RELIABILITY.md R17).

The library: the launch's demo clips, captioned by the simulated fleet on first launch and approved, and 32 approved
clips with real (not simulated) captions in 8 groups of uneven sizes (9, 6, 4, 3, 2 and 2 clips by the sidecar's
route; 4 and 2 by their folder, having no route), every hazard level, two of them written from scratch by a person,
beside clips of those groups that are not released (unreviewed, rejected, broken). The lead asks for
train=0.7,val=0.2,test=0.1 with seed 2 in the panel.

What the page says is checked against what the data layer computes from the database, not against the release's
own SQL: the approved clips as export records (data.export), grouped by route else folder, placed by the placing
rule over those groups (data.release.stratify.assign), counted here. For each split: its clips, groups and share in
the message and the card's Splits table, its hazard-level shares, its clips per value of every label, its share
written from scratch and (once simulated text is included) its simulated share; each equals the expected figure
and what the split's files hold (manifest, JSONL, parquet, SFT), and the splits sum to the clips released. The
first release leaves the simulated demo text out and says so; the second, with simulated text included, says what
changed. An annotator never sees the panel.
Screenshot: docs/screenshots/browse-release.png. Every page is watched for uncaught JavaScript errors.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pandas as pd
import pytest

from data import captions, clips as clipsmod, export, review_states, taxonomy
from data.clips import Filter
from data.release import make as rel, stratify as splits
from tests.support.browser_fixtures import SCREENSHOTS, login
from tests.support.launched_stack import LaunchedStack
from tests.support.release_library import LABELS, ClipSpec, build

pytestmark = pytest.mark.browser

SHARES = "train=0.7,val=0.2,test=0.1"
SEED = 2
FIELD = "route"  # the panel's default group-by
NONE = "(none)"  # the card's cell for a label without a value


def _group(route: str, *hazards: str, status: str = "approved") -> list[ClipSpec]:
    return [ClipSpec("drives", {FIELD: route, "camera": "front"}, h, status=status) for h in hazards]


LIBRARY = [
    *_group("A", "none", "none", "none", "none", "low", "low", "low", "high", "high"),
    *_group("A", "low", "critical", status="unreviewed"),
    *_group("A", "medium", status="rejected"),
    *_group("B", "medium", "medium", "medium", "none", "none", "critical"),
    *_group("B", "high", status="broken"),
    *_group("C", "low", "low", "none", "high"),
    *_group("D", "none", "none", "none"),
    *_group("E", "medium", "low"),
    *_group("F", "critical"),
    ClipSpec("drives", {FIELD: "F"}, captioned=False),  # no machine caption: a person writes one (WRITTEN)
    # no sidecar: grouped by folder; a sidecar without the route: grouped by folder too
    *[ClipSpec("loose", None, h) for h in ("none", "low", "high")],
    ClipSpec("loose", None, "medium", status="unreviewed"),
    *[ClipSpec("cam2", {"camera": "rear"}, h, edited=True) for h in ("none", "medium")],
    ClipSpec("loose", None, captioned=False),
]
WRITTEN = {"drives": "high", "loose": "low"}  # the uncaptioned clips' folder -> the written caption's hazard level
RELEASED = 32  # approved, real text


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with LaunchedStack(tmp_path_factory.mktemp("launched") / "var") as s:
        s.wait_jobs_done()  # the demo library's first-launch job: its captions are the simulated text
        yield s


def expected(stack, *, include_simulated: bool, kept: dict[str, str] | None = None) -> dict:
    """What the release must hold, from the database through the data layer: the approved clips' export records,
    their groups (route; else the one route the other clips of their folder name; else their folder), placed by
    data.release.stratify over those groups (those in `kept` where the release before put them), counted per
    split."""
    d = stack.db()
    try:
        records = [
            r for r in export.iter_rows(d, Filter(review_status="approved")) if include_simulated or not r["simulated"]
        ]
        votes = defaultdict(set)  # folder -> the routes its clips name (every clip of the library)
        for path, sidecar in d.execute("SELECT path, sidecar FROM clips"):
            value = (json.loads(sidecar) if sidecar else {}).get(FIELD)
            if value not in (None, ""):
                votes[path.rpartition("/")[0] or "."].add(str(value))
    finally:
        d.close()
    group_of, how, hist = {}, {}, defaultdict(Counter)
    for r in records:
        value = (r["sidecar"] or {}).get(FIELD)
        folder = r["path"].rpartition("/")[0] or "."
        if value not in (None, ""):
            group_of[r["clip_id"]], how[r["clip_id"]] = f"{FIELD}={value}", "field"
        elif len(votes[folder]) == 1:
            group_of[r["clip_id"]], how[r["clip_id"]] = f"{FIELD}={next(iter(votes[folder]))}", "joined"
        else:
            group_of[r["clip_id"]] = f"folder={folder}"
            how[r["clip_id"]] = "several" if votes[folder] else "none"
        hist[group_of[r["clip_id"]]][r["labels"]["hazard_level"] or ""] += 1
    shares = splits.parse(SHARES)
    groups = {g: dict(sorted(h.items())) for g, h in hist.items()}
    split_of_group = splits.assign(groups, shares, SEED, kept={g: s for g, s in (kept or {}).items() if g in groups})
    out = {
        "names": list(shares),
        "shares": shares,
        "split": {r["clip_id"]: split_of_group[group_of[r["clip_id"]]] for r in records},
        "group": group_of,
        "how": Counter(how.values()),
        "how_groups": {k: len({group_of[c] for c in how if how[c] == k}) for k in set(how.values())},
        "clips": Counter(),
        "groups": Counter(split_of_group.values()),
        "simulated": Counter(),
        "written": Counter(),
        "labels": {label: defaultdict(Counter) for label in taxonomy.ENUMS},
    }
    for r in records:
        s = out["split"][r["clip_id"]]
        out["clips"][s] += 1
        out["simulated"][s] += bool(r["simulated"])
        out["written"][s] += r["changed"] == "written"
        for label in taxonomy.ENUMS:
            v = r["labels"].get(label)
            if label in taxonomy.MULTI:
                out["labels"][label][s].update(v or [NONE])
            else:
                out["labels"][label][s][NONE if v is None else str(v)] += 1
    return out


def pct(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def card_tables(page) -> list[dict]:
    """Every table of the card as shown: the bold line above it (a label's name) and its rows of cell texts."""
    return page.evaluate(
        """() => { let above = ''; const out = [];
            for (const el of document.querySelectorAll('#release-card p, #release-card table')) {
                if (el.tagName === 'P') { above = el.innerText.trim(); continue; }
                out.push({above, rows: [...el.rows].map(r => [...r.cells].map(c => c.innerText.trim()))});
            }
            return out; }"""
    )


def table(tables: list[dict], header: list[str], above: str | None = None) -> dict[str, list[str]]:
    """The one table with `header` (and the line `above` it): first cell -> the other cells."""
    (t,) = [t for t in tables if t["rows"][0] == header and (above is None or t["above"] == above)]
    rows = {row[0]: row[1:] for row in t["rows"][1:]}
    assert len(rows) == len(t["rows"]) - 1, t  # no row named twice
    return rows


def check_counts_on_the_page(page, release_id: int, want: dict) -> dict[str, int]:
    """The message's and the card's per-split figures against `want`; returns the clips per split read."""
    names, total = want["names"], sum(want["clips"].values())
    said = page.inner_text("#release-result")
    per_split = ", ".join(f"{s} {want['clips'][s]}" for s in names)
    assert f": {total} clips ({per_split})." in said, said
    card = page.inner_text("#release-card")
    assert f"{total} clips in {per_split}." in card, card[:400]
    tables = card_tables(page)

    rows = table(tables, ["split", "asked", "achieved", "clips", "groups"])
    assert list(rows) == names
    read = {s: int(rows[s][2]) for s in names}
    for s in names:
        shown = dict(zip(["asked", "achieved", "clips", "groups"], rows[s]))
        assert shown == {
            "asked": f"{want['shares'][s]:.1%}",
            "achieved": pct(want["clips"][s], total),
            "clips": str(want["clips"][s]),
            "groups": str(want["groups"][s]),
        }, (s, shown)
    assert sum(read.values()) == total

    hazard = want["labels"]["hazard_level"]
    levels = set().union(*hazard.values())
    rows = table(tables, ["hazard level", *names, "all"])
    assert set(rows) == levels
    for level in levels:
        whole = sum(hazard[s][level] for s in names)
        assert rows[level] == [*[pct(hazard[s][level], want["clips"][s]) for s in names], pct(whole, total)], level

    for label in taxonomy.ENUMS:
        counts = want["labels"][label]
        rows = table(tables, ["value", *names, "all"], above=label)
        assert set(rows) == set().union(*counts.values()), label
        for value, cells in rows.items():
            per = [counts[s][value] for s in names]
            assert cells == [*map(str, per), str(sum(per))], (label, value, cells)
        if label not in taxonomy.MULTI:  # one value per clip: a split's column sums to its clips
            assert [sum(counts[s].values()) for s in names] == [want["clips"][s] for s in names], label

    rows = table(tables, ["how a clip got its group", "clips", "groups"])
    how = {
        "the sidecar's route": "field",
        "no route: joined the value its folder's clips agree on": "joined",
        "no route, in a folder whose clips name several values: grouped by folder": "several",
        "no route, in a folder where no clip names one: grouped by folder": "none",
    }
    assert set(rows) == set(how), rows
    for text, key in how.items():
        groups = want["how_groups"].get(key, 0)
        assert rows[text] == [str(want["how"][key]), f"{groups} values" if key == "joined" else str(groups)], text

    header = ["split", "reviewed by a person", "edited (text or labels changed from the machine's)"]
    header += ["written from scratch", "simulated"]
    rows = table(tables, header)
    for s in names:
        assert rows[s][2:] == [pct(want[k][s], want["clips"][s]) for k in ("written", "simulated")], (s, rows[s])
    assert int(page.get_attribute("#release-result", "data-release")) == release_id
    return read


def check_files(stack, release_id: int, want: dict) -> dict[str, str]:
    """The release's files hold the clips, splits and hazard levels the page counted; returns group -> split."""
    d = stack.db()
    try:
        row = rel.get(d, release_id)
    finally:
        d.close()
    names = want["names"]
    assert row["counts"] == {s: want["clips"][s] for s in names}  # as recorded
    path = stack.settings.data_dir / "releases" / f"{row['name']}-v{row['version']}"
    manifest = [json.loads(x) for x in (path / "manifest.jsonl").read_text().splitlines()]
    assert [m["clip_id"] for m in manifest] == sorted(want["split"])  # each released clip once, in id order
    assert {m["clip_id"]: m["split"] for m in manifest} == want["split"]
    assert {m["clip_id"]: m["group"] for m in manifest} == want["group"]
    for s in names:
        frame = pd.read_parquet(path / f"{s}.parquet")
        assert len(frame) == want["clips"][s] == len(json.loads((path / "sft" / f"{s}.json").read_text()))
        assert len((path / f"{s}.jsonl").read_text().splitlines()) == want["clips"][s]
        levels = Counter(NONE if x is None else x for x in frame["labels"].map(lambda v: v["hazard_level"]))
        assert levels == +want["labels"]["hazard_level"][s], s
        assert int(frame["simulated"].sum()) == want["simulated"][s]
        assert len((path / "messages" / f"{s}.jsonl").read_text().splitlines()) == want["clips"][s]
    readme = (path / "README.md").read_text()
    assert readme.startswith("---\nlicense: ") and f'- split: "{names[0]}"' in readme
    lf = json.loads((path / "dataset_info.json").read_text())
    assert set(lf) == {f"{row['name']}_{s}" for s in names if want["clips"][s]}
    return {m["group"]: m["split"] for m in manifest}


def fill_kept(page, selector: str, value: str) -> None:
    """Type `value` into a field of the panel just opened, again if the panel's first render put the default back
    (once in CI a name typed within milliseconds of opening the accordion was lost; a person types later)."""
    page.wait_for_selector(selector, state="visible")
    for _ in range(5):
        page.fill(selector, value)
        page.wait_for_timeout(150)
        if page.input_value(selector) == value:
            return
    raise AssertionError(f"{selector} does not keep {value!r}")


def release(page, previous: int | None) -> int:
    """Click Release and wait for its answer; returns the release's id."""
    page.click("#btn-release")
    if previous is None:
        page.wait_for_selector("#release-result")
    else:
        page.wait_for_function(f"document.querySelector('#release-result')?.dataset.release === '{previous + 1}'")
    return int(page.get_attribute("#release-result", "data-release"))


def test_a_lead_releases_a_set_and_reads_each_splits_counts_as_the_data_layer_computes_them(browser, stack):
    d = stack.db()
    try:
        demo = [r[0] for r in d.execute("SELECT id FROM clips WHERE current_caption_id IS NOT NULL ORDER BY id")]
        assert len(demo) == stack.demo_count
        for cid in demo:  # the first launch's captions, from the simulated fleet, approved
            cap = clipsmod.get(d, cid)["caption"]
            assert cap["simulated"], cap
            review_states.set_review(d, cid, status="approved", user="lead", base_caption_id=cap["id"])
        demo_job = d.execute("SELECT MAX(job_id) FROM captions WHERE simulated = 1").fetchone()[0]
        built = build(d, LIBRARY)
        for cid, spec in built.specs.items():
            if not spec.captioned:
                labels = {**LABELS, "hazard_level": WRITTEN[spec.folder]}
                text = "A person's own caption of a calm drive."
                cap = captions.save_human(d, cid, text=text, labels=labels, author="ann", base_caption_id=None)
                review_states.set_review(d, cid, status="approved", user="lead", base_caption_id=cap["id"])
    finally:
        d.close()
    want = expected(stack, include_simulated=False)
    # the input shows a wrong count: every split holds clips, no two the same number, more than one group in one
    assert sum(want["clips"].values()) == RELEASED and len(want["groups"]) == 3 and sum(want["written"].values()) == 2
    assert len(set(want["clips"].values())) == 3 and max(want["groups"].values()) > 1

    lead_ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    ann_ctx = browser.new_context(viewport={"width": 1366, "height": 900})
    try:
        lead, watch = login(lead_ctx, stack.url, "lead")
        lead.wait_for_selector(".cw-tile")
        lead.get_by_text("Release a training set").click()
        for sel, value in (
            ("#release-name textarea", "launched-set"),
            ("#release-splits textarea", SHARES),
            ("#release-seed input", str(SEED)),
        ):
            fill_kept(lead, sel, value)
        first = release(lead, None)
        said = lead.inner_text("#release-result")
        assert "Wrote launched-set v1" in said, said
        assert f"{stack.demo_count} clips with simulated text left out" in said, said
        lead.wait_for_function("document.querySelector('#release-card').innerText.includes('launched-set v1')")
        card = lead.inner_text("#release-card")
        assert f"Simulated text is left out: {stack.demo_count} clips" in card and "No group is in two splits" in card
        assert "This is the first release named launched-set: every group was placed here." in card
        assert "Licence: none was given (--license), so the header says other" in card
        read = check_counts_on_the_page(lead, first, want)
        assert sum(read.values()) == RELEASED
        print(f"launched-set v1, per split as read on the card: {read}")
        kept = check_files(stack, first, want)

        lead.check("#release-simulated input")
        second = release(lead, first)
        want = expected(stack, include_simulated=True, kept=kept)
        said = lead.inner_text("#release-result")
        assert "Wrote launched-set v2" in said and f"Since v1: {stack.demo_count} added, 0 removed" in said, said
        assert f"0 of {RELEASED} earlier clips changed split (each group kept where v1 placed it)." in said, said
        # the demo's clips come from the first launch's job, on which the Quality tab has no decision yet
        assert f"Quality decisions on the batches these clips come from: job {demo_job} (" in said, said
        assert "clips): no random sample, not decided" in said, said
        lead.wait_for_function("document.querySelector('#release-card').innerText.includes('launched-set v2')")
        card = lead.inner_text("#release-card")
        assert "Simulated text is included" in card and f"{stack.demo_count} records are flagged" in card
        assert f"0 of {RELEASED} earlier clips changed split. Each group stays in the split v1 placed it in" in card
        assert "None of these clips was drawn into a random review sample" in card
        read = check_counts_on_the_page(lead, second, want)
        assert sum(read.values()) == RELEASED + stack.demo_count
        print(f"launched-set v2, per split as read on the card: {read}")
        check_files(stack, second, want)
        lead.locator("#release-panel").scroll_into_view_if_needed()
        lead.screenshot(path=str(SCREENSHOTS / "browse-release.png"))
        assert not watch.errors

        ann, _ = login(ann_ctx, stack.url, "ann")
        ann.wait_for_selector(".cw-tile")
        assert not ann.locator("#release-panel").is_visible()  # leads only
    finally:
        lead_ctx.close()
        ann_ctx.close()


def test_a_release_of_clips_approved_on_another_clips_caption_says_so(browser, stack):
    """A library reviewed before the form echo (2026-12-03) can hold a person's save of clip A's text onto clip B,
    approved. The release's message counts such released clips and names the audit that lists them
    (data.copied_saves), where the lead reads it."""
    text = "Clip A: a cyclist merges from the right while the ego vehicle slows at dusk in light rain."
    d = stack.db()
    try:
        a, b = build(d, [ClipSpec("copied", {FIELD: "Q"}), ClipSpec("copied", {FIELD: "Q"})], start=1000).ids
        for cid in (a, b):  # a: its own edit; b: a's text saved onto it, as n then a typed fast did
            base = clipsmod.get(d, cid)["caption"]["id"]
            cap = captions.save_human(d, cid, text=text, labels=LABELS, author="ann", base_caption_id=base)
            review_states.set_review(d, cid, status="approved", user="lead", base_caption_id=cap["id"])
    finally:
        d.close()
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        lead, watch = login(ctx, stack.url, "lead")
        lead.wait_for_selector(".cw-tile")
        lead.get_by_text("Release a training set").click()
        fill_kept(lead, "#release-name textarea", "launched-copied")
        release(lead, None)
        lead.wait_for_function("document.querySelector('#release-result')?.innerText.includes('launched-copied')")
        said = lead.inner_text("#release-result")
        assert "1 released clip carries a person's save of another clip's caption, word for word" in said, said
        assert "python -m data.copied_saves" in said, said
        assert not watch.errors
    finally:
        ctx.close()


def test_a_release_of_a_batch_the_quality_tab_says_to_fix_says_so_in_amber_and_on_its_card(browser, stack):
    """A job of 20 clips for another fleet (the stack's runner leaves it alone), all 20 drawn into a random sample
    and reviewed with the weather changed: the Quality decision on the batch is "fix". A release of them goes
    ahead, and its message (amber) and card name the batch and its decision, and count the clips drawn at random."""
    from data import jobs
    from data.job_params import JobParams
    from data.jobs.selection import Selection
    from data.quality import decision, samples, tables

    d = stack.db()
    try:
        ids = build(d, [ClipSpec(f"fixme{i % 4}", {FIELD: f"FX{i % 4}"}, captioned=False) for i in range(20)]).ids
        job = jobs.create(
            d,
            name="to fix",
            created_by="lead",
            selection=Selection.of_clips(ids),
            prompt_id=None,
            params=JobParams(),
            fleet="http://192.0.2.1:9",
        )
        jobs.change_state(d, job, "cancel", "lead")
        for cid in ids:
            captions.add_machine(d, cid, job_id=job, text=f"clip {cid}", labels=LABELS, provenance={"model": "m"})
        sample = samples.draw(d, Filter(job_id=job), 20, ["ann"], actor="lead", role="lead")
        for cid in ids:  # the model's weather wrong on every one
            cur = clipsmod.get(d, cid)["caption"]
            saved = captions.save_human(
                d, cid, text=cur["text"], labels={**cur["labels"], "weather": "fog"}, author="ann",
                base_caption_id=cur["id"],
            )  # fmt: skip
            review_states.set_review(d, cid, status="approved", user="ann", base_caption_id=saved["id"])
        decided = decision.decide(d, sample["id"])
        assert decided.verdict == "fix"
    finally:
        d.close()
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        lead, watch = login(ctx, stack.url, "lead")
        lead.wait_for_selector(".cw-tile")
        lead.get_by_text("Release a training set").click()
        fill_kept(lead, "#release-name textarea", "launched-fix")
        release(lead, None)
        lead.wait_for_function("document.querySelector('#release-result')?.innerText.includes('launched-fix')")
        said = lead.inner_text("#release-result")
        assert f"job {job} (20 clips): FIX the batch (weather below target)" in said, said
        assert "The Quality tab says to fix a batch this release draws from" in said, said
        assert "cw-msg-warn" in lead.get_attribute("#release-result", "class")
        lead.wait_for_function("document.querySelector('#release-card').innerText.includes('launched-fix v1')")
        rows = table(card_tables(lead), ["batch", "clips released", "random sample", "decision"])
        assert rows[f"job {job}"] == ["20", f"sample {sample['id']}", "FIX the batch (weather below target)"]
        card = lead.inner_text("#release-card")
        assert tables.decision_text(decided) in card  # in the Quality tab's words
        assert "20 of these" in card and "were drawn at random into review samples" in card
        lead.locator("#release-result").scroll_into_view_if_needed()
        lead.screenshot(path=str(SCREENSHOTS / "browse-release-fix.png"))
        assert not watch.errors
    finally:
        ctx.close()
