"""The ingest planner is pure: given the rows and the walk it says what a run will do, without a file or a
database. These cases are the rules of data.ingest's docstring, one each."""

from __future__ import annotations

from data.library.ingest import decide, plan
from data.library.walk import Entry


def row(id_: int, path: str, **kw) -> dict:
    base = {"id": id_, "path": path, "sha256": f"h{id_}", "size": 10, "mtime": 1.0, "missing": 0}
    return {**base, "probe_error": None, "sidecar": None, **kw}


def entry(rel: str, size: int = 10, mtime: float = 1.0, **kw) -> Entry:
    return Entry(rel, "/root/" + rel, size, mtime, **kw)


def test_each_file_gets_the_action_its_row_calls_for():
    assert decide(None, entry("new.mp4")) == "probe"
    assert decide(row(1, "a.mp4"), entry("a.mp4")) == "skip"
    assert decide(row(1, "a.mp4"), entry("a.mp4", size=11)) == "probe"  # changed on disk
    assert decide(row(1, "a.mp4", probe_error="probe timed out after 20 s"), entry("a.mp4")) == "probe"
    assert decide(row(1, "a.mp4", probe_error="corrupt: x"), entry("a.mp4")) == "skip"  # not retried
    assert decide(row(1, "a.mp4", missing=1), entry("a.mp4")) == "revive"
    assert decide(row(1, "a.mp4"), entry("a.mp4", sidecar='{"camera": "rear"}')) == "revive"
    assert decide(None, entry("link.mp4", error="broken symlink")) == "refuse"
    same_reason = row(1, "link.mp4", probe_error="broken symlink")
    assert decide(same_reason, entry("link.mp4", error="broken symlink")) == "skip"


def test_the_plan_counts_writes_and_gone_rows_without_touching_anything():
    known = {"a.mp4": row(1, "a.mp4"), "gone.mp4": row(2, "gone.mp4"), "back.mp4": row(3, "back.mp4", missing=1)}
    walk = [entry("a.mp4"), entry("back.mp4"), entry("bad.mp4", error="not a regular file"), entry("new.mp4")]
    p = plan(known, walk)
    assert p.counts == {"ok": 0, "failed": 1, "skipped": 2, "moved": 0}
    assert p.writes == [
        ("revive", {"id": 3, "rel": "back.mp4", "sidecar": None}),
        ("insert", {"rel": "bad.mp4", "size": 10, "mtime": 1.0, "probe_error": "not a regular file"}),
    ]
    assert [e.rel for e in p.probe] == ["new.mp4"]
    assert p.vanished() == [2]


def test_a_probed_file_with_a_vanished_rows_content_is_a_move_and_a_changed_hash_is_flagged():
    known = {"old/name.mp4": row(7, "old/name.mp4", sha256="abc"), "same.mp4": row(8, "same.mp4", sha256="x1")}
    p = plan(known, [entry("new/name.mp4"), entry("same.mp4", size=99), entry("fresh.mp4")])
    action, moved = p.place({"rel": "new/name.mp4", "sha256": "abc", "probe_error": None})
    assert (action, moved["id"]) == ("move", 7)
    assert p.vanished() == []  # the moved row is not marked missing
    action, updated = p.place({"rel": "same.mp4", "sha256": "x2", "probe_error": None})
    assert (action, updated["id"], updated["_old_sha256"]) == ("update", 8, "x1")
    action, inserted = p.place({"rel": "fresh.mp4", "sha256": "f", "probe_error": "corrupt: y"})
    assert action == "insert" and inserted["size"] == 10
    assert p.counts == {"ok": 1, "failed": 1, "skipped": 0, "moved": 1}
