"""A release's dataset card (its README.md): what the set holds, counted from the records as they were written
(`Tally`), and what its labels are worth, from the Quality figures (data.quality: the report, the reviewers'
agreement and a random sample's estimate, each with what it was measured on).

Everything on the card is counted or measured, never typed in: counts per label value per split, the share
reviewed by a person and edited, the models and prompt versions, each split's hazard-level shares as achieved,
the grouping key and the seed, what changed since the release before, and how to load each file. Text that
comes from users or the fleet (model and prompt names, filter values) is escaped for Markdown.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from dataclasses import dataclass, field

from data import taxonomy
from data.quality import stats, tables
from data.quality.accuracy import ItemStats, Report
from data.quality.estimates import Estimate
from data.quality.pairs import LABELS
from data.quality.reviewers import Agreement
from data.quality.tables import AGREEMENT_NOTE
from data.release import batches as release_batches, card_method
from data.release.card_text import md, pct as _pct, table as _table

WRITTEN = "(written by a person)"  # the model column of a caption with no machine origin
NONE = "(none)"  # a label without a value; road users: a clip with none listed


@dataclass
class Tally:
    """Counts per split of the records written: clips, each label's values (road users: clips naming each), human
    reviewed, edited (text or labels changed from the machine caption), written from scratch, simulated, and
    clips per (model, prompt version) of the origin machine caption."""

    splits: list[str]
    n: Counter = field(default_factory=Counter)
    labels: dict[str, dict[str, Counter]] = field(default_factory=dict)
    human: Counter = field(default_factory=Counter)
    edited: Counter = field(default_factory=Counter)
    written: Counter = field(default_factory=Counter)
    simulated: Counter = field(default_factory=Counter)
    models: dict[tuple[str, str], Counter] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.labels = {label: {s: Counter() for s in self.splits} for label in taxonomy.ENUMS}

    def add(self, split: str, record: dict) -> None:
        self.n[split] += 1
        labels = record["labels"] or {}
        for label in taxonomy.ENUMS:
            value = labels.get(label)
            counts = self.labels[label][split]
            if label in taxonomy.MULTI:
                counts.update(value if isinstance(value, list) and value else [NONE])
            else:
                counts[NONE if value is None else str(value)] += 1
        self.human[split] += bool(record["human_reviewed"])
        self.edited[split] += record["changed"] in ("text", "labels", "both")
        self.written[split] += record["changed"] == "written"
        self.simulated[split] += bool(record["simulated"])
        o = record["origin"]
        if o is None:
            key = (WRITTEN, "")
        else:
            version = f" v{o['prompt_version']}" if o.get("prompt_version") is not None else ""
            key = (o.get("model") or "unknown model", (o.get("prompt_name") or "no prompt") + version)
        self.models.setdefault(key, Counter())[split] += 1

    @property
    def total(self) -> int:
        return sum(self.n.values())


@dataclass
class Measured:
    """The Quality figures the card reports: the report over the release's approved clips (grouped by model and
    prompt version), the reviewers' agreement on them, and the newest random sample's estimate (or None)."""

    report: Report
    agreement: Agreement
    estimate: Estimate | None
    simulated: int = 0  # approved clips of the filter whose text is simulated (measured only when released)
    sampling: str = ""  # how the released clips were chosen for review (release_batches.sampling_words)


def _interval(k: int, n: int) -> str:
    i = stats.wilson(k, n)
    return "-" if i is None else f"{i.p:.3f} [{i.low:.3f}, {i.high:.3f}] (n = {n:,})"


def _ordered_values(label: str, counts: list[Counter]) -> list[str]:
    seen = set().union(*counts) if counts else set()
    known = [v for v in taxonomy.ENUMS.get(label, ()) if v in seen]
    return known + sorted(seen - set(known) - {NONE}) + ([NONE] if NONE in seen else [])


def _quality(m: Measured, status: str, simulated_words: str) -> list[str]:
    r = m.report
    measured = sum(g.n for g in r.groups)
    approved_words = (
        "In this release the labels of an approved clip are the ones its reviewer approved; the figures say how "
        "often the model's were kept, which is what a machine label nobody reviewed is worth."
        if status == "approved"
        else "The labels in this release were not reviewed (they are the model's, or a person's edit nobody "
        "approved yet): the figures below are the model's, and what these labels are worth at best."
    )
    out = ["## What the labels are worth (measured)", ""]
    if not r.approved:
        out += [
            "No clip of this release's filter is approved yet, so nothing measures its labels against reviewers"
            + (
                "; they were not reviewed either (the model's, or a person's edit nobody approved yet)."
                if status != "approved"
                else "."
            ),
            "",
        ]
    released = simulated_words == "released, flagged"
    if status == "approved":
        which = "this release holds"
    else:
        which = "of this release's filter (not the clips it releases, which nobody approved)"
    sims = ""
    if m.simulated and released:
        sims = (
            f"; {m.simulated:,} of them have simulated text (released, flagged), and the simulated fleet's model "
            "shows as a row of its own when its name says so"
        )
    elif m.simulated:
        sims = (
            f"; the {m.simulated:,} approved clips with simulated text are not in this release, nor in these figures "
            "(the Quality tab counts them)"
        )
    out += [
        f"From the Quality figures (data.quality, as the Quality tab computes them), over the **{r.approved:,} "
        f"approved clips** {which}, at release time: {r.without_origin:,} of them written from scratch (no machine "
        "caption to measure), the others each pair the machine caption the approved one was made from with what "
        f"reviewers approved{sims}. " + approved_words,
        "",
        "Accuracy of the model's label against the approved one, and the clips it rests on. Reviewers start from "
        "the machine caption and may leave a doubtful value as it was, so these lean high. "
        + (m.sampling or "How these clips were chosen for review is not known.")
        + " "
        + tables.INTERVAL_KINDS_NOTE,
        "",
        f"Each interval below: a {tables.APPROVED_KIND} (these clips are not a sample of a batch).",
        "",
    ]
    if not r.approved:
        out = out[:4]
    elif not r.groups:
        out += ["No approved clip of this filter has a machine caption to measure.", ""]
    else:
        groups = list(r.groups)
        header = ["prompt version · model", *LABELS]
        rows = []
        for g in groups:
            cells = []
            for label in LABELS:
                s = g.labels.get(label)
                cells.append("-" if s is None else _interval(s.correct, s.n))
            rows.append([md(g.name), *cells])
        if len(groups) > 1:
            cells = []
            for label in LABELS:
                ss = [g.labels[label] for g in groups if label in g.labels]
                cells.append(_interval(sum(s.correct for s in ss), sum(s.n for s in ss)) if ss else "-")
            rows.append(["**all**", *cells])
        out += _table(header, rows) + [""]
        if any(isinstance(s, ItemStats) for g in groups for s in g.labels.values()):
            out += ["Road users count as right only when the model named exactly the approved set.", ""]
        out += [f"{measured:,} pairs measured in all.", ""]
    a = m.agreement
    if a.pairs:
        rows = [
            [label, f"{la.n:,}", "-" if la.agree is None else f"{la.agree:.3f}", _fmt(la.kappa)]
            for label, la in a.labels.items()
            if la.n
        ]
        out += [
            f"**Two reviewers, blind:** {a.pairs:,} of these clips were reviewed a second time without the first "
            "review in sight (kappa: agreement beyond chance; 0.61-0.80 reads as substantial). As the Quality tab "
            "says: " + AGREEMENT_NOTE,
            "",
            *_table(["label", "clips", "reviewers agree", "kappa"], rows),
            "",
        ]
    else:
        out += [
            "**Two reviewers, blind:** no clip of this filter was reviewed twice, so the error rate of the approved "
            "labels themselves is not measured (Browse, Random review sample, sends clips for a blind second "
            "review).",
            "",
        ]
    e = m.estimate
    if e is not None:
        s = e.sample
        how = "Wilson intervals" if e.method == "wilson" else f"stratified by hazard level ({md(s['stratify'])})"
        rows = []
        for label, le in e.labels.items():
            i = le.interval
            rows.append(
                [
                    label,
                    "-" if i is None else f"{i.p:.3f}",
                    "not yet: a stratum has no review" if i is None else f"[{i.low:.3f}, {i.high:.3f}]",
                    f"{sum(x.reviewed for x in le.strata):,}",
                ]
            )
        job = f" of job {int(s['job_id'])}" if s.get("job_id") else ""
        out += [
            f"**A random sample:** sample {int(s['id'])}{job}, {s['drawn']:,} of {s['population']:,} unreviewed "
            f"machine captions drawn at random ({how}); {e.reviewed:,} reviewed so far. Only this speaks for "
            "machine captions nobody reviewed (the population the sample was drawn from, which may not be this "
            "release's clips). Its interval is the one the Quality tab's estimate shows for the same counts.",
            "",
            *_table(["label", "estimate", tables.estimate_kind(e.method, s["population"]), "reviewed"], rows),
            "",
        ]
    else:
        out += [
            "**A random sample:** none drawn, so nothing here measures machine captions that nobody reviewed.",
            "",
        ]
    return out


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _changes(changes: dict | None, name: str) -> list[str]:
    out = ["## Changes since the release before", ""]
    if changes is None:
        return out + [f"This is the first release named {md(name)}.", ""]
    prev = f"{md(name)} v{int(changes['previous_version'])}"
    if changes.get("unreadable"):
        return out + [
            f"The release before ({prev}) could not be read ({md(changes['unreadable'])}), so what changed is "
            "not known.",
            "",
        ]
    relabelled = changes["relabelled_by_label"]
    rows = [
        ["clips added", f"{changes['added']:,}"],
        ["clips removed", f"{changes['removed']:,}"],
        ["captions re-labelled (a label's value changed)", f"{changes['relabelled']:,}"],
        *[[f"  of them {label}", f"{relabelled[label]:,}"] for label in LABELS if relabelled.get(label)],
        ["captions whose text alone changed", f"{changes['text_only']:,}"],
        ["clips in another split than before", f"{changes['moved']:,}"],
    ]
    out += [f"Compared with {prev} ({changes['previous_clips']:,} clips):", "", *_table(["what", "clips"], rows), ""]
    if changes["moved"]:
        out += [
            "A clip in another split than before: a model trained on the earlier release's train split must not "
            "be scored on this release's test split (and the other way round).",
            "",
        ]
    return out


def render(
    *,
    name: str,
    version: int,
    made_by: str,
    made_at: float,
    options: dict,
    tally: Tally,
    groups: dict[str, int],
    cases: list[tuple[int, int]],
    simulated_left_out: int,
    prompt_fallback: int,
    default_prompt: str,
    measured: Measured,
    changes: dict | None,
    batches: release_batches.Batches,
    placeholders: list[str] = (),
) -> str:
    """The card as Markdown (the YAML header goes before it: data.release.meta). `options`: the
    release's recorded options (filter, group_by, splits, seed, include_simulated, reshuffle, license, media);
    `groups`: groups per split; `cases`: (clips, groups) per way a clip got its group
    (data.release.placement.HOW); `prompt_fallback`: records trained with `default_prompt` because their
    caption has no machine origin (or names no known prompt version); `batches`: the jobs the clips come from with
    their decisions; `placeholders`: prompt versions whose text held a placeholder (neutralised)."""
    splits, total = tally.splits, tally.total
    shares, field_name = options["splits"], options["group_by"]
    when = dt.datetime.fromtimestamp(made_at, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    shown = {k: v for k, v in options["filter"].items() if k not in ("failed", "has_caption")}  # always so
    where = " and ".join(
        f"{k.replace('_', ' ')} is {md(v if isinstance(v, str) else json.dumps(v))}" for k, v in shown.items()
    )
    sim = (
        f"**Simulated text is included** (`--include-simulated`): {sum(tally.simulated.values()):,} records are "
        "flagged `simulated: true` in every file. Their captions came from the simulated fleet, not a model: do "
        "not train on them."
        if options["include_simulated"]
        else f"Simulated text is left out: {simulated_left_out:,} clips of the filter whose caption came from (or "
        "was edited from) the simulated fleet were not released."
    )
    out = [
        f"# {md(name)} v{version}",
        "",
        f"A training set of driving clips with their captions and labels: **{total:,} clips** in "
        + ", ".join(f"{s} {tally.n[s]:,}" for s in splits)
        + f". Released by {md(made_by)} on {when} with `python -m data.release` (data.release.make). "
        "The files never change: a new release is a new version.",
        "",
        "## What was selected",
        "",
        f"The clips with a current caption whose {where}. Rejected clips, clips flagged "
        "broken, clips whose ingest failed and clips whose file is gone are never released. " + sim,
        "",
        "## Splits",
        "",
        *card_method.grouping(field_name, cases, options["seed"]),
        *card_method.placement(changes, name),
        "Each split is stratified by hazard level as far as the groups allow, and sized as close to the asked "
        "share as they allow (a search places the few heavy groups; shares achieved below).",
        "",
        *_table(
            ["split", "asked", "achieved", "clips", "groups"],
            [
                [s, f"{shares[s]:.1%}", _pct(tally.n[s], total), f"{tally.n[s]:,}", f"{groups.get(s, 0):,}"]
                for s in splits
            ],
        ),
        "",
        *(
            [
                f"**{' and '.join(empty)} {'holds' if len(empty) == 1 else 'hold'} no clip:** the "
                f"{sum(groups.values()):,} groups are too few (or too large) for these shares. Group by another "
                "field, or ask for fewer splits.",
                "",
            ]
            if (empty := [s for s in splits if not tally.n[s]])
            else []
        ),
        "Hazard level, share of each split's clips (the whole set in the last column):",
        "",
    ]
    hazard = tally.labels["hazard_level"]
    levels = _ordered_values("hazard_level", list(hazard.values()))
    whole = sum(hazard.values(), Counter())
    out += _table(
        ["hazard level", *splits, "all"],
        [[level, *[_pct(hazard[s][level], tally.n[s]) for s in splits], _pct(whole[level], total)] for level in levels],
    )
    out += [
        "",
        "## Labels per split",
        "",
        "Clips per value (road users: clips naming each; a clip may name several).",
        "",
    ]
    for label in taxonomy.ENUMS:
        counts = tally.labels[label]
        values = _ordered_values(label, list(counts.values()))
        out += [f"**{label}**", ""]
        out += _table(
            ["value", *splits, "all"],
            [[md(v), *[f"{counts[s][v]:,}" for s in splits], f"{sum(counts[s][v] for s in splits):,}"] for v in values],
        )
        out.append("")
    out += [
        "## Review",
        "",
        *_table(
            [
                "split",
                "reviewed by a person",
                "edited (text or labels changed from the machine's)",
                "written from scratch",
                "simulated",
            ],
            [
                [
                    s,
                    _pct(tally.human[s], tally.n[s]),
                    _pct(tally.edited[s], tally.n[s]),
                    _pct(tally.written[s], tally.n[s]),
                    _pct(tally.simulated[s], tally.n[s]),
                ]
                for s in [*splits]
            ]
            + [
                [
                    "all",
                    _pct(sum(tally.human.values()), total),
                    _pct(sum(tally.edited.values()), total),
                    _pct(sum(tally.written.values()), total),
                    _pct(sum(tally.simulated.values()), total),
                ]
            ],
        ),
        "",
        "## Models and prompt versions",
        "",
        "The machine caption each released caption was made from (its origin, however many edits lie between):",
        "",
        *_table(
            ["model", "prompt version", *splits],
            [
                [md(model), md(prompt) or "-", *[f"{c[s]:,}" for s in splits]]
                for (model, prompt), c in sorted(tally.models.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
            ],
        ),
        "",
    ]
    if prompt_fallback:
        out += [
            f"The SFT files pair {prompt_fallback:,} captions that have no machine origin (written from scratch, or "
            f"naming no known prompt version) with the newest prompt version, {md(default_prompt)}.",
            "",
        ]
    if placeholders:
        out += [
            f"The text of {', '.join(md(p) for p in placeholders)} holds a placeholder the trainers count "
            "(`<video>`, `<image>`, `<audio>`): in the SFT files it is written with full-width brackets (`＜video＞`) "
            "so that each item holds one video placeholder, the real one.",
            "",
        ]
    simulated_words = "released, flagged" if options["include_simulated"] else "not in this release"
    out += _quality(measured, options["filter"].get("review_status") or "approved", simulated_words)
    out += card_method.batches(batches)
    out += _changes(changes, name)
    out += card_method.licence(options.get("license"))
    out += card_method.loading(splits, [s for s in splits if tally.n[s]], name, options.get("media") or "none")
    return "\n".join(out)
