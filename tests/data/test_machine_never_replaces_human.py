"""R2: a machine caption never replaces a human one. A hypothesis state machine interleaves human edits,
approvals, rejections, job results, job retries, re-captions (a new job over the same clip) and adopting an
old version, against data.captions + data.jobs on a real SQLite file, and checks after every step:
- a machine result never replaces a human or an approved caption (it is kept as a candidate);
- every save based on a stale version raises Conflict, and changes nothing;
- versions are append-only: no row ever changes, versions count up by one per change;
- the versions `captions.history` marks as candidates are exactly the machine results kept beside the current
  version since it last changed.
- lineage: each version derives from what the oracle says (a save: the version it was based on; an adopt: the
  version adopted; a machine caption: nothing) and names its chain's machine caption as its origin.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings as hsettings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from data import captions, db as dbmod, jobs, limits, prompts, review_states
from data.errors import Conflict, DataError
from data.job_params import JobParams
from data.jobs import items as job_items
from data.jobs.selection import Selection
from tests.support.examples import examples
from tests.support.runner_fixtures import LABELS

CLIPS_PER_RUN = 2
_counter = itertools.count()


class Versions(RuleBasedStateMachine):
    db = None  # set by the test: one real database file for every run (each run gets its own clips)

    @initialize()
    def setup(self):
        n = next(_counter)
        db = self.db
        with db.conn:
            db["clips"].insert_all([{"path": f"r2/{n}/{i}.mp4"} for i in range(CLIPS_PER_RUN)])
        self.clips = [r["id"] for r in db.query("SELECT id FROM clips WHERE path LIKE ?", [f"r2/{n}/%"])]
        self.prompt = prompts.latest(db)["id"]
        self.seen: dict[int, tuple] = {}  # caption id -> its immutable fields when first seen
        self.current = {c: None for c in self.clips}  # oracle: the current caption id
        self.protected = {c: False for c in self.clips}  # current is human-written or approved
        self.open_job: dict[int, int] = {}  # clip -> a job with a result already written
        self.candidates = {c: set() for c in self.clips}  # oracle: machine results kept beside the current one
        self.lineage: dict[int, tuple] = {}  # oracle: caption id -> (derived from, origin)

    # -- helpers
    def _cur(self, clip):
        return self.db.execute("SELECT current_caption_id FROM clips WHERE id=?", [clip]).fetchone()[0]

    def _status(self, clip):
        return self.db.execute("SELECT review_status FROM clips WHERE id=?", [clip]).fetchone()[0]

    def _versions(self, clip):
        return self.db.execute("SELECT COUNT(*) FROM captions WHERE clip_id=?", [clip]).fetchone()[0]

    def _stale_base(self, clip):
        """A base the clip is no longer at: an older version, or None once a caption exists."""
        cur = self._cur(clip)
        older = [
            r[0]
            for r in self.db.execute(
                "SELECT id FROM captions WHERE clip_id=? AND id != ? ORDER BY id", [clip, cur or -1]
            )
        ]
        if older:
            return older[0]
        return None if cur is not None else "none"

    def _expect_conflict(self, clip, fn):
        before = (self._cur(clip), self._versions(clip), self._status(clip))
        with pytest.raises(Conflict, match="changed by|no longer current"):
            fn()
        assert (self._cur(clip), self._versions(clip), self._status(clip)) == before

    def _machine_result(self, clip, job_id):
        was_current, was_protected = self._cur(clip), self.protected[clip]
        items = job_items.claim(self.db, job_id, "r2", 10, lease_seconds=60, max_attempts=4)
        assert [i["clip_id"] for i in items] == [clip]
        row = job_items.complete(
            self.db,
            job_id,
            clip,
            text=f"machine {job_id}",
            labels=LABELS,
            provenance={"model": "m", "prompt_id": self.prompt, "replica": "r"},
        )
        if was_protected or (was_current is not None and self._status(clip) == "approved"):
            assert self._cur(clip) == was_current, "a machine caption replaced a human or approved one"
            self.candidates[clip].add(row["id"])
        else:
            assert self._cur(clip) == row["id"]
            self.current[clip] = row["id"]
            self.candidates[clip] = set()
        self.open_job[clip] = job_id
        self.lineage[row["id"]] = (None, row["id"])
        return row

    # -- rules
    # any text a human can save: NUL is refused with a message (data.limits.check_text, tested in test_input_bounds)
    @rule(
        i=st.integers(0, CLIPS_PER_RUN - 1),
        stale=st.booleans(),
        text=st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=20),
    )
    def human_edit(self, i, stale, text):
        clip = self.clips[i]
        text = limits.plain_text(text) or ""  # what is stored: controls a reader cannot see are dropped
        if not text.strip():
            text = "x"
        if stale and self._stale_base(clip) != "none":
            base = self._stale_base(clip)
            return self._expect_conflict(
                clip,
                lambda: captions.save_human(
                    self.db, clip, text=text, labels=LABELS, author="ann", base_caption_id=base
                ),
            )
        n = self._versions(clip)
        base = self._cur(clip)
        row = captions.save_human(self.db, clip, text=text, labels=LABELS, author="ann", base_caption_id=base)
        self.lineage[row["id"]] = (base, self.lineage[base][1] if base is not None else None)
        assert self._versions(clip) == n + 1 and row["version"] == n + 1 and row["source"] == "human"
        self.current[clip] = row["id"]
        self.protected[clip] = True
        self.candidates[clip] = set()

    @rule(i=st.integers(0, CLIPS_PER_RUN - 1), stale=st.booleans(), status=st.sampled_from(["approved", "rejected"]))
    def review(self, i, stale, status):
        clip = self.clips[i]
        if stale and self._stale_base(clip) != "none":
            base = self._stale_base(clip)
            return self._expect_conflict(
                clip, lambda: review_states.set_review(self.db, clip, status=status, user="rev", base_caption_id=base)
            )
        if status == "approved" and self._cur(clip) is None:
            with pytest.raises(DataError):
                review_states.set_review(self.db, clip, status=status, user="rev", base_caption_id=None)
            return
        review_states.set_review(self.db, clip, status=status, user="rev", base_caption_id=self._cur(clip))
        if status == "approved":
            self.protected[clip] = True
        elif self.current[clip] is not None and captions.get(self.db, self.current[clip])["source"] == "model":
            self.protected[clip] = False

    @rule(i=st.integers(0, CLIPS_PER_RUN - 1))
    def recaption(self, i):
        """A new job over the clip (a job result, or a re-caption if it had one)."""
        clip = self.clips[i]
        job_id = jobs.create(
            self.db,
            name="r2",
            created_by="lead",
            selection=Selection.of_clips([clip]),
            prompt_id=self.prompt,
            params=JobParams(),
        )
        self._machine_result(clip, job_id)

    @precondition(lambda self: self.open_job)
    @rule(data=st.data())
    def job_retry(self, data):
        """The same job reports again (a late duplicate, or a retry after failures): nothing changes."""
        clip = data.draw(st.sampled_from(sorted(self.open_job)))
        job_id = self.open_job[clip]
        before = (self._cur(clip), self._versions(clip))
        first = next(self.db.query("SELECT id FROM captions WHERE job_id=? AND clip_id=?", [job_id, clip]))["id"]
        jobs.retry_failed(self.db, job_id, "lead")
        row = job_items.complete(self.db, job_id, clip, text="again", labels=LABELS, provenance={"model": "m"})
        assert row["id"] == first and (self._cur(clip), self._versions(clip)) == before
        assert (
            job_items.fail(self.db, job_id, clip, error="late", kind="replica", retryable=True, max_attempts=4)
            == "done"
        )

    @rule(i=st.integers(0, CLIPS_PER_RUN - 1), stale=st.booleans(), data=st.data())
    def adopt(self, i, stale, data):
        clip = self.clips[i]
        ids = [r[0] for r in self.db.execute("SELECT id FROM captions WHERE clip_id=? ORDER BY id", [clip])]
        if not ids:
            return
        src = data.draw(st.sampled_from(ids))
        if stale and self._stale_base(clip) != "none":
            base = self._stale_base(clip)
            return self._expect_conflict(
                clip, lambda: captions.adopt(self.db, clip, caption_id=src, author="ann", base_caption_id=base)
            )
        row = captions.adopt(self.db, clip, caption_id=src, author="ann", base_caption_id=self._cur(clip))
        self.lineage[row["id"]] = (src, self.lineage[src][1])
        assert row["source"] == "human" and row["text"] == captions.get(self.db, src)["text"]
        self.current[clip] = row["id"]
        self.protected[clip] = True
        self.candidates[clip] = set()

    # -- invariants
    @invariant()
    def current_matches_the_oracle(self):
        for clip in getattr(self, "clips", []):
            assert self._cur(clip) == self.current[clip]
            if self.protected[clip]:
                cur = captions.get(self.db, self._cur(clip))
                assert cur["source"] == "human" or self._status(clip) == "approved"

    @invariant()
    def candidates_are_the_results_kept_beside_the_current_version(self):
        for clip in getattr(self, "clips", []):
            marked = {v["id"] for v in captions.history(self.db, clip) if v["candidate"]}
            assert marked == self.candidates[clip]

    @invariant()
    def lineage_matches_the_oracle(self):
        for clip in getattr(self, "clips", []):
            got = {
                r[0]: (r[1], r[2])
                for r in self.db.execute(
                    "SELECT id, derived_from_id, origin_id FROM captions WHERE clip_id = ?", [clip]
                )
            }
            assert got == {k: self.lineage.get(k) for k in got}

    @invariant()
    def versions_are_append_only(self):
        for clip in getattr(self, "clips", []):
            rows = list(
                self.db.query(
                    "SELECT id, version, text, source, author, parent_id, created_at FROM captions "
                    "WHERE clip_id=? ORDER BY version",
                    [clip],
                )
            )
            assert [r["version"] for r in rows] == list(range(1, len(rows) + 1))
            for r in rows:
                key = tuple(r.values())
                assert self.seen.setdefault(r["id"], key) == key, "a caption version changed"


def test_r2_machine_never_replaces_human_or_approved(settings):
    db = dbmod.connect(settings.db)
    prompts.ensure_presets(db)
    Versions.db = db
    try:
        run = Versions.TestCase
        # 300 runs of 20 steps (6,000 steps; 16 ms a run, 1,000 runs were 16 CPU-s): a machine result let over an
        # approved caption or over a human one, a candidate counted wrong, an adopt deriving from the wrong version
        # each failed this test under every seed tried, the last two within 100 runs
        run.settings = hsettings(
            max_examples=examples(300), stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)
        )
        run().runTest()
        # the machine ran this many cases on this file; each made its own clips
        assert next(_counter) >= examples(300)
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        Versions.db = None
        db.close()
