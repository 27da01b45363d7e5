"""How good the machine captions are, measured against what reviewers approved: the quality wing of data/.

    python -m data.quality --data-dir var
    python -m data.quality --data-dir var --prompt av-hazard:2 --json > quality.json

What is measured (each figure's meaning, and how a lead decides from it, is in the README's "Quality" section):
- **Pairs** (pairs.py). Every approved clip pairs the machine caption its approved caption derives from (its
  origin) with the approved caption, stored once in `quality_pairs`. A clip whose caption a person wrote from
  scratch has no machine caption to measure and is only counted.
- **The report** (accuracy.py): per label accuracy, precision, recall, confusion matrix, Jaccard for road users,
  and the text's edit ratio, grouped by model, prompt version and job.
- **Estimates for the unreviewed rest** (estimates.py): only from a random sample (samples.py), with a 95 %
  interval (stats.py, with the finite-population correction) and how many more reviews bring it under a margin.
- **A decision per label and per batch** (decision.py): accept, fix or review K more, against each label's
  target (targets.py), from bounds valid however often the lead looks (sequential.py); the K more are drawn into
  the same sample from the rest of its batch (rounds.py, from the population kept at the draw: population.py).
- **Agreement between reviewers** (reviewers.py): Cohen's kappa between a first and a blind second review
  (second_review.py).
- Accuracy by the model's confidence (calibration.py); prompt versions on the same clips (prompt_compare.py);
  the figures as rows and text for the Quality tab and the terminal (tables.py); the command (__main__.py).

This package's face is what the Quality tab, the benchmarks and the tests call (`quality.report(...)`); in data/
only the release wing (data/release/: a dataset card reports these figures) imports it (tests/test_structure.py).
"""

from data.quality.accuracy import (
    DEFAULT_BY,
    DIMENSIONS,
    HISTOGRAM_BINS,
    Group,
    ItemStats,
    LabelStats,
    Report,
    TextStats,
    group_name,
    report,
)
from data.quality.decision import Decision, LabelDecision, decide
from data.quality.estimates import DEFAULT_MARGIN, Estimate, LabelEstimate, check_margin, estimate, samples_for
from data.quality.pairs import LABELS, Scope, fill, parse_prompt
from data.quality.reviewers import Agreement, LabelAgreement, agreement
from data.quality.tables import (
    DECISION_COLUMNS,
    ESTIMATE_COLUMNS,
    LABEL_COLUMNS,
    decision_rows,
    estimate_rows,
    format_text,
    label_rows,
)
from data.quality.targets import Target

__all__ = [
    "Agreement",
    "agreement",
    "check_margin",
    "decide",
    "Decision",
    "DECISION_COLUMNS",
    "decision_rows",
    "DEFAULT_BY",
    "DEFAULT_MARGIN",
    "DIMENSIONS",
    "Estimate",
    "estimate",
    "ESTIMATE_COLUMNS",
    "estimate_rows",
    "fill",
    "format_text",
    "Group",
    "group_name",
    "HISTOGRAM_BINS",
    "ItemStats",
    "LABEL_COLUMNS",
    "label_rows",
    "LabelAgreement",
    "LabelDecision",
    "LabelEstimate",
    "LABELS",
    "LabelStats",
    "parse_prompt",
    "Report",
    "report",
    "samples_for",
    "Scope",
    "Target",
    "TextStats",
]
