"""From a random sample to a decision (data.quality.decision, sequential, targets, rounds), on real SQLite files.

- The statistics against independent computations: the reviews to make with the finite-population correction
  (n = n0 / (1 + (n0 - 1) / N)), never more than the clips left; the confidence sequence against a brute-force
  prior-posterior ratio over every M (scipy's hypergeometric distribution and beta function).
- Coverage by simulation: many batches of known accuracy, looked at after every round; how often the bounds
  ever miss the truth (at most 1 - confidence), and how often single-look Wilson intervals do (far more: why
  the decision does not use them); the decision rule run as a lead would, round after round, and how often
  it decides wrongly.
- The rule on hand-worked cases: accept, fix, review K more (the smallest K, checked one by one), the exact
  value when the whole batch is reviewed, members waiting, labels without a target, the batch's verdict.
- Targets stored, defaulted, set and refused; a further round drawn from the batch as it was at the first draw;
  the command line.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import betaln, comb
from scipy.stats import betabinom, hypergeom

from data import assignments, captions, events, jobs, review_states, taxonomy, users
from data.clips import Filter
from data.db import immediate
from data.errors import DataError, Forbidden
from data.job_params import JobParams
from data.jobs.selection import Selection
from data.quality import decision, estimates, population, rounds, samples, sequential, stats, tables, targets
from data.quality.stats import Stratum
from data.quality.targets import Target

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery"
BASE = {
    "scenario_category": "normal_driving",
    "hazard_level": "low",
    "road_users": ["car"],
    "ego_maneuver": "going_straight",
    "weather": "clear",
    "lighting": "daylight",
    "road_type": "urban",
}


# -- the reviews to make: finite population ------------------------------------------------------------------------


def corrected_half_width(p: float, m: int, big_n: int) -> float:
    """The Wilson half-width at proportion p after m reviews of N drawn without replacement (by hand: m weighs
    as m (N - 1) / (N - m))."""
    if m >= big_n:
        return 0.0
    e, z = m * (big_n - 1) / (big_n - m), stats.Z95
    return z / (1 + z * z / e) * math.sqrt(p * (1 - p) / e + z * z / (4 * e * e))


def test_the_reviews_to_make_use_the_finite_population_correction_and_never_pass_the_clips_left():
    # n = n0 / (1 + (n0 - 1) / N), by hand: 385 for an infinite population, 278.2 -> 279 of 1,000, 60 of 60
    assert stats.finite_n(385, 1000) == math.ceil(385 / (1 + 384 / 1000)) == 279
    assert stats.finite_n(385, 60) == math.ceil(385 / (1 + 384 / 60)) == 53
    assert stats.finite_n(5000, 60) == 60 and stats.finite_n(1, 60) == 1
    # the case: 16 of 60 clips reviewed; without the correction it asked for 304 more with 44 left
    for k in range(17):
        infinite = stats.more_reviews(k, 16, 0.05)
        more = stats.more_reviews(k, 16, 0.05, population=60)
        assert 0 < more <= 44
        assert more == stats.finite_n(16 + infinite, 60) - 16
    assert stats.more_reviews(8, 16, 0.05) > 44  # what the plain plan asked for: more than the batch holds
    # after `more` the interval with the correction is within the margin, and one review fewer it is not
    rng = random.Random(5)
    for _ in range(200):
        big_n = rng.randint(2, 3000)
        n = rng.randint(1, big_n)
        k = rng.randint(0, n)
        margin = rng.choice((0.02, 0.05, 0.1))
        more = stats.more_reviews(k, n, margin, population=big_n)
        assert 0 <= more <= big_n - n
        if more:
            assert corrected_half_width((k + 2) / (n + 4), n + more, big_n) <= margin + 1e-12
    # every clip reviewed: the exact value, nothing more to review
    exact = stats.wilson(37, 40, population=40)
    assert exact.exact and exact.low == exact.high == exact.p == 37 / 40
    assert stats.more_reviews(37, 40, 0.01, population=40) == 0
    # stratified plans cap at what each stratum has left too
    strata = [Stratum(20, 5, 4), Stratum(40, 11, 11)]
    assert stats.more_reviews_stratified(strata, 0.01) <= 44


def test_spread_shares_more_reviews_by_stratum_size_within_what_is_left():
    assert stats.spread(10, [80, 20], [70, 15]) == [8, 2]
    assert stats.spread(10, [80, 20], [3, 15]) == [3, 7]  # a full stratum's share goes to the other
    assert stats.spread(1, [80, 20], [70, 15]) == [1, 0]
    assert stats.spread(100, [80, 20], [3, 4]) == [3, 4]  # never past what is left
    assert stats.spread(3, [10, 10, 10, 10], [5, 5, 5, 5]) == [1, 1, 1, 0]
    rng = random.Random(2)
    for _ in range(300):
        sizes = [rng.randint(1, 50) for _ in range(rng.randint(1, 5))]
        room = [rng.randint(0, s) for s in sizes]
        extra = rng.randint(0, 120)
        got = stats.spread(extra, sizes, room)
        assert sum(got) == min(extra, sum(room)) and all(0 <= g <= r for g, r in zip(got, room))


# -- the confidence sequence ---------------------------------------------------------------------------------------


def brute_force_bounds(k: int, n: int, big_n: int, alpha: float, prior=sequential.PRIOR) -> tuple[int, int]:
    """Every M from 0 to N: the prior-posterior ratio, from scipy's beta-binomial prior on M, its hypergeometric
    pmf (the chance of the draws seen, given M) and the posterior summed over M; the M whose ratio stays under
    1 / alpha."""
    ms = np.arange(big_n + 1)
    before = betabinom.pmf(ms, big_n, *prior)
    seq = hypergeom.pmf(k, big_n, ms, n) / comb(n, k)  # one order of the draws: every order is as likely
    mix = (before * seq).sum()
    after = before * seq / mix
    # the closed form the code uses for the mixture
    assert mix == pytest.approx(math.exp(betaln(prior[0] + k, prior[1] + n - k) - betaln(*prior)), rel=1e-9)
    inside = ms[before < after / alpha]
    return int(inside.min()), int(inside.max())


@pytest.mark.parametrize(
    "k,n,big_n,alpha",
    [(0, 0, 30, 0.05), (10, 10, 40, 0.05), (9, 10, 40, 0.05), (38, 40, 40, 0.05), (96, 100, 1000, 0.05),
     (5, 20, 60, 0.1), (150, 160, 300, 0.01), (0, 25, 200, 0.05), (250, 400, 2000, 0.2)],
)  # fmt: skip
def test_the_confidence_sequence_equals_a_brute_force_prior_posterior_ratio(k, n, big_n, alpha):
    assert sequential.count_bounds(k, n, big_n, alpha) == brute_force_bounds(k, n, big_n, alpha)
    uniform = (1.0, 1.0)
    assert sequential.count_bounds(k, n, big_n, alpha, uniform) == brute_force_bounds(k, n, big_n, alpha, uniform)


def test_the_bounds_hold_at_every_look_while_peeking_at_wilson_intervals_does_not():
    """Batches of 200 clips of known accuracy, reviewed in random order, looked at after every 10 reviews: how
    often the bounds ever leave the truth (at most 10 % at 90 % confidence), and how often single-look 90 %
    Wilson intervals ever do (far more than 10 %)."""
    rng = random.Random(7)
    big_n, alpha, runs, step = 200, 0.1, 300, 10
    missed_bounds = missed_wilson = 0
    for _ in range(runs):
        m = rng.choice([100, 150, 180, 190, 199])
        batch = [1] * m + [0] * (big_n - m)
        rng.shuffle(batch)
        k, bounds_missed, wilson_missed = 0, False, False
        for n in range(1, big_n + 1):
            k += batch[n - 1]
            if n % step:
                continue
            lo, hi = sequential.count_bounds(k, n, big_n, alpha)
            bounds_missed |= not lo <= m <= hi
            w = stats.wilson(k, n, stats.z_for(1 - alpha), population=big_n)
            wilson_missed |= not w.low - 1e-12 <= m / big_n <= w.high + 1e-12
        missed_bounds += bounds_missed
        missed_wilson += wilson_missed
    print(f"ever outside over 20 looks: the bounds {missed_bounds / runs:.1%}, Wilson {missed_wilson / runs:.1%}")
    assert missed_bounds / runs <= alpha
    assert missed_wilson / runs > 2 * alpha


def _lead(batch: list[list[int]], target: float, confidence: float, first: int, rng: random.Random) -> str:
    """A lead who follows the decision, round after round, on a batch of strata (lists of 1 right, 0 wrong, in
    random order): draws `first` spread over the strata, then K more each time it says "review K more"."""
    t = Target("x", target, confidence)
    sizes = [len(h) for h in batch]
    seen = [0] * len(batch)
    plan = stats.spread(first, sizes, sizes)
    while True:
        seen = [s + p for s, p in zip(seen, plan)]
        strata = [Stratum(len(h), s, sum(h[:s])) for h, s in zip(batch, seen)]
        d = decision.label_decision(strata, [0] * len(batch), t)
        if d.verdict != "review":
            return d.verdict
        assert 0 < d.round <= d.more <= d.left
        plan = stats.spread(d.round, sizes, [len(h) - s for h, s in zip(batch, seen)])


@pytest.mark.parametrize("strata", [1, 3])
def test_a_lead_who_follows_the_decision_round_after_round_is_rarely_wrong(strata):
    """Batches of 300 clips a little under, at and a little over a target of 0.9 (90 % confidence): the decision
    run as a lead runs it, looking after each round, is wrong (accept under the target, fix at or over it) at most
    10 % of the time for each truth, and always ends."""
    rng = random.Random(11 + strata)
    target, confidence, runs = 0.9, 0.9, 60
    for right in (255, 267, 270, 273, 285):  # 0.85, 0.89, 0.90, 0.91, 0.95 of 300
        wrong = 0
        for _ in range(runs):
            clips = [1] * right + [0] * (300 - right)
            rng.shuffle(clips)
            cut = [0, 150, 250, 300] if strata == 3 else [0, 300]
            batch = [clips[a:b] for a, b in zip(cut, cut[1:])]
            for h in batch:
                rng.shuffle(h)
            verdict = _lead(batch, target, confidence, 30, rng)
            wrong += (verdict == "accept") if right / 300 < target else (verdict == "fix")
        print(f"{strata} strata, accuracy {right / 300:.2f}: wrong {wrong} of {runs}")
        assert wrong / runs <= 1 - confidence


# -- the rule on hand-worked cases ---------------------------------------------------------------------------------


@pytest.fixture
def batch(db):
    """40 clips of one job, each with an unreviewed machine caption (the same labels), and a lead."""
    for name, role in (("ann", "annotator"), ("ann2", "annotator"), ("lead", "lead")):
        users.create(db, name, role=role, password=PASSWORD)
    with immediate(db):
        for i in range(40):
            db.execute("INSERT INTO clips (path) VALUES (?)", [f"d/clip_{i:03d}.mp4"])
    ids = [r[0] for r in db.execute("SELECT id FROM clips ORDER BY id")]
    job = jobs.create(
        db, name="batch", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    for cid in ids:
        captions.add_machine(db, cid, job_id=job, text=f"clip {cid}", labels=BASE, provenance={"model": "m"})
    db.job = job
    db.ids = ids
    return db


def review(db, clip_id: int, weather: str | None = None, status: str = "approved") -> None:
    """Approve (or reject) a clip as the model captioned it, or with its weather changed (the model wrong)."""
    cur = captions.get(db, db.execute("SELECT current_caption_id FROM clips WHERE id = ?", [clip_id]).fetchone()[0])
    if weather:
        cur = captions.save_human(
            db, clip_id, text=cur["text"], labels={**cur["labels"], "weather": weather}, author="ann",
            base_caption_id=cur["id"],
        )  # fmt: skip
    review_states.set_review(db, clip_id, status=status, user="ann", base_caption_id=cur["id"])


def draw(db, size: int, **kw) -> dict:
    return samples.draw(db, Filter(job_id=db.job), size, ["ann"], actor="lead", role="lead", **kw)


def test_targets_have_defaults_are_set_by_a_lead_and_refused_with_what_to_type(batch):
    db = batch
    assert db["quality_targets"].exists()
    t = targets.get_all(db)
    assert list(t) == list(taxonomy.ENUMS)
    assert (t["hazard_level"].target, t["hazard_level"].confidence) == (0.95, 0.95)
    assert {x.target for k, x in t.items() if k != "hazard_level"} == {0.90} and t["weather"].set_by is None
    got = targets.set_target(db, "weather", "97 %", "99", actor="lead", role="lead")
    assert (got.target, got.confidence, got.set_by) == (0.97, 0.99, "lead")
    got = targets.set_target(db, "weather", 0.8, None, actor="lead", role="lead")  # the confidence kept
    assert (got.target, got.confidence) == (0.8, 0.99)
    assert targets.set_target(db, "lighting", "none", actor="lead", role="lead").target is None
    audited = [json.loads(e["detail"])["label"] for e in events.iter_all(db, "quality.target")]
    assert audited == ["weather", "weather", "lighting"]
    with pytest.raises(Forbidden):
        targets.set_target(db, "weather", 0.9, actor="ann", role="annotator")
    for label, target, confidence, words in (
        ("colour", 0.9, None, "Unknown label 'colour'"),
        ("weather", "high", None, "a share such as 0.95"),
        ("weather", 0, None, "more than 0"),
        ("weather", 0.9, 40, "The confidence: from 50%"),
        ("weather", 0.9, 100, "The confidence: from 50%"),
    ):
        with pytest.raises(DataError, match=words):
            targets.set_target(db, label, target, confidence, actor="lead", role="lead")
    assert targets.get_all(db)["weather"].target == 0.8  # nothing changed by a refusal


def test_every_clip_reviewed_gives_the_exact_value_and_a_decision_against_each_target(batch):
    db = batch
    s = draw(db, 40)
    wrong = set(db.ids[:2])  # the weather wrong on 2 of 40: exactly 0.95
    for cid in db.ids:
        review(db, cid, "rain" if cid in wrong else None)
    targets.set_target(db, "weather", 0.95, actor="lead", role="lead")
    d = decision.decide(db, s["id"])
    w = d.labels["weather"]
    assert (w.estimate, w.bounds.low, w.bounds.high, w.bounds.exact) == (0.95, 0.95, 0.95, True)
    assert w.verdict == "accept" and d.verdict == "accept" and d.more == 0
    assert tables.decision_text(d).startswith(
        f"Accept the batch of sample {s['id']} (40 clips of job {db.job} at its draw): every label"
    )
    e = estimates.estimate(db, s["id"])
    assert e.labels["weather"].interval.exact and e.labels["weather"].more == 0
    targets.set_target(db, "weather", 0.96, actor="lead", role="lead")
    d = decision.decide(db, s["id"])
    assert d.labels["weather"].verdict == "fix" and d.verdict == "fix" and d.fix == ["weather"]
    assert f"(40 clips of job {db.job} at its draw): weather below target" in tables.decision_text(d)
    assert d.labels["hazard_level"].verdict == "accept"  # 40 of 40 right


def test_review_k_more_is_the_smallest_k_that_would_decide_and_a_round_draws_it(batch):
    db = batch
    s = draw(db, 20, seed=3)
    members = samples.members(db, s["id"])
    for m in members:
        review(db, m["clip_id"])  # all 20 right
    d = decision.decide(db, s["id"])
    h = d.labels["hazard_level"]  # target 0.95 at 95 %
    lo, hi = brute_force_bounds(20, 20, 40, 0.05)
    assert (h.bounds.low, h.bounds.high) == (lo / 40, hi / 40) and lo / 40 < 0.95
    assert h.verdict == "review" and h.estimate == 1.0

    def decides(extra: int) -> bool:  # if all `extra` more were right, as all so far
        return brute_force_bounds(20 + extra, 20 + extra, 40, 0.05)[0] / 40 >= 0.95

    k = next(x for x in range(1, 21) if decides(x))
    assert h.more == k <= 20 and not decides(k - 1)  # no more than doubles the 20 made: the plan stands
    # the batch: every label was right on all 20, the weather's target (0.90) needs fewer than the hazard's
    assert d.verdict == "review" and d.more == max(x.more for x in d.labels.values()) == k == d.draw
    assert d.labels["weather"].more < k
    assert tables.decision_text(d).startswith(f"Review {k} more of the batch of sample {s['id']}")
    assert tables.verdict_text(h) == f"review {k} more" and not h.exact_only
    # the K more, drawn into the same sample from the clips it has not taken
    before = {m["clip_id"] for m in members}
    r = rounds.draw_more(db, s["id"], d.draw, actor="lead", role="lead")
    after = samples.members(db, s["id"])
    new = [m for m in after if m["clip_id"] not in before]
    assert len(new) == k == r["round_drawn"] and r["drawn"] == 20 + k and r["round"] == 1
    assert {m["round"] for m in new} == {1} and {m["assignee"] for m in new} == {"ann"}
    assert sorted(m["draw_order"] for m in after) == list(range(20 + k))
    (ev,) = events.iter_all(db, "sample.draw_more")
    detail = json.loads(ev["detail"])
    assert detail["seed"] == r["round_seed"] and detail["drawn"] == k
    assert db.execute("SELECT seed FROM sample_rounds WHERE sample_id = ?", [s["id"]]).fetchone()[0] == r["round_seed"]
    # drawn, not reviewed yet: the decision waits for them
    d = decision.decide(db, s["id"])
    assert d.verdict == "review" and d.pending == k and d.more == k and d.draw == 0
    assert f"the {k} clips of the sample still waiting for review" in tables.decision_text(d)
    assert tables.verdict_text(d.labels["hazard_level"], d.pending) == f"review the {k} waiting"
    for m in new:
        review(db, m["clip_id"])
    d = decision.decide(db, s["id"])
    assert d.labels["hazard_level"].verdict == "accept" and d.verdict == "accept"


def test_an_estimate_at_the_target_needs_the_whole_batch_and_says_so(batch):
    db = batch
    s = draw(db, 20, seed=6)
    for i, m in enumerate(samples.members(db, s["id"])):
        review(db, m["clip_id"], "rain" if i < 2 else None)  # the weather right on 18 of 20: at its target, 0.90
    for label in taxonomy.ENUMS:
        targets.set_target(db, label, None if label != "weather" else 0.9, actor="lead", role="lead")
    d = decision.decide(db, s["id"])
    w = d.labels["weather"]
    assert w.estimate == 0.9 and w.verdict == "review" and w.more == w.left == 20 and w.exact_only
    assert (d.more, d.draw, d.undrawn) == (20, 20, 20)
    assert tables.verdict_text(w) == "review all 20 left (exact)"
    said = tables.decision_text(d)
    assert "every clip left. At the rate so far (weather right on 18 of 20, 0.900, against a target of 0.900)" in said
    # 18 of 20 right so far: the batch of 40 reaches 0.90 (36 right) if 18 of the 20 left are right
    assert "no sample short of the whole batch decides" in said and "if at least 18 of the 20 clips left" in said
    rounds.draw_more(db, s["id"], d.draw, actor="lead", role="lead")
    for m in samples.members(db, s["id"])[20:]:
        review(db, m["clip_id"])  # the other 20 right: 38 of 40, exactly
    d = decision.decide(db, s["id"])
    assert (d.labels["weather"].bounds.low, d.labels["weather"].bounds.exact) == (38 / 40, True)
    assert d.verdict == "accept"


def test_a_first_sample_that_happens_to_sit_on_the_target_says_only_the_whole_batch_decides_and_draws_a_round():
    """45 of 50 right against 0.90, in a batch of 50,000: at that rate only every clip would decide, and the
    decision says so (K is all 49,950 left, never a capped number); what it draws now is a round of 50 (doubling
    the reviews, after which the bounds may be looked at again), which could decide."""
    strata, t = [Stratum(50_000, 50, 45)], Target("weather", 0.9, 0.95)
    assert sequential.more_to_decide(strata, 0.9, 0.05) == 49_950
    could = sequential.could_decide(strata, 0.9, 0.05)
    assert 0 < could <= 50
    d = decision.label_decision(strata, [0], t)
    assert (d.verdict, d.more, d.round, d.left) == ("review", 49_950, 50, 49_950) and d.exact_only
    assert d.plan.needed == 44_955  # 0.9 of 50,000 less the 45 right so far
    assert tables.verdict_text(d) == "review all 49,950 left (exact)"
    # the reviews made count rejected ones too: 40 members rejected, none measured: a round of 40 (doubling), not
    # the 5 that could decide were all of them wrong
    none = [Stratum(50_000, 0, 0)]
    assert sequential.could_decide(none, 0.9, 0.05) == decision.label_decision(none, [0], t).round == 5
    assert decision.label_decision(none, [0], t, made=40).round == 40 < sequential.more_to_decide(none, 0.9, 0.05)
    # a round never goes under what could decide at all: 2 of 2 right against 0.5 cannot decide in 2 more
    few, half = [Stratum(50_000, 2, 2)], Target("x", 0.5, 0.95)
    could = sequential.could_decide(few, 0.5, 0.05)
    assert decision.label_decision(few, [0], half).round == could > 2


def test_members_waiting_decide_only_when_no_outcome_of_theirs_could_change_it(batch):
    db = batch
    s = draw(db, 30, seed=8)
    members = samples.members(db, s["id"])
    for m in members[:20]:
        review(db, m["clip_id"], "rain")  # the weather wrong on all 20 reviewed; 10 wait
    d = decision.decide(db, s["id"])
    # even if the 10 waiting were right, 10 of 30 right cannot reach 0.90: fix now
    assert brute_force_bounds(10, 30, 40, 0.05)[1] / 40 < 0.90
    assert d.labels["weather"].verdict == "fix" and d.verdict == "fix" and d.pending == 10
    # the other labels were right on all 20: accepting them depends on the 10 waiting
    assert brute_force_bounds(20, 30, 40, 0.05)[0] / 40 < 0.90
    assert d.labels["road_type"].verdict == "review" and d.labels["road_type"].more == 10
    targets.set_target(db, "weather", None, actor="lead", role="lead")
    d = decision.decide(db, s["id"])
    assert d.labels["weather"].verdict == "no target" and d.verdict == "review" and (d.more, d.draw) == (10, 0)
    for label in taxonomy.ENUMS:
        targets.set_target(db, label, "none", actor="lead", role="lead")
    assert decision.decide(db, s["id"]).verdict == "no target"


def test_a_round_draws_from_the_batch_as_it_was_at_the_first_draw(batch):
    db = batch
    s = draw(db, 10, seed=1, stratify="none")
    taken = {m["clip_id"] for m in samples.members(db, s["id"])}
    rest = [c for c in db.ids if c not in taken]
    at_draw = {c: db.execute("SELECT current_caption_id FROM clips WHERE id = ?", [c]).fetchone()[0] for c in rest}
    review(db, rest[0], "fog")  # reviewed outside the sample since: still a clip of the batch
    captions.add_machine(db, rest[1], job_id=None, text="new", labels=BASE, provenance={"model": "m2"})
    with immediate(db):  # a clip that joined the job's filter after the draw: not of the batch
        late = db.execute("INSERT INTO clips (path) VALUES ('d/late.mp4')").lastrowid
    captions.add_machine(db, late, job_id=db.job, text="late", labels=BASE, provenance={"model": "m"})
    stored = population.load(db, s["id"])
    assert list(stored["all"][0]) == sorted(db.ids) and len(stored["all"][1]) == 40
    r = rounds.draw_more(db, s["id"], 100, actor="lead", role="lead", seed=4)  # more than is left: all 30
    new = [m for m in samples.members(db, s["id"]) if m["round"] == 1]
    assert r["round_drawn"] == 30 and {m["clip_id"] for m in new} == set(rest)
    assert all(m["caption_id"] == at_draw[m["clip_id"]] for m in new)  # what the batch had, not what came later
    with pytest.raises(DataError, match="holds every clip of its batch"):
        rounds.draw_more(db, s["id"], 1, actor="lead", role="lead")
    with pytest.raises(Forbidden):
        rounds.draw_more(db, s["id"], 1, actor="ann", role="annotator")
    # a sample drawn before populations were kept cannot grow, and says what to do
    old = draw(db, 2, seed=2)
    with immediate(db):
        db.execute("DROP TRIGGER sample_populations_write_once_delete")
        db.execute("DELETE FROM sample_populations WHERE sample_id = ?", [old["id"]])
    with pytest.raises(DataError, match="draw a new sample"):
        rounds.draw_more(db, old["id"], 1, actor="lead", role="lead")


def test_a_stratified_round_spreads_over_the_strata_by_their_size(batch):
    db = batch
    with immediate(db):  # 10 of the 40 at hazard level high (the caption's level: each clip's stratum)
        for cid in db.ids[:10]:
            cap = captions.get(db, db.execute("SELECT current_caption_id FROM clips WHERE id=?", [cid]).fetchone()[0])
            captions.add_machine(
                db, cid, job_id=None, text="x", labels={**cap["labels"], "hazard_level": "high"}, provenance={}
            )
    s = draw(db, 4, stratify="equal", seed=9)  # 2 and 2
    assert {x["stratum"]: x["drawn"] for x in s["strata"]} == {"high": 2, "low": 2}
    r = rounds.draw_more(db, s["id"], 8, actor="lead", role="lead")
    assert {x["stratum"]: x["drawn"] for x in r["strata"]} == {"high": 4, "low": 8}  # 8 spread 2 : 6 (10 : 30)
    assert r["drawn"] == 12 and samples.get(db, s["id"])["rounds"] == 1


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "data.quality", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_the_command_line_sets_targets_decides_and_draws_the_k_more(settings, batch):
    db = batch
    s = draw(db, 10, seed=3)
    for m in samples.members(db, s["id"]):
        review(db, m["clip_id"])
    data_dir = str(settings.data_dir)
    out = run_cli("--data-dir", data_dir, "--set-target", "weather=0.8", "--set-target", "lighting=none",
                  "--confidence", "90", "--user", "lead")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "weather: 0.800 at 90.0% confidence" in out.stdout and "lighting: no target" in out.stdout
    assert out.stdout.index("Decision: Review") < out.stdout.index("approved clips")  # the decision first
    assert (targets.get_all(db)["weather"].target, targets.get_all(db)["lighting"].target) == (0.8, None)
    d = decision.decide(db, s["id"])
    js = json.loads(run_cli("--data-dir", data_dir, "--json").stdout)
    assert js["decision"] == json.loads(json.dumps(d.to_dict())) and js["targets"]["weather"]["target"] == 0.8
    assert js["decision"]["verdict"] == "review" and js["decision"]["draw"] == d.draw > 0
    drew = run_cli("--data-dir", data_dir, "--sample", str(s["id"]), "--draw-more", "--user", "lead")
    assert drew.returncode == 0, drew.stderr
    assert f"Drew {d.draw:,} more clips into sample {s['id']} (round 1" in drew.stdout
    assert samples.get(db, s["id"])["drawn"] == 10 + d.draw
    again = run_cli("--data-dir", data_dir, "--draw-more")
    assert again.returncode == 2 and f"{d.draw:,} drawn clips wait for review" in again.stderr
    for bad, words in (
        (("--set-target", "weather"), "takes LABEL=TARGET"),
        (("--confidence", "90"), "--confidence goes with --set-target"),
        (("--set-target", "weather=lots"), "a share such as 0.95"),
    ):
        out = run_cli("--data-dir", data_dir, *bad)
        assert out.returncode == 2 and words in out.stderr, out.stderr


def test_a_sample_keeps_its_batch_and_its_people_and_every_decision_is_listed_most_urgent_first(settings, batch):
    """Issue 45: a second sample of the same job, drawn for another person, took over Quality (the older sample's
    certain "Fix" was off the first screen) and "Draw more" into the first took the second's clips from their
    reviewer. Now each sample decides about the batch it was drawn from, every decision is listed (fix, review,
    accept; newest first within), and a draw never takes a clip from the person who holds it."""
    db = batch
    s1 = draw(db, 16, seed=4)  # for ann
    first = samples.members(db, s1["id"])
    for m in first[:10]:
        review(db, m["clip_id"], "rain")  # the weather wrong on all 10 reviewed; 6 wait with ann
    assert decision.decide(db, s1["id"]).verdict == "fix"
    # a second sample of the same job, for ann2: the whole population (the 30 clips unreviewed now)
    s2 = samples.draw(db, Filter(job_id=db.job), 100, ["ann2"], actor="lead", role="lead", seed=5)
    assert s2["population"] == 30 and s2["drawn"] == 30
    waiting = {m["clip_id"] for m in first[10:]}
    assert s2["kept"] == {"ann": 6} and s2["also_in"] == {s1["id"]: 6} and s2["assigned"] == {"ann2": 24}
    second = {m["clip_id"]: m["assignee"] for m in samples.members(db, s2["id"])}
    assert {c for c, who in second.items() if who == "ann"} == waiting  # ann's waiting members stayed hers
    for cid in waiting:
        assert assignments.assignee_of(db, cid) == "ann"
    # each decision is about its own batch: sample 1's is still about its 40 clips, and still "fix"
    d1, d2 = decision.decide(db, s1["id"]), decision.decide(db, s2["id"])
    assert (d1.verdict, d1.sample["population"], d2.verdict, d2.sample["population"]) == ("fix", 40, "review", 30)
    assert "(40 clips of job" in tables.decision_text(d1) and "(30 clips of job" in tables.decision_text(d2)
    listed = decision.decisions(db)
    assert [d.sample["id"] for d in listed] == [s1["id"], s2["id"]]  # the older "fix" first
    out = run_cli("--data-dir", str(settings.data_dir)).stdout  # the terminal: the same list, the first in full
    assert out.index(f"  sample {s1['id']}: Fix the batch") < out.index(f"  sample {s2['id']}: Review 30 more")
    assert f"Decision: Fix the batch of sample {s1['id']}" in out
    # drawing more into sample 1 takes the clips of its batch it has not taken, and none from ann2
    before = {cid: assignments.assignee_of(db, cid) for cid in db.ids}
    moves = len(list(events.iter_all(db, "clip.assign")))
    r = rounds.draw_more(db, s1["id"], 100, actor="lead", role="lead", seed=6)
    assert r["round_drawn"] == 24 and r["kept"] == {"ann2": 24} and r["also_in"] == {s2["id"]: 24}
    assert r["assigned"] == {} and len(list(events.iter_all(db, "clip.assign"))) == moves
    assert {cid: assignments.assignee_of(db, cid) for cid in db.ids} == before
    new = [m for m in samples.members(db, s1["id"]) if m["round"] == 1]
    assert {m["assignee"] for m in new} == {"ann2"}
    said = tables.held_text(r)
    assert said == (
        f"24 stay with whoever had them (24 with ann2): a draw takes nobody's clip; members of another sample too "
        f"(24 of sample {s2['id']}): one review of a clip counts for each"
    )
    # ann2's review of one of them counts for both samples
    cid = new[0]["clip_id"]
    review(db, cid)
    assert estimates.tally(db, samples.get(db, s1["id"])).decided == {"all": 11}
    assert estimates.tally(db, samples.get(db, s2["id"])).decided == {"all": 1}
