"""One interval per figure (issue 45, point 4): the same counts on every surface that shows them, the Quality
tab's decision and estimate tables, the terminal (`python -m data.quality`) and a release's dataset card, each
interval named by its kind, each kind giving the same numbers wherever it is shown, and each checked against an
independent computation of what its name says.

The issue's case: 11 of 16 right on the hazard level, a sample of a batch of 60. Before, it read 0.367-0.900 in
the decision, 0.476-0.842 in the estimate and 0.444-0.858 on the release card, with nothing saying why.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import betabinom, binomtest, hypergeom

from data import captions, jobs, review_states, users
from data.clips import Filter
from data.db import immediate
from data.job_params import JobParams
from data.jobs.selection import Selection
from data.quality import decision, estimates, samples, sequential, stats, tables, targets
from tests.support.release_library import LABELS, provenance

ROOT = Path(__file__).resolve().parents[2]
BATCH, DRAWN, RIGHT = 60, 16, 11


def brute_force_bounds(k: int, n: int, big_n: int, alpha: float) -> tuple[float, float]:
    """The confidence sequence over every M of 0..N from scipy (beta-binomial prior, hypergeometric draws)."""
    ms = np.arange(big_n + 1)
    before = betabinom.pmf(ms, big_n, *sequential.PRIOR)
    after = before * hypergeom.pmf(k, big_n, ms, n)
    after /= after.sum()
    inside = ms[before < after / alpha]
    return inside.min() / big_n, inside.max() / big_n


def wilson_finite(k: int, n: int, big_n: int) -> tuple[float, float]:
    """The Wilson score interval with n weighing as n (N - 1) / (N - n), by hand."""
    z, p = stats.Z95, k / n
    m = n * (big_n - 1) / (big_n - n)
    centre = (p + z * z / (2 * m)) / (1 + z * z / m)
    half = z / (1 + z * z / m) * math.sqrt(p * (1 - p) / m + z * z / (4 * m * m))
    return centre - half, centre + half


@pytest.fixture
def library(settings, db):
    """A batch of 60 clips of one job; a sample of 16 drawn for ann, all approved, the hazard level right on 11."""
    users.create(db, "ann", role="annotator", password="correct horse battery")
    users.create(db, "lead", role="lead", password="correct horse battery")
    with immediate(db):
        ids = [db.execute("INSERT INTO clips (path) VALUES (?)", [f"b/clip_{i:03d}.mp4"]).lastrowid for i in range(60)]
    job = jobs.create(db, name="b", created_by="lead", selection=Selection.of_clips(ids), prompt_id=None,
                      params=JobParams())  # fmt: skip
    for cid in ids:
        captions.add_machine(db, cid, job_id=job, text=f"clip {cid}", labels=LABELS, provenance=provenance())
    s = samples.draw(db, Filter(job_id=job), DRAWN, ["ann"], actor="lead", role="lead", stratify="none", seed=1)
    for i, m in enumerate(samples.members(db, s["id"])):
        cap = captions.get(db, m["caption_id"])
        if i >= RIGHT:  # the reviewer changed the hazard level: the model was wrong
            cap = captions.save_human(db, m["clip_id"], text=cap["text"], labels={**LABELS, "hazard_level": "low"},
                                      author="ann", base_caption_id=cap["id"])  # fmt: skip
        review_states.set_review(db, m["clip_id"], status="approved", user="ann", base_caption_id=cap["id"])
    targets.set_target(db, "hazard_level", 0.6, 95, actor="lead", role="lead")
    db.sample_id = s["id"]
    return db


def row(rows: list[list], label: str) -> list:
    (r,) = [r for r in rows if r[0] == label]
    return r


def test_each_surface_names_its_interval_and_each_kind_gives_the_same_numbers(settings, library, tmp_path):
    db = library
    expect = {
        tables.BOUNDS_KIND: brute_force_bounds(RIGHT, DRAWN, BATCH, 0.05),
        tables.estimate_kind("wilson", BATCH): wilson_finite(RIGHT, DRAWN, BATCH),
        tables.APPROVED_KIND: tuple(binomtest(RIGHT, DRAWN).proportion_ci(method="wilson")),
    }
    # the figures, now each with its name
    assert [f"{lo:.3f}-{hi:.3f}" for lo, hi in expect.values()] == ["0.367-0.900", "0.476-0.842", "0.444-0.858"]
    shown: list[tuple[str, str, tuple[float, float]]] = []  # (surface, kind, numbers)

    # the Quality tab's two tables (webapp.quality.decision renders exactly these rows and headers)
    d = decision.decide(db, db.sample_id)
    e = estimates.estimate(db, db.sample_id)
    cells = row(tables.decision_rows(d), "hazard_level")
    assert tables.DECISION_COLUMNS[3] == tables.BOUNDS_KIND
    shown.append(("decision", tables.DECISION_COLUMNS[3], tuple(map(float, cells[3].split(" - ")))))
    header = tables.estimate_columns(e)
    cells = row(tables.estimate_rows(e), "hazard_level")
    shown.append(("estimate", header[2], tuple(map(float, cells[2].split(" - ")))))

    # the terminal: the same tables, the same headers
    out = subprocess.run(
        [sys.executable, "-m", "data.quality", "--data-dir", str(settings.data_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    for surface, kind, numbers in list(shown):
        line = next(x for x in out.stdout.splitlines() if kind in x)  # its table's header
        table = out.stdout[out.stdout.index(line) :]
        hazard = next(x for x in table.splitlines() if x.startswith("hazard_level"))
        assert f"{numbers[0]:.3f} - {numbers[1]:.3f}" in hazard, (surface, hazard)
    assert tables.INTERVAL_KINDS_NOTE in out.stdout

    # the release card: the approved clips' accuracy, and the sample's estimate (these clips carry no route:
    # grouped by folder, as a release asks for a field some clip carries)
    rel = subprocess.run(
        [sys.executable, "-m", "data.release", "--data-dir", str(settings.data_dir), "--out", str(tmp_path / "r"),
         "--name", "kinds", "--group-by", "folder"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert rel.returncode == 0, rel.stderr
    card = (tmp_path / "r" / "README.md").read_text()
    above, table = card.split("## What the labels are worth (measured)")[1].split("| prompt version · model |")[:2]
    assert f"Each interval below: a {tables.APPROVED_KIND}" in above.strip().splitlines()[-1]
    assert tables.INTERVAL_KINDS_NOTE in above
    first = table.splitlines()[2]  # the one model and prompt version's row
    hazard = first.split("|")[3]  # prompt version · model, scenario_category, hazard_level
    k, lo, hi, n = re.fullmatch(r"\s*([\d.]+) \[([\d.]+), ([\d.]+)\] \(n = (\d+)\)\s*", hazard).groups()
    assert (float(k), int(n)) == (round(RIGHT / DRAWN, 3), DRAWN)
    shown.append(("card, approved clips", tables.APPROVED_KIND, (float(lo), float(hi))))
    sample_part = card.split("**A random sample:**")[1]
    header_line = next(x for x in sample_part.splitlines() if x.startswith("| label | estimate |"))
    kind = header_line.split("|")[3].strip()
    hazard = next(x for x in sample_part.splitlines() if x.startswith("| hazard_level |"))
    lo, hi = re.search(r"\[([\d.]+), ([\d.]+)\]", hazard).groups()
    shown.append(("card, the sample", kind, (float(lo), float(hi))))

    # every figure shown is named by one of the three kinds, and shows what that kind computes
    by_kind: dict[str, set] = {}
    for surface, kind, numbers in shown:
        assert kind in expect, (surface, kind)
        assert numbers == pytest.approx(expect[kind], abs=0.0005), (surface, kind, numbers)
        by_kind.setdefault(kind, set()).add(numbers)
    assert all(len(v) == 1 for v in by_kind.values()), by_kind  # one kind, one pair of numbers
    assert len(by_kind) == 3  # and three kinds, each named where it is shown
