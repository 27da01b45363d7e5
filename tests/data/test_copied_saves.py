"""The audit for saves whose text is another clip's (data.copied_saves): what the review form wrote onto the wrong
clip until 2026-12-03, found in a library as that bug left it, listed, and the decided ones put back in the queue."""

from __future__ import annotations

import json
import subprocess
import sys

from data import captions, copied_saves, examples, review_states
from tests.support.audit_checks import assert_audit_complete
from tests.support.reliability_fixtures import LABELS
from tests.support.runner_fixtures import add_clips

OTHER = examples.LABELS  # another clip's labels, as the wrong-clip save carried them


def caption_of(n: int) -> str:
    return f"Clip {n}: the ego vehicle slows behind a cyclist who merges from the right at dusk, light rain."


def machine(db, clip_id, text, labels=LABELS):
    v, _ = captions.add_machine(db, clip_id, job_id=None, text=text, labels=labels, provenance={"model": "m"})
    return v


def library_as_the_bug_left_it(db):
    """Six clips with machine captions, and what people did to them: the wrong-clip saves, and what must not be
    taken for one."""
    ids = add_clips(db, 6, prefix="copied")
    v = {c: machine(db, c, caption_of(c), OTHER if c == ids[0] else LABELS) for c in ids}
    a, b, c, d, e, f = ids
    # n then a, typed fast: clip a's text and labels saved onto clip b as the annotator's edit, and approved
    bad = captions.save_human(db, b, text=caption_of(a), labels=OTHER, author="ann", base_caption_id=v[b]["id"])
    review_states.set_review(db, b, status="approved", user="ann", base_caption_id=bad["id"])
    # the same onto clip c, then a reviewer rewrote it: listed, but nothing to undo
    old = captions.save_human(db, c, text=caption_of(a), labels=LABELS, author="bo", base_caption_id=v[c]["id"])
    fixed = captions.save_human(
        db, c, text="Rewritten by a reviewer for this clip.", labels=LABELS, author="cy", base_caption_id=old["id"]
    )
    review_states.set_review(db, c, status="approved", user="cy", base_caption_id=fixed["id"])
    # a real edit of its own text, approved: not listed
    own = captions.save_human(
        db, d, text=caption_of(d) + " Edited.", labels=LABELS, author="ann", base_caption_id=v[d]["id"]
    )
    review_states.set_review(db, d, status="approved", user="ann", base_caption_id=own["id"])
    # a short stock sentence on two clips, on purpose: under --min-chars, not listed
    for clip in (e, f):
        captions.save_human(
            db,
            clip,
            text="No hazards seen.",
            labels=LABELS,
            author="ann",
            base_caption_id=captions.history(db, clip)[-1]["id"],
        )
    # the model said the same thing on two clips: no person saved it, not listed
    machine(db, e, caption_of(f))
    return ids, bad, old


def test_the_audit_lists_saves_of_another_clips_text_and_resets_only_the_decided_ones(db, settings):
    ids, bad, old = library_as_the_bug_left_it(db)
    a, b, c, d, *_ = ids
    found = copied_saves.find(db)
    assert [(f.clip_id, f.caption_id, f.same_as_clip) for f in found] == [(b, bad["id"], a), (c, old["id"], a)]
    assert found[0].labels_too and not found[1].labels_too  # b carries a's labels as well, as the bug wrote them
    assert (found[0].current, found[0].review_status) == (True, "approved")
    assert (found[1].current, found[1].review_status) == (False, "approved")  # c approved on the rewrite

    assert copied_saves.reset(db, found, actor="audit") == [b]
    clip = db["clips"].get(b)
    assert (clip["review_status"], clip["reviewed_by"]) == ("unreviewed", None)
    assert db["clips"].get(c)["review_status"] == "approved" and db["clips"].get(d)["review_status"] == "approved"
    ev = db.execute(
        "SELECT actor, caption_id, detail FROM events WHERE action = 'review.reset' AND clip_id = ?", [b]
    ).fetchall()
    assert len(ev) == 1 and ev[0][0] == "audit" and ev[0][1] == bad["id"]
    detail = json.loads(ev[0][2])
    assert detail["review_was"] == "approved" and detail["reviewed_by_was"] == "ann"
    assert f"clip {a}'s" in detail["why"]
    assert assert_audit_complete(db)["versions"] == db["captions"].count
    # run again: listed still (the version is what it is), nothing left to reset
    assert copied_saves.reset(db, copied_saves.find(db), actor="audit") == []


def test_a_clip_saved_or_decided_after_the_listing_is_not_reset(db):
    ids, bad, _ = library_as_the_bug_left_it(db)
    b = ids[1]
    found = copied_saves.find(db)
    newer = captions.save_human(
        db, b, text="A reviewer's fix after the listing.", labels=LABELS, author="cy", base_caption_id=bad["id"]
    )
    review_states.set_review(db, b, status="approved", user="cy", base_caption_id=newer["id"])
    assert copied_saves.reset(db, found, actor="audit") == []
    assert db["clips"].get(b)["review_status"] == "approved"


def test_the_command_lists_says_what_to_do_and_resets(settings):
    from data import db as dbmod

    db = dbmod.connect(settings.db)
    ids, bad, _ = library_as_the_bug_left_it(db)
    db.close()
    cmd = [sys.executable, "-m", "data.copied_saves", "--data-dir", str(settings.data_dir)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (
        f"clip {ids[1]} v2 by ann" in r.stdout
        and f"the text of clip {ids[0]}, labels too; current, approved" in r.stdout
    )
    assert "2 save(s) repeat another clip's caption; 1 still decided on it: `--reset` puts the 1 marked" in r.stderr
    assert f"clip {ids[1]} v2 by ann" in r.stdout and "-- will be reset" in r.stdout
    r = subprocess.run([*cmd, "--reset", "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "1 set back to unreviewed" in r.stderr
    assert [json.loads(ln)["clip_id"] for ln in r.stdout.splitlines()] == [ids[1], ids[2]]
    bad_arg = subprocess.run([*cmd, "--min-chars", "0"], capture_output=True, text=True, timeout=60)
    assert bad_arg.returncode == 2 and "--min-chars must be at least 1" in bad_arg.stderr


STOCK = "No hazards: dry road, light traffic, the ego vehicle keeps its lane."


def test_reset_lists_what_it_resets_and_leaves_the_clips_and_texts_excepted(settings):
    """Issue 46, point 5: `--reset` un-approved stock sentences typed on purpose, with no way to except them. The
    listing now says which clips it will reset; `--except-text` (and `--except-file`) leaves saves of a text as
    they are, `--except-clip` a clip."""
    from data import db as dbmod

    db = dbmod.connect(settings.db)
    ids, bad, _ = library_as_the_bug_left_it(db)
    more = add_clips(db, 4, prefix="stock")
    for clip in more:  # the team's stock sentence, typed on purpose on four clips, each approved
        v = machine(db, clip, caption_of(clip))
        own = captions.save_human(db, clip, text=STOCK, labels=LABELS, author="bo", base_caption_id=v["id"])
        review_states.set_review(db, clip, status="approved", user="bo", base_caption_id=own["id"])
    db.close()
    cmd = [sys.executable, "-m", "data.copied_saves", "--data-dir", str(settings.data_dir)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    will = [ln for ln in r.stdout.splitlines() if ln.endswith("-- will be reset")]
    assert len(will) == 4 and all(f"clip {c} " in r.stdout for c in (ids[1], *more[1:]))  # the first had it first
    texts = settings.data_dir / "stock.txt"
    texts.write_text("  " + STOCK.replace(" ", "   ") + "\n")  # runs of spaces count as one
    r = subprocess.run(
        [*cmd, "--reset", "--json", "--except-file", str(texts), "--except-clip", f"{ids[1]},999999"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    listed = {json.loads(ln)["clip_id"]: json.loads(ln) for ln in r.stdout.splitlines()}
    assert listed[ids[1]]["plan"] == f"left: clip {ids[1]} excepted" and not listed[ids[1]]["reset"]
    assert all(listed[c]["plan"] == "left: its text excepted" for c in more[1:])
    assert "4 still decided on it, 4 of them excepted; 0 set back to unreviewed" in r.stderr
    db = dbmod.connect(settings.db)
    try:
        assert all(db["clips"].get(c)["review_status"] == "approved" for c in (ids[1], *more))
    finally:
        db.close()
    r = subprocess.run([*cmd, "--reset", "--except-text", STOCK], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "1 set back to unreviewed" in r.stderr, r.stderr
    bad_arg = subprocess.run([*cmd, "--except-clip", "twelve"], capture_output=True, text=True, timeout=60)
    assert bad_arg.returncode == 2 and "--except-clip takes clip ids" in bad_arg.stderr


def test_a_release_says_how_many_of_its_clips_carry_a_copied_save(db, tmp_path):
    """The release's summary (the command's output, the app's message) counts the released clips approved on a
    save of another clip's text, and names the audit; once it has put them back in the queue, none is released."""
    from data.release import make as rel
    from data.release.options import Options

    ids, _, _ = library_as_the_bug_left_it(db)
    # grouped by folder: these clips carry no route (a field no clip carries is refused, issue 44)
    r = rel.release(db, Options(group_by="folder", name="copied"), tmp_path / "r1", actor="lead", role="lead")
    assert r.copied == 1 and sum(r.counts.values()) == 3  # b (copied), c (rewritten), d (its own edit)
    assert "1 released clip carries a person's save of another clip's caption" in rel.summary(r)
    assert "python -m data.copied_saves" in rel.summary(r)
    copied_saves.reset(db, copied_saves.find(db), actor="audit")
    r2 = rel.release(db, Options(group_by="folder", name="copied"), tmp_path / "r2", actor="lead", role="lead")
    assert r2.copied == 0 and sum(r2.counts.values()) == 2 and "copied_saves" not in rel.summary(r2)
