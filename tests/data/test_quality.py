"""The model measured against its reviewers (data.quality, data.quality.stats) on real SQLite files.

A review history is generated through data.captions (machine captions of two prompt versions and two jobs,
reviewers' label fixes and text edits in chains of versions, adopts, rejects, text written from scratch) while
the test keeps its own record of what the model said and what was approved. Every figure is then checked against
an independent computation: scikit-learn for accuracy, the confusion matrix, precision and recall, multi-label
scores and Cohen's kappa; scipy for the Wilson interval (and its root finder for the interval with the
finite-population correction); hand-worked cases for the stratified estimate and the corrected sample sizes.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import binomtest, norm
from sklearn.metrics import (
    accuracy_score,
    cohen_kappa_score,
    confusion_matrix,
    jaccard_score,
    precision_recall_fscore_support,
)
from sklearn.preprocessing import MultiLabelBinarizer

from data import captions, clips, jobs, quality, review_states, taxonomy, textdiff, users
from data.clips import Filter
from data.db import immediate
from data.errors import DataError, NotFound
from data.job_params import JobParams
from data.jobs.selection import Selection
from data.quality import pairs, samples, second_review, stats

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery"
WORDS = "the ego car slows as a pedestrian crosses while a truck waits at the light on a wet street".split()
SINGLE = [n for n in taxonomy.ENUMS if n not in taxonomy.MULTI]


def make_clips(db, n: int) -> list[int]:
    with immediate(db):
        for i in range(n):
            db.execute("INSERT INTO clips (path) VALUES (?)", [f"q/clip_{i:04d}.mp4"])
    return [r[0] for r in db.execute("SELECT id FROM clips WHERE path LIKE 'q/%' ORDER BY id")]


def random_labels(rng: random.Random) -> dict:
    out = {}
    for name, values in taxonomy.ENUMS.items():
        if name in taxonomy.MULTI:
            out[name] = rng.sample(values, rng.choice((0, 1, 2, 3)))
        else:
            out[name] = rng.choice(values[:4])  # a few values each, so classes repeat
    return out


def fix(rng: random.Random, labels: dict, rate: float = 0.3) -> dict:
    """A reviewer's correction: each label changed with probability `rate`."""
    out = json.loads(json.dumps(labels))
    for name, values in taxonomy.ENUMS.items():
        if rng.random() < rate:
            if name in taxonomy.MULTI:
                out[name] = sorted(set(out[name]) ^ {rng.choice(values[:5])})
            else:
                out[name] = rng.choice([v for v in values[:4] if v != out[name]])
    return out


def provenance(version: int) -> dict:
    return {"model": f"model-{version}", "prompt_name": "av-hazard", "prompt_version": version, "frames": 16}


class History:
    """What the test knows independently: per approved clip with a machine origin, (clip, job, prompt version,
    what the model said, what was approved, the machine text, the approved text)."""

    def __init__(self):
        self.pairs: list[dict] = []
        self.rejected: list[int] = []
        self.unreviewed: list[int] = []
        self.scratch: list[int] = []

    def where(self, **kw) -> list[dict]:
        return [p for p in self.pairs if all(p[k] == v for k, v in kw.items())]


def build_history(db, n: int = 240, seed: int = 7) -> History:
    rng = random.Random(seed)
    ids = make_clips(db, n)
    job_ids = {
        v: jobs.create(
            db,
            name=f"v{v}",
            created_by="lead",
            selection=Selection.of_clips(ids[v - 1 :: 2]),
            prompt_id=None,
            params=JobParams(),
        )
        for v in (1, 2)
    }
    h = History()
    for i, cid in enumerate(ids):
        if i % 40 == 39:  # text a person wrote from scratch, approved: nothing to measure
            mine = captions.save_human(
                db, cid, text="written by hand", labels=random_labels(rng), author="ann", base_caption_id=None
            )
            review_states.set_review(db, cid, status="approved", user="lee", base_caption_id=mine["id"])
            h.scratch.append(cid)
            continue
        version = 1 + i % 2
        said, text = random_labels(rng), " ".join(rng.choices(WORDS, k=rng.randint(8, 20)))
        cap, _ = captions.add_machine(
            db, cid, job_id=job_ids[version], text=text, labels=said, provenance=provenance(version)
        )
        roll = rng.random()
        if roll < 0.1:
            h.unreviewed.append(cid)
            continue
        if roll < 0.15:
            review_states.set_review(db, cid, status="rejected", user="lee", base_caption_id=cap["id"])
            h.rejected.append(cid)
            continue
        current, labels, words = cap, said, text
        for _ in range(rng.choice((0, 0, 1, 1, 2))):  # a chain of edits, each derived from the one before
            labels = fix(rng, labels)
            if rng.random() < 0.5:
                w = words.split()
                w[rng.randrange(len(w))] = rng.choice(WORDS)
                words = " ".join(w + (["indeed"] if rng.random() < 0.3 else []))
            current = captions.save_human(
                db, cid, text=words, labels=labels, author="ann", base_caption_id=current["id"]
            )
        if current is not cap and rng.random() < 0.15:  # an adopt of the machine version: back to what it said
            current = captions.adopt(db, cid, caption_id=cap["id"], author="ann", base_caption_id=current["id"])
            labels, words = said, text
        review_states.set_review(db, cid, status="approved", user="lee", base_caption_id=current["id"])
        h.pairs.append(
            {
                "clip": cid,
                "job": job_ids[version],
                "version": version,
                "said": said,
                "approved": labels,
                "text": text,
                "approved_text": words,
            }
        )
    return h


@pytest.fixture
def hist(db):
    return build_history(db)


def group(report: quality.Report, **key) -> quality.Group:
    [g] = [g for g in report.groups if all(g.key.get(k) == v for k, v in key.items())]
    return g


def check_single(s: quality.LabelStats, pairs: list[dict], label: str) -> None:
    y_true = [p["approved"][label] for p in pairs]
    y_pred = [p["said"][label] for p in pairs]
    assert s.n == len(pairs)
    assert s.accuracy == pytest.approx(accuracy_score(y_true, y_pred))
    assert s.classes == [v for v in taxonomy.ENUMS[label] if v in set(y_true) | set(y_pred)]
    assert s.matrix == confusion_matrix(y_true, y_pred, labels=s.classes).tolist()
    precision, recall, _, support = precision_recall_fscore_support(
        y_true, y_pred, labels=s.classes, zero_division=np.nan
    )
    for c, p, r, n in zip(s.classes, precision, recall, support):
        assert (s.precision(c) is None) == bool(np.isnan(p)) and (s.recall(c) is None) == bool(np.isnan(r))
        if not np.isnan(p):
            assert s.precision(c) == pytest.approx(p)
        if not np.isnan(r):
            assert s.recall(c) == pytest.approx(r)
        assert sum(s.matrix[s.classes.index(c)]) == n


def check_multi(s: quality.ItemStats, pairs: list[dict], label: str) -> None:
    mlb = MultiLabelBinarizer(classes=list(taxonomy.ENUMS[label]))
    y_true = mlb.fit_transform([p["approved"][label] for p in pairs])
    y_pred = mlb.transform([p["said"][label] for p in pairs])
    assert s.n == len(pairs)
    assert s.accuracy == pytest.approx(accuracy_score(y_true, y_pred))  # subset accuracy: the exact set
    assert s.jaccard == pytest.approx(jaccard_score(y_true, y_pred, average="samples", zero_division=1.0))
    precision, recall, _, _ = precision_recall_fscore_support(y_true, y_pred, average=None, zero_division=np.nan)
    for item, p, r in zip(mlb.classes_, precision, recall):
        got_p, got_r = s.precision(item), s.recall(item)
        assert (got_p is None) == bool(np.isnan(p)) and (got_r is None) == bool(np.isnan(r))
        if got_p is not None:
            assert got_p == pytest.approx(p)
        if got_r is not None:
            assert got_r == pytest.approx(r)


def test_every_label_equals_scikit_learn_per_prompt_version(db, hist):
    r = quality.report(db, by=("prompt",))
    assert r.approved == len(hist.pairs) + len(hist.scratch)
    assert r.without_origin == len(hist.scratch)
    assert [g.key["prompt_version"] for g in r.groups] == sorted((1, 2), key=lambda v: -len(hist.where(version=v)))
    for version in (1, 2):
        pairs = hist.where(version=version)
        g = group(r, prompt_version=version)
        assert g.key == {"prompt_name": "av-hazard", "prompt_version": version} and g.n == len(pairs)
        for label in SINGLE:
            check_single(g.labels[label], pairs, label)
        check_multi(g.labels["road_users"], pairs, "road_users")


def test_text_edit_ratio_median_and_distribution(db, hist):
    r = quality.report(db, by=())
    [g] = r.groups
    ratios = [textdiff.edit_ratio(p["text"], p["approved_text"]) for p in hist.pairs]
    assert g.text.n == len(ratios) and g.text.unchanged == sum(1 for x in ratios if x == 0)
    assert g.text.median == pytest.approx(statistics.median(ratios))
    assert g.text.histogram == np.histogram(ratios, bins=10, range=(0, 1))[0].tolist()
    assert 0 < g.text.unchanged < len(ratios)  # the history holds both kinds


def test_grouped_by_job_model_and_prompt_and_narrowed_by_scope_and_filter(db, hist):
    r = quality.report(db, by=("model", "prompt", "job"))
    assert {tuple(g.key.values()) for g in r.groups} == {
        (f"model-{p['version']}", "av-hazard", p["version"], p["job"]) for p in hist.pairs
    }
    job = hist.pairs[0]["job"]
    [g] = quality.report(db, scope=quality.Scope(job_id=job), by=()).groups
    check_single(g.labels["hazard_level"], hist.where(job=job), "hazard_level")
    [g] = quality.report(db, scope=quality.Scope.of(prompt="av-hazard:2"), by=("prompt",)).groups
    assert g.n == len(hist.where(version=2))
    assert quality.report(db, scope=quality.Scope.of(prompt="av-hazard:3")).groups == []
    # a Browse filter (facet columns mirror the approved caption) narrows the clips
    rainy = [p for p in hist.pairs if p["approved"]["weather"] == "rain"]
    [g] = quality.report(db, Filter(weather="rain"), by=()).groups
    assert g.n == len(rainy) > 0
    check_single(g.labels["scenario_category"], rainy, "scenario_category")


def test_a_later_edit_of_an_approved_clip_is_measured_as_it_is_now(db, hist):
    """An edit after the approval leaves the clip unreviewed (nobody approved the new text): it is not measured
    until it is approved again, then as it is now."""
    quality.report(db)  # the pairs are stored now
    p = hist.pairs[0]
    clip = db.execute("SELECT current_caption_id FROM clips WHERE id = ?", [p["clip"]]).fetchone()[0]
    level = "critical" if p["approved"]["hazard_level"] != "critical" else "none"
    labels = {**p["approved"], "hazard_level": level}
    new = captions.save_human(db, p["clip"], text="fixed again", labels=labels, author="ann", base_caption_id=clip)
    [g] = quality.report(db, by=()).groups
    check_single(g.labels["hazard_level"], hist.pairs[1:], "hazard_level")
    review_states.set_review(db, p["clip"], status="approved", user="lee", base_caption_id=new["id"])
    p["approved"], p["approved_text"] = labels, "fixed again"
    [g] = quality.report(db, by=()).groups
    check_single(g.labels["hazard_level"], hist.pairs, "hazard_level")
    assert g.text.median == pytest.approx(
        statistics.median(textdiff.edit_ratio(x["text"], x["approved_text"]) for x in hist.pairs)
    )


def test_pairs_are_stored_once_and_refilled_after_the_cache_is_emptied(db, hist):
    first = quality.report(db, by=()).to_dict()
    stored = db.execute("SELECT COUNT(*) FROM quality_pairs").fetchone()[0]
    assert stored == len(hist.pairs) + len(hist.scratch)
    assert quality.fill(db) == 0  # nothing left to fill
    with immediate(db):
        db.execute("DELETE FROM quality_pairs")
    assert quality.report(db, by=()).to_dict() == first


def test_a_filter_for_other_review_states_is_refused_with_a_message(db):
    with pytest.raises(DataError, match="approved clips"):
        quality.report(db, Filter(review_status="unreviewed"))
    with pytest.raises(DataError, match="Choose from"):
        quality.report(db, by=("weather",))
    for bad in (":3", "av-hazard:two", "av-hazard:0", "x" * 201):
        with pytest.raises(DataError, match="(?i)prompt"):
            quality.Scope.of(prompt=bad)  # each message says what to write
    with pytest.raises(DataError, match="job"):
        quality.Scope.of(job="seven")
    assert quality.parse_prompt("av:hazard:2") == ("av:hazard", 2)


# -- statistics ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k,n", [(0, 1), (1, 1), (0, 10), (7, 10), (10, 10), (97, 120), (500, 1000), (3, 2000)])
def test_wilson_interval_equals_scipy(k, n):
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    got = stats.wilson(k, n)
    assert got.p == k / n and got.n == n
    assert (got.low, got.high) == (pytest.approx(ci.low, abs=1e-12), pytest.approx(ci.high, abs=1e-12))
    assert stats.wilson(0, 0) is None


def test_stratified_estimate_hand_worked():
    # strata N = 20 and 80; 5 reviewed in each, 4 and 5 right:
    # p = 0.2 * 0.8 + 0.8 * 1.0 = 0.96; var = 0.2^2 * 0.8 * 0.2 / 5 * (1 - 5/20) + 0 = 0.00096
    got = stats.stratified([stats.Stratum(20, 5, 4), stats.Stratum(80, 5, 5)])
    half = 1.959963984540054 * math.sqrt(0.00096)
    assert got.p == pytest.approx(0.96)
    assert (got.low, got.high) == (pytest.approx(0.96 - half), 1.0)  # clipped at 1
    assert got.n == 10
    # three strata, every clip of one reviewed (its correction is 0): N = 10, 30, 60; n = 10, 6, 12; k = 9, 3, 9
    got = stats.stratified([stats.Stratum(10, 10, 9), stats.Stratum(30, 6, 3), stats.Stratum(60, 12, 9)])
    p = 0.1 * 0.9 + 0.3 * 0.5 + 0.6 * 0.75  # 0.69
    var = 0 + 0.09 * 0.25 / 6 * (1 - 6 / 30) + 0.36 * 0.1875 / 12 * (1 - 12 / 60)  # 0.003 + 0.0045
    assert got.p == pytest.approx(p) == pytest.approx(0.69)
    assert got.half_width == pytest.approx(1.959963984540054 * math.sqrt(var))
    assert stats.stratified([stats.Stratum(10, 3, 3), stats.Stratum(5, 0, 0)]) is None  # a stratum not reviewed


def test_more_reviews_is_the_smallest_count_that_meets_the_margin():
    z = stats.Z95

    def half(k, n, m):  # the Wilson half-width at the planning proportion after m reviews in all
        p = (k + 2) / (n + 4)
        return z / (1 + z * z / m) * math.sqrt(p * (1 - p) / m + z * z / (4 * m * m))

    for k, n, margin in ((0, 0, 0.05), (45, 50, 0.05), (50, 50, 0.02), (300, 400, 0.03)):
        more = stats.more_reviews(k, n, margin)
        assert half(k, n, n + more) <= margin < half(k, n, n + more - 1)
    assert 370 <= stats.more_reviews(0, 0, 0.05) <= 385  # the textbook ~385 for +/- 5 points at p = 0.5
    assert stats.more_reviews(990, 1000, 0.05) == 0
    with pytest.raises(ValueError):
        stats.more_reviews(1, 2, 0)


def test_more_reviews_stratified_meets_the_margin_and_not_one_review_less():
    strata = [stats.Stratum(2000, 20, 15), stats.Stratum(8000, 40, 38)]
    more = stats.more_reviews_stratified(strata, 0.03)
    assert more > 0

    def half_after(extra):
        planned = [min(s.size, s.reviewed + math.ceil(extra * s.size / 10000)) for s in strata]
        var = sum(
            (s.size / 10000) ** 2
            * ((s.correct + 2) / (s.reviewed + 4))
            * (1 - (s.correct + 2) / (s.reviewed + 4))
            / m
            * (1 - m / s.size)
            for s, m in zip(strata, planned)
        )
        return stats.Z95 * math.sqrt(var), sum(planned) - 60

    fits = [e for e in range(0, 5000) if half_after(e)[0] <= 0.03]
    assert more == half_after(fits[0])[1]


def test_kappa_equals_scikit_learn_unweighted_and_linear():
    rng = random.Random(3)
    levels = list(taxonomy.HAZARD_LEVELS)
    a = [rng.choice(levels) for _ in range(300)]
    b = [x if rng.random() < 0.7 else rng.choice(levels) for x in a]
    table: dict = {}
    for x, y in zip(a, b):
        table[(x, y)] = table.get((x, y), 0) + 1
    assert stats.kappa(table) == pytest.approx(cohen_kappa_score(a, b))
    assert stats.kappa(table, levels, "linear") == pytest.approx(
        cohen_kappa_score(a, b, labels=levels, weights="linear")
    )
    # a level nobody used still counts as a step of the order
    c = [x.replace("low", "none") for x in a]
    d = [x.replace("low", "none") for x in b]
    t2: dict = {}
    for x, y in zip(c, d):
        t2[(x, y)] = t2.get((x, y), 0) + 1
    assert stats.kappa(t2, levels, "linear") == pytest.approx(cohen_kappa_score(c, d, labels=levels, weights="linear"))
    assert stats.kappa({("a", "a"): 5}) is None and stats.kappa({}) is None


# -- samples and second reviews (data.quality.samples, second_review) ---------------------------------------------


@pytest.fixture
def batch(db):
    """100 clips of one job with an unreviewed machine caption: 20 of hazard level high, 80 none."""
    for name, role in (("ann", "annotator"), ("ann2", "annotator"), ("lead", "lead")):
        users.create(db, name, role=role, password=PASSWORD)
    ids = make_clips(db, 100)
    job = jobs.create(
        db, name="batch", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None, params=JobParams()
    )
    rng = random.Random(11)
    for i, cid in enumerate(ids):
        labels = {**random_labels(rng), "hazard_level": "high" if i < 20 else "none"}
        captions.add_machine(db, cid, job_id=job, text=f"clip {cid}", labels=labels, provenance=provenance(2))
    db.job = job
    return db


def review(db, clip_id: int, change: dict | None = None, status: str = "approved") -> dict:
    cur = captions.get(db, db.execute("SELECT current_caption_id FROM clips WHERE id = ?", [clip_id]).fetchone()[0])
    if change:
        cur = captions.save_human(
            db, clip_id, text=cur["text"], labels={**cur["labels"], **change}, author="ann", base_caption_id=cur["id"]
        )
    review_states.set_review(db, clip_id, status=status, user="ann", base_caption_id=cur["id"])
    return cur


def machine_labels(db, review_id: int) -> dict:
    """The labels of the machine caption a second review's clip was first reviewed from."""
    origin = db.execute("SELECT origin_caption_id FROM second_reviews WHERE id = ?", [review_id]).fetchone()[0]
    return captions.get(db, origin)["labels"]


def other(db, clip_id: int, label: str) -> str:
    """A value of `label` other than the one clip `clip_id`'s current caption has."""
    cur = captions.get(db, db.execute("SELECT current_caption_id FROM clips WHERE id = ?", [clip_id]).fetchone()[0])
    return next(v for v in taxonomy.ENUMS[label] if v != cur["labels"][label])


def test_estimate_from_a_simple_random_sample_is_wilson(batch):
    db = batch
    s = samples.draw(db, Filter(job_id=db.job), 30, ["ann"], actor="lead", role="lead", seed=5)
    members = samples.members(db, s["id"])
    right = 0
    for i, m in enumerate(members[:25]):  # 25 reviewed; the weather of every fourth one was wrong
        if i % 4 == 0:
            review(db, m["clip_id"], {"weather": other(db, m["clip_id"], "weather")})
        else:
            right += 1
            review(db, m["clip_id"])
    review(db, members[25]["clip_id"], status="rejected")  # not counted, and said so
    review_states.flag_broken(db, members[26]["clip_id"], user="ann", reason="black frames only")  # likewise
    # a clip reviewed because someone chose it, outside the sample, changes nothing
    outside = next(c for c in range(1, 101) if c not in {m["clip_id"] for m in members})
    review(db, outside, {"weather": "fog"})
    e = quality.estimate(db, s["id"], margin=5)
    assert (e.method, e.reviewed, e.rejected, e.pending) == ("wilson", 25, 2, 3)
    w = e.labels["weather"]
    # the score test with the finite-population correction, solved by scipy's root finder: a batch of 98
    # measurable clips (100, less the 2 members known to have no approved labels), 25 reviewed
    big_n, p_hat, z = 98, right / 25, norm.ppf(0.975)

    def score(p):
        return (p_hat - p) ** 2 - z * z * p * (1 - p) / 25 * (big_n - 25) / (big_n - 1)

    low, high = brentq(score, 1e-12, p_hat), brentq(score, p_hat, 1 - 1e-12)
    assert w.interval.p == p_hat and (w.interval.low, w.interval.high) == (pytest.approx(low), pytest.approx(high))
    # narrower than the interval of an infinite population (scipy's), which it would be without the correction
    ci = binomtest(right, 25).proportion_ci(method="wilson")
    assert ci.low < w.interval.low and w.interval.high < ci.high
    # the reviews to make: n = n0 / (1 + (n0 - 1) / N) of the n0 an infinite population needs
    n0 = 25 + stats.more_reviews(right, 25, 0.05)
    assert w.more == math.ceil(n0 / (1 + (n0 - 1) / big_n)) - 25 > 0
    assert w.more <= big_n - 25 and w.left == big_n - 25
    assert e.labels["hazard_level"].interval.p == 1.0
    assert e.more == max(x.more for x in e.labels.values())
    # only members of a drawn sample count: a draw's estimate ignores the chosen clip above
    assert sum(x.reviewed for x in w.strata) == 25


def test_estimate_from_a_stratified_sample_hand_worked(batch):
    db = batch
    s = samples.draw(db, Filter(job_id=db.job), 10, ["ann"], actor="lead", role="lead", stratify="equal", seed=1)
    assert {x["stratum"]: (x["population"], x["drawn"]) for x in s["strata"]} == {"high": (20, 5), "none": (80, 5)}
    members = samples.members(db, s["id"])
    high = [m for m in members if m["stratum"] == "high"]
    for m in members:  # one high-hazard clip's level was wrong (the model said high, it was critical)
        review(db, m["clip_id"], {"hazard_level": "critical"} if m is high[0] else None)
    e = quality.estimate(db, s["id"])
    h = e.labels["hazard_level"]
    assert e.method == "stratified"
    # p = 20/100 * 4/5 + 80/100 * 5/5 = 0.96, var = 0.2^2 * 0.8 * 0.2 / 5 * (1 - 5/20) = 0.00096
    assert h.interval.p == pytest.approx(0.96)
    assert h.interval.low == pytest.approx(0.96 - stats.Z95 * math.sqrt(0.00096)) and h.interval.high == 1.0
    assert e.labels["weather"].interval.p == 1.0


def test_a_stratified_sample_with_a_stratum_not_yet_reviewed_has_no_estimate(batch):
    db = batch
    s = samples.draw(db, Filter(job_id=db.job), 10, ["ann"], actor="lead", role="lead", stratify="equal", seed=2)
    for m in samples.members(db, s["id"]):
        if m["stratum"] == "none":
            review(db, m["clip_id"])
    e = quality.estimate(db, s["id"])
    assert e.labels["weather"].interval is None and e.labels["weather"].more > 0
    with pytest.raises(NotFound):
        quality.estimate(db, 999)
    with pytest.raises(DataError, match="margin"):
        quality.estimate(db, s["id"], margin="wide")


def test_kappa_between_first_and_blind_second_reviewer_equals_scikit_learn(batch):
    db = batch
    users.create(db, "ann3", role="annotator", password=PASSWORD)
    s = samples.draw(db, Filter(job_id=db.job), 40, ["ann"], actor="lead", role="lead", seed=9)
    rng = random.Random(4)
    first, second, decisions = [], [], []
    for m in samples.members(db, s["id"]):
        change = {"hazard_level": rng.choice(taxonomy.HAZARD_LEVELS)} if rng.random() < 0.4 else None
        status = "rejected" if rng.random() < 0.1 else "approved"
        review(db, m["clip_id"], change, status)
    second_review.send_to_second(db, s["id"], "ann3", actor="lead", role="lead", reviewed_only=True)
    while (t := second_review.next_task(db, "ann3")) is not None:
        said = machine_labels(db, t["id"])  # what the model said: the second reviewer is not shown it
        answer = {**said, "hazard_level": rng.choice(taxonomy.HAZARD_LEVELS)} if rng.random() < 0.5 else said
        if rng.random() < 0.3:
            answer = {**answer, "road_users": sorted(set(answer["road_users"]) ^ {"bus"})}
        decision = "rejected" if rng.random() < 0.1 else "approved"
        second_review.answer(db, t["id"], "ann3", labels=answer, decision=decision)
    for r in second_review.second_reviews(db, sample_id=s["id"]):
        decisions.append((r["first_decision"], r["decision"]))
        if r["first_decision"] == "approved":
            first.append(r["first_labels"])
            second.append(r["labels"])
    a = quality.agreement(db, sample_id=s["id"])
    assert a.pairs == len(decisions) == 40
    d1, d2 = zip(*decisions)
    assert a.decision.kappa == pytest.approx(cohen_kappa_score(d1, d2))
    hz = a.labels["hazard_level"]
    y1, y2 = [x["hazard_level"] for x in first], [x["hazard_level"] for x in second]
    assert hz.n == len(first) and hz.agree == pytest.approx(accuracy_score(y1, y2))
    assert hz.kappa == pytest.approx(cohen_kappa_score(y1, y2, labels=list(taxonomy.HAZARD_LEVELS), weights="linear"))
    ru = a.labels["road_users"]
    sets1 = [json.dumps(sorted(x["road_users"])) for x in first]
    sets2 = [json.dumps(sorted(x["road_users"])) for x in second]
    assert ru.kappa == pytest.approx(cohen_kappa_score(sets1, sets2))
    bus1 = ["bus" in x["road_users"] for x in first]
    bus2 = ["bus" in x["road_users"] for x in second]
    assert ru.items["bus"] == pytest.approx(cohen_kappa_score(bus1, bus2))
    assert quality.agreement(db).pairs == 40  # every sample, no filter
    assert quality.agreement(db, Filter(weather="nothing-like-this")).pairs == 0


# -- the CLI ------------------------------------------------------------------------------------------------------


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "data.quality", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_cli_help_has_an_example():
    out = run_cli("--help")
    assert out.returncode == 0
    assert "python -m data.quality --data-dir var" in out.stdout and "--prompt" in out.stdout


def test_cli_prints_the_report_and_json_equal_to_the_library(settings, db, hist):
    data_dir = str(settings.data_dir)
    text = run_cli("--data-dir", data_dir, "--prompt", "av-hazard:1", "--detail")
    assert text.returncode == 0, text.stderr
    g = group(quality.report(db, scope=quality.Scope.of(prompt="av-hazard:1")), prompt_version=1)
    assert f"av-hazard v1 · model-1: {g.n:,} clips" in text.stdout
    assert f"hazard_level       {g.n:,}" in text.stdout and f"{g.labels['hazard_level'].accuracy:.3f}" in text.stdout
    assert "approved \\ model said" in text.stdout  # --detail: the confusion matrices
    js = run_cli("--data-dir", data_dir, "--job", str(hist.pairs[0]["job"]), "--by", "job", "--json")
    assert js.returncode == 0, js.stderr
    out = json.loads(js.stdout)
    [got] = out["report"]["groups"]
    want = quality.report(db, scope=quality.Scope(job_id=hist.pairs[0]["job"]), by=("job",)).groups[0].to_dict()
    assert got == json.loads(json.dumps(want))
    assert out["estimate"] is None and out["agreement"]["pairs"] == 0
    bad = run_cli("--data-dir", data_dir, "--prompt", "av-hazard:x")
    assert bad.returncode == 2 and "error: A prompt version is a whole number" in bad.stderr
    bad = run_cli("--data-dir", data_dir, "--filter", "{not json")
    assert bad.returncode == 2 and "--filter takes a JSON object" in bad.stderr


# -- the export's review flags ------------------------------------------------------------------------------------


def test_export_says_which_records_were_reviewed_sampled_and_reviewed_twice(batch):
    from data import export

    db = batch
    users.create(db, "ann3", role="annotator", password=PASSWORD)
    s = samples.draw(db, Filter(job_id=db.job), 6, ["ann"], actor="lead", role="lead", seed=3)
    members = [m["clip_id"] for m in samples.members(db, s["id"])]
    for clip_id in members[:4]:
        review(db, clip_id)
    chosen = next(c for c in range(1, 101) if c not in members)
    review(db, chosen, status="rejected")  # reviewed because someone chose it: not a sample
    second_review.send_to_second(db, s["id"], "ann3", actor="lead", role="lead", reviewed_only=True)
    t = second_review.next_task(db, "ann3")
    second_review.answer(db, t["id"], "ann3", labels=machine_labels(db, t["id"]), decision="approved")
    pending = second_review.next_task(db, "ann3")  # sent but not answered: not double-reviewed yet
    assert pending is not None and pending["clip_id"] != t["clip_id"]
    recs = {r["clip_id"]: r for r in export.iter_rows(db)}
    assert len(recs) == 100
    for cid, r in recs.items():
        reviewed = cid in members[:4] or cid == chosen
        assert (r["human_reviewed"], r["random_sample"], r["double_reviewed"]) == (
            reviewed,
            cid in members,
            cid == t["clip_id"],
        ), cid


def test_a_report_reads_the_covering_index_and_the_pairs_only(db, hist):
    """The plan of a report's pass, with and without facets: the approved clips from idx_clips_quality (no clip
    row read, no caption), each pair by its primary key; a text search is driven by its own index instead."""
    for f in (Filter(), Filter(weather="rain", lighting="daylight"), Filter(hazard_level="high", job_id=1)):
        p = pairs.select_pairs(f, quality.Scope(job_id=1))
        plan = " / ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN " + p.sql("q.s_weather"), p.args))
        assert "SEARCH c USING COVERING INDEX idx_clips_quality (review_status=? AND missing=?)" in plan, plan
        assert "SEARCH q USING PRIMARY KEY (truth_id=?)" in plan and "captions" not in plan, plan
    p = pairs.select_pairs(Filter(text="pedestrian"), quality.Scope())
    assert "INDEXED BY" not in p.sql("1")
    found = set(clips.iter_ids(db, Filter(text="pedestrian")))
    want = [x for x in hist.pairs if x["clip"] in found]
    [g] = quality.report(db, Filter(text="pedestrian"), by=()).groups
    assert 0 < g.n == len(want) < len(hist.pairs)
    check_single(g.labels["weather"], want, "weather")


def test_the_tab_draws_calibration_and_the_cli_carries_it(settings, db):
    """A hand-worked case: three approved hazard levels the model gave at confidence 0.95 (two right) and one at
    0.35 (wrong): the tab's table has the two buckets, the plot draws, and --json carries data.quality.calibration."""
    from data.quality import calibration
    from webapp.quality import plots as quality_plots, tab as quality_tab

    ids = make_clips(db, 4)
    for cid, (p, right) in zip(ids, ((0.95, True), (0.95, True), (0.95, False), (0.35, False))):
        said = {**random_labels(random.Random(cid)), "hazard_level": "low"}
        conf = {"labels": {"hazard_level": p}}
        cap, _ = captions.add_machine(
            db, cid, job_id=None, text="t", labels=said, provenance={**provenance(2), "confidence": conf}
        )
        review_caption = cap
        if not right:
            review_caption = captions.save_human(
                db, cid, text="t", labels={**said, "hazard_level": "high"}, author="ann", base_caption_id=cap["id"]
            )
        review_states.set_review(db, cid, status="approved", user="lee", base_caption_id=review_caption["id"])
    rows = calibration.calibration(db, label="hazard_level", buckets=10)
    assert quality_tab.calibration_rows(rows) == [
        ["0.3 - 0.4", "1", "0", "0.000", "0.350"],
        ["0.9 - 1.0", "3", "2", "0.667", "0.950"],
    ]
    import io

    buf = io.BytesIO()
    quality_plots.calibration_figure("hazard_level", rows).savefig(buf, format="png")
    assert buf.tell() > 1000
    out = run_cli("--data-dir", str(settings.data_dir), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["calibration"] == json.loads(json.dumps(calibration.calibration(db)))
    text = run_cli("--data-dir", str(settings.data_dir), "--detail")
    assert ["0.9-1.0", "3", "0.667", "0.950"] in [line.split() for line in text.stdout.splitlines()], text.stdout
