"""Whole on purpose: the Browse and Review markup is drawn from shared pieces (the status and assignee badges of a
tile and of a header, the times, labels and word diffs of provenance, history and a conflict), and is read as
one when checking that every value is escaped.

HTML pieces the UI shows: `esc`, the pieces every tab uses (messages, the banner, times), and the Browse and
Review markup. Every piece of user or model text goes through `esc` (html.escape, quotes too). Markup is made
in the render modules and nowhere else (tests/webapp/test_markup.py): this one, render_page (the page around the tabs),
and each tab's own: webapp.jobs.render, webapp.fleet.render and webapp.quality.render.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import time
from typing import Any, Iterable
from urllib.parse import quote

from data import caption_confidence, limits, taxonomy, textdiff


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def when(ts: float | None) -> str:
    if not ts:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def tiles(rows: Iterable[dict], hint: str = "") -> str:
    """The browse grid: a tile per clip, a real link (`?clip=ID`, so it also works in a new tab). `hint`: what
    to try when nothing matched (data.search.no_match_hint)."""
    out = []
    for r in rows:
        status = r.get("review_status") or "unreviewed"
        badges = [f'<span class="cw-badge cw-{esc(status)}">{esc(status)}</span>']
        if r.get("probe_error"):
            badges.append('<span class="cw-badge cw-failed">ingest failed</span>')
        if r.get("hazard_level"):
            badges.append(f'<span class="cw-badge cw-hz-{esc(r["hazard_level"])}">{esc(r["hazard_level"])}</span>')
        if r.get("codec") == "hevc":
            badges.append('<span class="cw-badge">HEVC</span>')
        if r.get("assignee"):
            badges.append(assignee_badge(r["assignee"]))
        preview = r.get("caption_preview") or ("no caption yet" if not r.get("probe_error") else r["probe_error"])
        out.append(
            f'<a class="cw-tile" href="?clip={int(r["id"])}" data-clip="{int(r["id"])}" id="tile-{int(r["id"])}">'
            f'<img loading="lazy" src="/thumb/{int(r["id"])}" alt="">'
            f'<div class="cw-tile-path">#{int(r["id"])} {esc(r.get("path"))}</div>'
            f'<div class="cw-tile-badges">{"".join(badges)}</div>'
            f'<div class="cw-tile-caption">{esc(preview)}</div></a>'
        )
    if not out:
        return '<p class="cw-empty">No clips match this filter.</p>' + (
            f'<div class="cw-msg cw-msg-info" id="search-hint" role="status">{esc(hint)}</div>' if hint else ""
        )
    return '<div class="cw-grid">' + "".join(out) + "</div>"


def search_refused(hint: str) -> str:
    """In place of the grid, for a search that cannot be read: nothing ran, and what to write instead."""
    return (
        f'<div class="cw-msg cw-msg-conflict" id="search-hint" role="alert">The search was not run. {esc(hint)}</div>'
    )


def assignee_badge(name: str) -> str:
    return f'<span class="cw-badge cw-assignee" title="assigned to {esc(name)}">→ {esc(name)}</span>'


def counts(summary: dict[str, int], matching: int, exact: bool = True) -> str:
    parts = [
        f"<b>{matching:,}{'' if exact else '+'}</b> match",
        f"{summary.get('clips', 0):,} clips",
        f"{summary.get('captioned', 0):,} captioned",
        f"{summary.get('approved', 0):,} approved",
        f"{summary.get('rejected', 0):,} rejected",
        f"{summary.get('broken', 0):,} broken",
        f"{summary.get('failed', 0):,} ingest failed",
    ]
    hint = ""
    if not summary.get("captioned") and summary.get("clips", 0) > summary.get("failed", 0):
        # a library nobody captioned yet: what would make the review queue fill
        hint = (
            '<div class="cw-msg cw-msg-info" id="no-captions">No clip has a caption yet: captions appear here as a '
            "captioning job writes them. A lead starts one on the Jobs tab (“everything uncaptioned”).</div>"
        )
    return '<div class="cw-counts">' + " · ".join(parts) + "</div>" + hint


def browse_state(fdict: dict, sort: str, summary: dict[str, int], matching: int, exact: bool = True) -> str:
    """The counts (`counts`) in an element whose data-filter / data-sort the page script writes into the URL
    (?f=...&sort=...), so that Back and links work; `sort` is "" for the default order."""
    return (
        f'<div id="browse-state" data-filter="{esc(json.dumps(fdict, sort_keys=True))}" data-sort="{esc(sort)}">'
        + counts(summary, matching, exact)
        + "</div>"
    )


def export_links(fdict: dict) -> str:
    """The filter's export as JSONL and CSV (the /export route, the filter in the URL)."""
    q = esc(quote(json.dumps(fdict, sort_keys=True), safe=""))
    return (
        f'<div class="cw-export">Export this filter: <a id="export-jsonl" href="/export?fmt=jsonl&filter={q}">'
        f'JSONL</a> · <a id="export-csv" href="/export?fmt=csv&filter={q}">CSV</a></div>'
    )


def _fps(clip: dict) -> float:
    return float(clip.get("fps") or 0) or 25.0


def player(clip: dict) -> str:
    """The clip's video (data-fps lets the page script step one frame with the arrow keys), named for assistive
    technology by its clip number and path."""
    cid = int(clip["id"])
    fps = f'data-fps="{_fps(clip):.3f}" aria-label="clip #{cid}: {esc(clip.get("path"))}"'
    if clip.get("probe_error"):
        return (
            f'<div class="cw-notice cw-error">This clip failed at ingest: {esc(clip["probe_error"])}. '
            "It cannot be played or captioned.</div>"
        )
    if (clip.get("codec") or "").lower() in ("hevc", "h265"):
        if clip.get("preview"):
            return (
                f'<video id="cw-video" class="cw-video" src="/preview/{cid}" {fps} controls preload="metadata" '
                'playsinline muted></video><div class="cw-notice" id="hevc-notice">HEVC (H.265) clip: '
                "browsers cannot play it, so this is a 640-px H.264 preview made at ingest. The model sees "
                f'the original. <a href="/media/{cid}" download>Download the original</a>.</div>'
            )
        return (
            '<div class="cw-notice" id="hevc-notice">This clip is HEVC (H.265): browsers cannot play it. '
            "The filmstrip below shows the frames the model saw. "
            f'<a href="/media/{cid}" download>Download the clip</a>.</div>'
        )
    return (
        f'<video id="cw-video" class="cw-video" src="/media/{cid}" {fps} controls preload="metadata" '
        "playsinline muted></video>"
    )


def _strip_indices(clip: dict, n_default: int = 16) -> list[int]:
    raw = clip.get("filmstrip_indices")
    if raw:
        try:
            got = [int(i) for i in (json.loads(raw) if isinstance(raw, str) else raw)]
            if got:
                return got
        except (TypeError, ValueError):
            pass
    # older rows: the strip holds `n_default` frames spread evenly over the clip
    total = int(clip.get("frames") or 0) or int(round(float(clip.get("duration") or 0) * _fps(clip))) or n_default
    n = max(1, min(n_default, total))
    return [round(i * (total - 1) / max(1, n - 1)) for i in range(n)]


def filmstrip(clip: dict) -> str:
    """The model's frames as a grid of buttons cut from the one strip image (CSS background offsets): each is
    big enough to click and seeks the player to that frame's time."""
    if not clip.get("filmstrip"):
        return '<p class="cw-muted">No filmstrip for this clip.</p>'
    idx = _strip_indices(clip)
    n, fps, cid = len(idx), _fps(clip), int(clip["id"])
    w, h = int(clip.get("width") or 16), int(clip.get("height") or 9)
    cols = min(n, 8)
    tiles = []
    for k, frame in enumerate(idx):
        x = 0 if n == 1 else 100.0 * k / (n - 1)
        t = frame / fps
        tiles.append(
            f'<button type="button" class="cw-frame" data-t="{t:.3f}" data-k="{k}" '
            f'title="frame {frame} ({t:.2f} s): click to seek" aria-label="seek to {t:.2f} s" '
            f'style="background-image:url(/filmstrip/{cid});background-size:{n * 100}% 100%;'
            f'background-position:{x:.4f}% 0;aspect-ratio:{w}/{h}"></button>'
        )
    return (
        f'<div class="cw-strip" id="cw-filmstrip" role="group" aria-label="frames the model saw" '
        f'style="grid-template-columns:repeat({cols},1fr)">' + "".join(tiles) + "</div>"
    )


def no_clip(raw: str | None = None) -> str:
    """The Review header with no clip open; `raw`: the `?clip=` of a link that names no clip, said so plainly."""
    how = (
        "Press <kbd>n</kbd> (or the button) for the next unreviewed clip of the Browse filter, or open one from Browse."
    )
    if raw is None:
        return f'<h2 class="cw-sr-only">Review</h2><p class="cw-muted" id="review-empty">No clip open. {how}</p>'
    if raw.isascii() and raw.isdigit():
        why = f"There is no clip {esc(raw[:40])} in this library: the link is old, or the clip was removed."
    else:
        why = f"“{esc(raw[:40])}” is not a clip id: a link names a clip by its number, as in <code>?clip=12</code>."
    return (
        f'<div class="cw-notice cw-error" id="clip-missing" role="alert"><h2 class="cw-clip-title">No such clip</h2>'
        f"<p>{why} {how}</p></div>"
    )


def loaded_key(clip_id: int, caption_id: int | None, review_status: str | None) -> str:
    """The header's data-loaded: which caption version and review state the form was filled from."""
    return f"{int(clip_id)}:{caption_id or 0}:{esc(review_status or '')}"


def header(
    clip: dict,
    user: str,
    role: str,
    *,
    loaded: str | None = None,
    holder: str | None = None,
    dirty: bool = False,
    kept: bool = False,
) -> str:
    """The Review header. `loaded` (default: the clip's stored caption and review state, `loaded_key`) is what the
    page script compares to tell a freshly loaded form from an edited one: a redraw that keeps the form passes the
    form's. `dirty`: the form was filled with an edit that is not saved (a restored draft, your text on top of
    theirs after a conflict). `kept`: the answer left the form as the person has it (a save: what was typed after
    the request left is theirs, still unsaved). `holder`: someone else is on this clip (data.review_queue)."""
    # the Review tab's h2: the clip it shows
    bits = [
        f'<h2 class="cw-clip-title"><span class="cw-sr-only">Review: </span><b>#{int(clip["id"])}</b> '
        f"{esc(clip.get('path'))}</h2>"
    ]
    for key, fmt in (("duration", "{:.1f} s"), ("fps", "{:.0f} fps")):
        if clip.get(key):
            bits.append(fmt.format(clip[key]))
    if clip.get("width"):
        bits.append(f"{int(clip['width'])}×{int(clip.get('height') or 0)}")
    if clip.get("codec"):
        bits.append(esc(clip["codec"]))
    status = clip.get("review_status") or "unreviewed"
    reviewed = f" by {esc(clip.get('reviewed_by'))} {when(clip.get('reviewed_at'))}" if clip.get("reviewed_by") else ""
    bits.append(f'<span class="cw-badge cw-{esc(status)}" id="review-status">{esc(status)}</span>{reviewed}')
    if status == "broken" and clip.get("review_note"):
        bits.append(f'<span id="review-note">“{esc(clip["review_note"])}”</span>')
    if clip.get("probe_error"):
        bits.append('<span class="cw-badge cw-failed" id="review-failed">ingest failed</span>')
    if holder:
        bits.append(f'<span class="cw-badge cw-lease" id="review-lease">{esc(holder)} is on this clip</span>')
    if clip.get("assignee"):
        by = f" by {esc(clip['assigned_by'])}" if clip.get("assigned_by") else ""
        bits.append(f'<span id="review-assignee">{assignee_badge(clip["assignee"])} assigned{by}</span>')
    # data-* for the page script: the URL follows data-clip; the form counts as unsaved until data-loaded changes
    if loaded is None:
        loaded = loaded_key(clip["id"], clip.get("current_caption_id"), clip.get("review_status"))
    return (
        f'<div class="cw-clip-header" id="clip-header" data-clip="{int(clip["id"])}" data-loaded="{loaded}"'
        + (' data-dirty="1"' if dirty else "")
        + (' data-form="kept"' if kept else "")
        + ">"
        + " · ".join(bits)
        + "</div>"
    )


def blind_header(clip: dict) -> str:
    """Review's header for a clip the person has a pending blind second review of: which clip, and where to
    review it; nothing of its caption, review or assignee (webapp.second_review.tab)."""
    cid = int(clip["id"])
    return (
        f'<div class="cw-clip-header" id="clip-header" data-clip="{cid}" data-loaded="{cid}:blind">'
        f'<h2 class="cw-clip-title"><span class="cw-sr-only">Review: </span><b>#{cid}</b> '
        f"{esc(clip.get('path'))}</h2> · "
        f'<span class="cw-badge" id="review-blind">blind</span> You are this clip\'s second reviewer: its '
        "caption and first review are hidden until you answer. Review it on the Second review tab.</div>"
    )


def label_field(data: dict[str, str]) -> str:
    """A label picker's markup before webapp/static/picker.js builds it: what the script needs to know, as data
    attributes (webapp.picker)."""
    return '<div class="cw-pick" ' + " ".join(f'data-{esc(k)}="{esc(v)}"' for k, v in data.items()) + "></div>"


CHANGE_WORDS = {"unchanged": "no change", "text": "text", "labels": "labels", "both": "text and labels"}


def _params(params: Any) -> str:
    """Request parameters as words ("temperature 0.2 · seed 7"), not JSON."""
    if not isinstance(params, dict):
        return "" if params in (None, "") else str(params)
    return " · ".join(f"{str(k).replace('_', ' ')} {v}" for k, v in sorted(params.items()) if v not in (None, ""))


def machine_summary(cap: dict, *, version: bool = False) -> str:
    """One line on a machine caption: "Machine caption by M, prompt P v2, job 12, 16 frames, 231 tokens"
    (with `version`: "Machine caption v1 by ...")."""
    name = f"Machine caption v{int(cap['version'])}" if version else "Machine caption"
    bits = [f"{name} by {cap.get('model') or 'an unnamed model'}"]
    if cap.get("prompt_name"):
        bits.append(f"prompt {cap['prompt_name']} v{cap.get('prompt_version') or '?'}")
    if cap.get("job_id"):
        bits.append(f"job {int(cap['job_id'])}")
    if cap.get("frames"):
        bits.append(f"{int(cap['frames'])} frames")
    if cap.get("completion_tokens") is not None:
        bits.append(f"{int(cap['completion_tokens']):,} tokens")
    return ", ".join(bits)


def _edit(e: dict) -> str:
    verb = "written by" if e["changed"] == "written" else "edited by"
    return f"{verb} {e['author']} {when(e.get('created_at'))} ({CHANGE_WORDS.get(e['changed'], e['changed'])})"


def provenance_summary(cap: dict, lineage: dict) -> str:
    """What a person needs in one sentence: where the text came from and who changed it since."""
    origin = lineage.get("origin")
    edits = list(lineage.get("edits") or [])
    if origin:
        head = machine_summary(origin, version=origin["id"] != cap["id"])
    elif edits and edits[0]["changed"] == "written":
        first = edits.pop(0)
        head = f"Written by {first['author']} {when(first.get('created_at'))}"
    else:
        head = "Written by hand"
    tail = [_edit(e) for e in edits]
    if lineage.get("edits_truncated"):
        tail.insert(0, "earlier edits not listed")
    return head + ("; " + ", ".join(tail) if tail else "")


def confidence_summary(confidence: dict | None, shown: int = 3) -> str | None:
    """The origin's label confidence in a few words, least sure first ("weather 0.42, lighting 0.71, ..."), or
    why it has none; None when it was never recorded."""
    if not confidence:
        return None
    known = sorted(
        (p, n) for n, p in caption_confidence.confidence_of({"confidence": confidence}).items() if p is not None
    )
    if not known:
        return str(confidence.get("note") or "not readable")
    words = [f"{n.replace('_', ' ')} {p:.2f}" for p, n in known[:shown]]
    return ", ".join(words) + (f" (least sure first; {len(known) - shown} more above)" if len(known) > shown else "")


def provenance(cap: dict | None, lineage: dict | None = None) -> str:
    """The current caption's provenance and lineage (`lineage` from data.captions.lineage): a summary line,
    then this version, what it was derived from, its origin machine caption and that caption's details."""
    if not cap:
        return '<p class="cw-muted">No caption yet.</p>'
    lineage = lineage or {"origin": cap if cap["source"] == "model" else None, "edits": []}
    origin, made_from = lineage.get("origin"), lineage.get("derived_from")
    who = "the model" if cap["source"] == "model" else cap["author"]
    rows = [("this version", f"v{int(cap['version'])}, saved by {who} {when(cap.get('created_at'))}")]
    if made_from:
        # a save is derived from the version it replaced; an adopt copies another one
        how = "derived from" if made_from["id"] == cap.get("parent_id") else "adopted from"
        rows.append((how, f"v{int(made_from['version'])} ({made_from['source']}, {made_from['author']})"))
    if origin and origin["id"] != cap["id"]:
        changed = lineage.get("changed")
        what = CHANGE_WORDS.get(changed, changed)
        if lineage.get("labels_changed"):
            what += " (" + ", ".join(n.replace("_", " ") for n in lineage["labels_changed"]) + ")"
        rows.append(("origin", f"v{int(origin['version'])}, {when(origin.get('created_at'))}"))
        rows.append(("changed since", what))
    if origin:
        rows += [
            ("prompt id", origin.get("prompt_id")),
            ("replica", origin.get("replica")),
            ("decode backend", origin.get("decode_backend")),
            ("latency", f"{origin['latency_ms']:,.0f} ms" if origin.get("latency_ms") is not None else None),
            ("prompt tokens", f"{int(origin['prompt_tokens']):,}" if origin.get("prompt_tokens") is not None else None),
            ("finish", origin.get("finish_reason")),
            ("parameters", _params(origin.get("params"))),
        ]
    if origin:
        rows.append(("model confidence", confidence_summary(origin.get("confidence"))))
    if cap.get("conflicts"):
        rows.append(("text vs labels", "; ".join(cap["conflicts"])))
    if cap.get("note"):
        rows.append(("note", cap["note"]))
    sim = ""
    if lineage.get("simulated") or cap.get("simulated") or (origin or {}).get("simulated"):
        what = "written by" if cap["source"] == "model" else "derived from a caption written by"
        sim = (
            f'<div class="cw-sim-marker" id="prov-simulated">SIMULATED text: {what} the simulated fleet, '
            "not a real model</div>"
        )
    summary = f'<p class="cw-prov-summary" id="prov-summary">{esc(provenance_summary(cap, lineage))}</p>'
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows if v not in (None, ""))
    # data-version: the version the form was loaded from, for scripts and tests (the words above may change)
    return f'{sim}{summary}<table class="cw-prov" data-version="{int(cap["version"])}">{body}</table>'


# R11: the word diff itself is data.textdiff's (bounded); the history view adds a time budget on top
HISTORY_DIFF_BUDGET_S = 0.15  # word diffs of one history view; older versions past it are shown without a diff
HISTORY_CUT = "(older version: diff not computed, the history is long; the text is shown as saved)"
DIFF_TOO_LONG = "(too long to diff word by word: part of the change is shown as replaced)"


def draft_offer(draft: dict, current: dict | None, *, stale: bool = False) -> str:
    """ "Your unsaved edit from 14:02 (caption, weather)": what a person sees when they come back to a clip they left
    an edit on (data.drafts), naming what it changes against the `current` version. `stale`: someone saved
    `current` after the edit was started (restoring then shows theirs beside yours)."""
    cur_labels = (current or {}).get("labels") or {}
    changed = ["caption"] if (draft.get("text") or "").strip() != ((current or {}).get("text") or "").strip() else []
    for name, value in (draft.get("labels") or {}).items():
        before = cur_labels.get(name)
        if (sorted(value or []) != sorted(before or [])) if isinstance(value, list) else (value or None) != before:
            changed.append(name.replace("_", " "))
    since = (
        f" {esc(current['author'])} saved version {int(current['version'])} since: restoring shows theirs beside it."
        if stale and current
        else ""
    )
    what = f" ({esc(', '.join(changed))})" if changed else ""
    return (
        f'<div class="cw-draft" id="draft-note" role="status" data-clip="{int(draft["clip_id"])}">'
        f"Your unsaved edit from {local_time(draft['saved_at'])}{what}.{since}</div>"
    )


def local_time(ts: float | None) -> str:
    """A time the page script shows in the reader's own time zone (HH:MM); UTC until it does."""
    if not ts:
        return ""
    d = dt.datetime.fromtimestamp(ts, dt.timezone.utc)
    return f'<time class="cw-local-time" datetime="{d.isoformat()}">{d.strftime("%H:%M")} UTC</time>'


def label_changes(old: dict | None, new: dict | None) -> list[str]:
    """The labels that differ, as "weather rain → snow" (road users as sets: "road users car → car, truck")."""
    out = []
    for key in taxonomy.ENUMS:
        o, n = (old or {}).get(key), (new or {}).get(key)
        if isinstance(o, list) or isinstance(n, list):
            same = sorted(o or []) == sorted(n or [])
        else:
            same = (o or None) == (n or None)
        if not same:
            out.append(f"{key.replace('_', ' ')} {_label(old, key)} → {_label(new, key)}")
    return out


def what_they_changed(base: dict | None, theirs: dict) -> str:
    """The conflict's first line: what the other person changed since the version the form was loaded from,
    "Since you opened v3, anna saved v5: 12 words added at the end; weather rain → snow." (escaped)."""
    who = f"{esc(theirs.get('author') or 'someone')} saved v{int(theirs['version'])}"
    if base is None:
        since = f"You started from no caption; {who}"
    else:
        since = f"Since you opened v{int(base['version'])}, {who}"
    text = textdiff.describe((base or {}).get("text"), theirs.get("text"))
    parts = ([text] if text else []) + label_changes((base or {}).get("labels"), theirs.get("labels"))
    changed = "; ".join(esc(p) for p in parts) or "the same caption and labels as that version"
    return f'<p class="cw-conflict-what" id="conflict-what"><b>{since}:</b> {changed}.</p>'


FIRST_DIFF = '<span class="cw-first-diff"></span>'  # each box opens scrolled to it (webapp/static/shortcuts.js)


def conflict(theirs: dict, mine_text: str, mine_labels: dict, base: dict | None = None) -> str:
    """A caption conflict: first what they changed since the version you opened (`base`), then the labels where
    theirs and yours differ, then the two texts side by side: their version (left, with the words yours does not
    have struck) and your unsaved edit (right, with your words marked), each box opening at its first
    difference (a ~900-character caption overflows its box, and the change was below the fold). Every piece
    escaped."""
    a, b, ops, cut = textdiff.word_diff(theirs.get("text") or "", mine_text or "")
    left, right = [], []
    first = True
    for op, i1, i2, j1, j2 in ops:
        if op != "equal" and first:
            left.append(FIRST_DIFF)
            right.append(FIRST_DIFF)
            first = False
        if op == "equal":
            left.append(esc(" ".join(a[i1:i2])))
            right.append(esc(" ".join(b[j1:j2])))
        if op in ("delete", "replace"):
            left.append(f"<del>{esc(' '.join(a[i1:i2]))}</del>")
        if op in ("insert", "replace"):
            right.append(f"<ins>{esc(' '.join(b[j1:j2]))}</ins>")
    rows = []
    for key in taxonomy.ENUMS:
        t, m = _label(theirs.get("labels"), key), _label(mine_labels, key)
        if t != m:
            name = esc(key.replace("_", " "))
            rows.append(f"<tr><th>{name}</th><td><del>{esc(t)}</del></td><td><ins>{esc(m)}</ins></td></tr>")
    labels = (
        '<table class="cw-conflict-labels" id="conflict-labels"><tr><th>label</th><th>theirs</th><th>yours</th></tr>'
        + "".join(rows)
        + "</table>"
        if rows
        else '<p class="cw-muted" id="conflict-labels">Same labels.</p>'
    )
    who = f"v{int(theirs['version'])} by {esc(theirs['author'])}, {when(theirs.get('created_at'))}"
    return (
        '<div class="cw-conflict" id="conflict-view">'
        + what_they_changed(base, theirs)
        + labels
        + '<div class="cw-sbs">'
        f'<section><h3>Theirs: {who}</h3><div class="cw-diff" id="conflict-theirs">{" ".join(left)}</div></section>'
        f'<section><h3>Yours (not saved)</h3><div class="cw-diff" id="conflict-mine">{" ".join(right)}</div>'
        "</section></div>" + (f'<p class="cw-muted cw-diff-cut">{esc(DIFF_TOO_LONG)}</p>' if cut else "") + "</div>"
    )


def word_diff(old: str, new: str) -> str:
    """Word-level diff as HTML, every piece escaped (data.textdiff: linear up to a hard bound, then coarse)."""
    a, b, ops, cut = textdiff.word_diff(old, new)
    out = []
    for op, i1, i2, j1, j2 in ops:
        if op == "equal":
            out.append(esc(" ".join(a[i1:i2])))
        if op in ("delete", "replace"):
            out.append(f"<del>{esc(' '.join(a[i1:i2]))}</del>")
        if op in ("insert", "replace"):
            out.append(f"<ins>{esc(' '.join(b[j1:j2]))}</ins>")
    if cut:
        out.append(f'<span class="cw-muted cw-diff-cut">{esc(DIFF_TOO_LONG)}</span>')
    return " ".join(out)


def label_diff(old: dict, new: dict) -> str:
    changes = []
    for key in taxonomy.ENUMS:
        if (old or {}).get(key) != (new or {}).get(key):
            changes.append(f"{esc(key)}: <del>{esc(_label(old, key))}</del> → <ins>{esc(_label(new, key))}</ins>")
    return "; ".join(changes)


def _label(labels: dict | None, key: str) -> str:
    v = (labels or {}).get(key)
    return ", ".join(v) if isinstance(v, list) else (v or "—")


def history(versions: list[dict]) -> str:
    """Versions newest first; each shows its diff against its parent (or the previous version)."""
    return _history(versions, {}, None, budget=None)[0]


def history_page(page: dict, *, budget: int = limits.HISTORY_PAGE_CHARS) -> tuple[str, list[dict]]:
    """(HTML, the versions it shows) for one page of data.captions.history_page: each version with its diff,
    a line saying which versions of how many these are, and no more than `budget` characters of HTML (the
    versions past it move to the next page: a page of 20 versions at the caption limit stays a few hundred
    KB). The older ones are a click away (Review's "Older versions")."""
    versions = page["versions"]
    if not versions:
        return '<p class="cw-muted">No versions yet.</p>', []
    body, shown = _history(versions, page.get("bases") or {}, page.get("current_id"), budget=budget)
    first, last = int(shown[0]["version"]), int(shown[-1]["version"])
    older = page["older"] + len(versions) - len(shown)
    note = (
        f'<p class="cw-muted cw-history-page">Versions {first}'
        + (f"–{last}" if last != first else "")
        + f" of {page['total']:,}"
        + (f" · {older:,} older: <b>Older versions</b> shows them" if older else "")
        + (" · <b>Newest versions</b> goes back to the top" if page.get("newer") else "")
        + "</p>"
    )
    return note + body, shown


def _history(
    versions: list[dict], bases: dict, current_id: int | None, *, budget: int | None
) -> tuple[str, list[dict]]:
    by_id = {**bases, **{v["id"]: v for v in versions}}
    if current_id is None:
        current_id = next((x["id"] for x in versions if x.get("current")), 0)
    items: list[str] = []
    size = 0
    started = time.perf_counter()
    for i, v in enumerate(versions):
        base = (
            by_id.get(v.get("parent_id"))
            or (versions[i + 1] if i + 1 < len(versions) else None)
            or by_id.get(v.get("_previous_id"))
        )
        marks = []
        if v.get("current"):
            marks.append('<span class="cw-badge cw-current">current</span>')
        if v.get("simulated"):
            marks.append('<span class="cw-badge cw-sim">SIMULATED</span>')
        if v.get("candidate"):
            marks.append('<span class="cw-badge">candidate</span>')
        head = (
            f"v{int(v['version'])} · {esc(v['source'])} · {esc(v['author'])} · {when(v.get('created_at'))}"
            + (f" · job {int(v['job_id'])}" if v.get("job_id") else "")
            + (f" · {esc(v.get('prompt_name'))} v{esc(v.get('prompt_version'))}" if v.get("prompt_name") else "")
            + " "
            + "".join(marks)
        )
        if base and time.perf_counter() - started > HISTORY_DIFF_BUDGET_S:
            # R11: diffs of many long versions add up; past the budget older versions show their text only
            text = esc(v["text"]) + f' <span class="cw-muted cw-diff-cut">{esc(HISTORY_CUT)}</span>'
            labels = label_diff(base["labels"], v["labels"])
        elif base:
            text = word_diff(base["text"], v["text"])
            labels = label_diff(base["labels"], v["labels"])
        else:
            text, labels = esc(v["text"]), ""
        item = (
            f'<li class="cw-version"><div class="cw-version-head">{head}</div>'
            f'<div class="cw-diff">{text}</div>'
            + (f'<div class="cw-label-diff">{labels}</div>' if labels else "")
            + "</li>"
        )
        if budget is not None and items and size + len(item) > budget:
            break  # this version and the older ones go to the next page
        items.append(item)
        size += len(item)
    return '<ol class="cw-history">' + "".join(items) + "</ol>", versions[: len(items)]


def when_s(ts: float | None) -> str:
    if not ts:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%H:%M:%S")


def message(text: str, kind: str = "info") -> str:
    """A message line; `data-at` makes each one new to the page, the same words included, so the page script
    can tell that an answer arrived (webapp/static/shortcuts.js: no key acts on a clip being left)."""
    if not text:
        return ""
    return f'<div class="cw-msg cw-msg-{esc(kind)}" role="status" data-at="{time.time_ns()}">{esc(text)}</div>'


def banner(simulated: bool) -> str:
    if not simulated:
        return ""
    return (
        '<div class="cw-sim-banner" id="sim-banner">SIMULATED FLEET: captions here come from a simulator, '
        "not a real model. Do not use them for training.</div>"
    )
