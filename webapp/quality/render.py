"""The Quality tab's markup: the decision on a sample's batch, the estimate and report lines, a sample drawn, a
release made, and the blind second review's header and count. Values escaped as in webapp.render."""

from __future__ import annotations

from data import quality
from data.quality import tables
from webapp.render import esc

VERDICT_CLASS = {"accept": "ok", "fix": "error", "review": "warn", "no target": "info"}


def decision(d: quality.Decision) -> str:
    """The batch's decision first, in words, with what the bounds are and the conditions they rest on."""
    confidence = ", ".join(sorted({f"{x.target.confidence:.0%}" for x in d.labels.values()}))
    s = d.sample
    head, _, why = tables.decision_text(d).partition(": ")  # "Review 16 more of the batch of sample 1": why
    return (
        f'<div class="cw-msg cw-msg-{esc(VERDICT_CLASS[d.verdict])}" id="quality-decision" '
        f'data-verdict="{esc(d.verdict)}" data-more="{int(d.more)}" data-draw="{int(d.draw)}" '
        f'data-sample="{int(s["id"])}" role="status">'
        f"<b>{esc(head)}</b>: {esc(why)}</div>"
        f'<p class="cw-muted" id="quality-decision-how">Sample {int(s["id"])}: {s["drawn"]:,} of '
        f"{s['population']:,} clips drawn at random, {d.pending:,} of them waiting for review. Each label is "
        f"accepted when the lower bound of its accuracy reaches its target, fixed when the upper bound is under it. "
        f"The bounds hold at every look ({esc(confidence)} confidence), so looking again after each round "
        "of reviews is sound; a rejected or broken clip has no approved labels and is not measured.</p>"
    )


VERDICT_WORD = {"fix": "Fix", "review": "Review more", "accept": "Accept", "no target": "No target"}


def open_decisions(listed: list, shown: int | None, total: int | None = None) -> str:
    """Every sample's decision on its own batch, a line each, the most urgent first (data.quality.decision.
    decisions): what to do, the batch as it was at the draw, who reviews it. The one shown below is marked; `total`
    samples drawn, when more than are listed (the newest), is said."""
    if not listed:
        return ""
    items = []
    for d in listed:
        s = d.sample
        head, _, why = tables.decision_text(d).partition(": ")
        people = ", ".join(s.get("assignees") or [])
        mark = ' aria-current="true"' if int(s["id"]) == shown else ""
        items.append(
            f'<li class="cw-decision cw-msg-{esc(VERDICT_CLASS[d.verdict])}" data-sample="{int(s["id"])}" '
            f'data-verdict="{esc(d.verdict)}" data-more="{int(d.more)}"{mark}><b>{esc(head)}</b> · '
            f"{d.made:,} of {s['drawn']:,} drawn reviewed, for {esc(people or 'nobody')}"
            f"{' · shown below' if mark else ''}</li>"
        )
    more = f" (the newest {len(listed):,} of {int(total):,} samples)" if total and total > len(listed) else ""
    return (
        f'<div class="cw-counts" id="quality-open" data-n="{len(listed)}"><b>{len(listed):,} batch '
        f"decision{'s' if len(listed) != 1 else ''}{more}, the most urgent first</b> (fix, then review more, then "
        "accept; each sample's decision is about the batch it was drawn from, as it was then; pick one below to see "
        f"its labels):<ol>{''.join(items)}</ol></div>"
    )


def estimate(text: str) -> str:
    """The estimate at this look, in words (webapp.quality.decision)."""
    return f'<div class="cw-counts" id="quality-estimate-text">{esc(text)}</div>'


def agreement_note(text: str) -> str:
    return f'<p class="cw-muted" id="quality-agreement-note">{esc(text)}</p>'


def report_counts(approved: int, scope: str, without_origin: int, pairs: int) -> str:
    """What the report measured: the approved clips of the `scope`, those with no machine caption, the clips
    reviewed twice."""
    return (
        f'<div class="cw-counts" id="quality-counts" data-approved="{int(approved)}">{int(approved):,} approved '
        f"clips ({esc(scope)}); {int(without_origin):,} of them written from scratch (no machine caption to "
        f"measure). {int(pairs):,} reviewed twice, blind.</div>"
    )


def calibration_note(label: str, clips: int, values: int, what: str) -> str:
    """What the calibration of `label` counts (`what`: values on clips, or clips), with data-* for tests."""
    return (
        f'<div class="cw-counts" id="quality-cal-text" data-clips="{int(clips)}" data-values="{int(values)}">'
        f"{esc(label)}: {esc(what)}, every prompt version of the filter. Points under the diagonal: the model is "
        "surer than it is right.</div>"
    )


def compare_lines(a: str, b: str, lines: list[str]) -> str:
    """Prompt version `a` against `b`, a line per label."""
    items = "".join(f"<li>{esc(line)}</li>" for line in lines)
    return (
        f'<div class="cw-counts" id="quality-compare-lines">{esc(a)} → {esc(b)}, each against what reviewers '
        "approved, on the same clips. A version whose caption the reviewer started from has an edge."
        f"<ul>{items}</ul></div>"
    )


def release_made(release_id: int, summary: str, warn: bool = False) -> str:
    """What a release wrote (data.release.make.summary); amber when a batch it draws from is one to fix."""
    kind = "warn" if warn else "ok"
    return (
        f'<div class="cw-msg cw-msg-{kind}" id="release-result" data-release="{int(release_id)}" role="status">'
        f"{esc(summary)}</div>"
    )


def sample_summary(s: dict, new_seed: bool = False) -> str:
    """What a draw did, for the lead: the sample's id, N and n, the seed (and whether it is a new one, drawn because
    the field was empty), each stratum's N_h and n_h, who got what."""
    shares = ", ".join(f"{esc(p)} {n:,}" for p, n in s.get("assigned", {}).items()) or "nobody new"
    held = tables.held_text(s)
    moved = f' <span id="sample-held">({esc(held)})</span>' if held else ""
    capped = f" (the population holds only {s['population']:,})" if s["drawn"] < s["size"] else ""
    rows = "".join(
        f"<tr><td>{esc(r['stratum'] or '(no level)')}</td><td>{r['population']:,}</td><td>{r['drawn']:,}</td></tr>"
        for r in s["strata"]
    )
    return (
        f'<div class="cw-msg cw-msg-ok" id="sample-result" data-sample="{int(s["id"])}" role="status">'
        f"Drew sample <b>{int(s['id'])}</b>: {s['drawn']:,} of {s['population']:,} unreviewed machine captions"
        f"{capped}, at random ({esc(s['stratify'])}; "
        f'seed <span id="sample-seed-used">{int(s["seed"])}</span>'
        f"{', a new one: type it in Seed to draw these clips again' if new_seed else ''}), assigned to {shares}"
        f"{moved}."
        f'<table class="cw-strata" id="sample-strata"><tr><th>stratum</th><th>N<sub>h</sub> (clips)</th>'
        f"<th>n<sub>h</sub> (drawn)</th></tr>{rows}</table></div>"
    )


def second_header(task: dict) -> str:
    """The Second review tab's header: the clip, its sample, and that the review is blind."""
    clip = task["clip"]
    return (
        f'<div class="cw-clip-header" id="second-clip" data-clip="{int(clip["id"])}" data-review="{int(task["id"])}">'
        f'<h2 class="cw-clip-title"><b>#{int(clip["id"])}</b> {esc(clip.get("path"))}</h2> · '
        f"sample {int(task['sample_id'])} · blind second review: set every label from the video alone</div>"
    )


def second_count(n: int, words: str) -> str:
    return f'<div class="cw-counts" id="second-count" data-n="{int(n)}">{esc(words)}</div>'
