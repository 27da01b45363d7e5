"""HTML pieces the UI shows. Every piece of user or model text goes through `esc` (html.escape, quotes too);
nothing else builds markup from data."""

from __future__ import annotations

import datetime as dt
import difflib
import html
import json
import time
from typing import Any, Iterable

from data import limits, taxonomy


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def when(ts: float | None) -> str:
    if not ts:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def tiles(rows: Iterable[dict]) -> str:
    """The browse grid: a tile per clip, a real link (`?clip=ID`, so it also works in a new tab)."""
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
        return '<p class="cw-empty">No clips match this filter.</p>'
    return '<div class="cw-grid">' + "".join(out) + "</div>"


def assignee_badge(name: str) -> str:
    return f'<span class="cw-badge cw-assignee" title="assigned to {esc(name)}">→ {esc(name)}</span>'


def counts(summary: dict[str, int], matching: int, exact: bool = True) -> str:
    parts = [
        f"<b>{matching:,}{'' if exact else '+'}</b> match",
        f"{summary.get('clips', 0):,} clips",
        f"{summary.get('captioned', 0):,} captioned",
        f"{summary.get('approved', 0):,} approved",
        f"{summary.get('rejected', 0):,} rejected",
        f"{summary.get('failed', 0):,} ingest failed",
    ]
    return '<div class="cw-counts">' + " · ".join(parts) + "</div>"


def _fps(clip: dict) -> float:
    return float(clip.get("fps") or 0) or 25.0


def player(clip: dict) -> str:
    """The clip's video (data-fps lets the page script step one frame with the arrow keys)."""
    cid = int(clip["id"])
    fps = f'data-fps="{_fps(clip):.3f}"'
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


def loaded_key(clip_id: int, caption_id: int | None, review_status: str | None) -> str:
    """The header's data-loaded: which caption version and review state the form was filled from."""
    return f"{int(clip_id)}:{caption_id or 0}:{esc(review_status or '')}"


def header(clip: dict, user: str, role: str, *, loaded: str | None = None) -> str:
    """The Review header. `loaded` (default: the clip's stored caption and review state, `loaded_key`) is what the
    page script compares to tell a freshly loaded form from an edited one: a redraw that keeps the form passes the
    form's."""
    bits = [f"<b>#{int(clip['id'])}</b> {esc(clip.get('path'))}"]
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
    if clip.get("assignee"):
        by = f" by {esc(clip['assigned_by'])}" if clip.get("assigned_by") else ""
        bits.append(f'<span id="review-assignee">{assignee_badge(clip["assignee"])} assigned{by}</span>')
    # data-* for the page script: the URL follows data-clip; the form counts as unsaved until data-loaded changes
    if loaded is None:
        loaded = loaded_key(clip["id"], clip.get("current_caption_id"), clip.get("review_status"))
    return (
        f'<div class="cw-clip-header" id="clip-header" data-clip="{int(clip["id"])}" data-loaded="{loaded}">'
        + " · ".join(bits)
        + "</div>"
    )


PROVENANCE_LABELS = (
    ("model", "model"),
    ("prompt", None),
    ("replica", "replica"),
    ("decode backend", "decode_backend"),
    ("latency", None),
    ("tokens", None),
    ("frames", "frames"),
    ("job", "job_id"),
    ("params", None),
    ("finish", "finish_reason"),
)


def provenance(cap: dict | None) -> str:
    if not cap:
        return '<p class="cw-muted">No caption yet.</p>'
    rows = [
        ("source", f"{cap['source']} by {cap['author']}"),
        ("version", cap["version"]),
        ("written", when(cap.get("created_at"))),
    ]
    if cap["source"] == "model":
        rows += [
            ("model", cap.get("model")),
            (
                "prompt",
                f"{cap.get('prompt_name') or '?'} v{cap.get('prompt_version') or '?'} (id {cap.get('prompt_id')})",
            ),
            ("replica", cap.get("replica")),
            ("decode backend", cap.get("decode_backend")),
            ("latency", f"{cap['latency_ms']:.0f} ms" if cap.get("latency_ms") is not None else None),
            ("tokens", f"{cap.get('prompt_tokens')} in / {cap.get('completion_tokens')} out"),
            ("frames", cap.get("frames")),
            ("job", cap.get("job_id")),
            ("params", json.dumps(cap.get("params"), sort_keys=True) if cap.get("params") else None),
            ("finish", cap.get("finish_reason")),
        ]
    if cap.get("note"):
        rows.append(("note", cap["note"]))
    sim = (
        (
            '<div class="cw-sim-marker" id="prov-simulated">SIMULATED caption: written by the simulated fleet, '
            "not a real model</div>"
        )
        if cap.get("simulated")
        else ""
    )
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows if v not in (None, ""))
    return f'{sim}<table class="cw-prov">{body}</table>'


# The word diff's hard bound (R11). difflib's SequenceMatcher is quadratic in the worst case (two long captions
# cost tens of seconds of CPU on every view). So, as in git's patience diff: cut the common head and tail
# (linear), anchor on words that occur once in each side (longest increasing subsequence, n log n), and give
# difflib only the gaps between anchors, within a total budget of word pairs. What is left over the budget is
# shown as "replaced" with a note. 250,000 pairs of difflib's worst input (a two-word vocabulary) take ~60 ms.
DIFF_MAX_PAIRS = 250_000
DIFF_MAX_DEPTH = 3
HISTORY_DIFF_BUDGET_S = 0.15  # word diffs of one history view; older versions past it are shown without a diff
HISTORY_CUT = "(older version: diff not computed, the history is long; the text is shown as saved)"
DIFF_TOO_LONG = "(too long to diff word by word: part of the change is shown as replaced)"


def _unique_anchors(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """(i, j) of words unique in a and in b, in an order increasing on both sides (LIS over j)."""
    import bisect
    from collections import Counter

    ca, cb = Counter(a), Counter(b)
    once_b = {w for w, n in cb.items() if n == 1}
    once = {w for w, n in ca.items() if n == 1 and w in once_b}
    where_b = {w: j for j, w in enumerate(b) if w in once}
    pairs = [(i, where_b[w]) for i, w in enumerate(a) if w in once]
    tails: list[int] = []  # patience sorting: tails[k] = smallest j ending an increasing run of length k+1
    tail_idx: list[int] = []
    prev: list[int] = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        pos = bisect.bisect_left(tails, j)
        if pos == len(tails):
            tails.append(j)
            tail_idx.append(k)
        else:
            tails[pos], tail_idx[pos] = j, k
        prev[k] = tail_idx[pos - 1] if pos else -1
    out, k = [], tail_idx[-1] if tail_idx else -1
    while k >= 0:
        out.append(pairs[k])
        k = prev[k]
    return out[::-1]


def _diff_ops(a: list[str], b: list[str]) -> tuple[list[tuple[str, int, int, int, int]], bool]:
    """difflib-style opcodes over word lists, in bounded time; (ops, whether the bound cut the diff short)."""
    budget = [DIFF_MAX_PAIRS]
    cut = [False]
    ops: list[tuple[str, int, int, int, int]] = []

    def equal(i, j, n):  # one op per run of equal words, not one per word
        if ops and ops[-1][0] == "equal" and ops[-1][2] == i and ops[-1][4] == j:
            ops[-1] = ("equal", ops[-1][1], i + n, ops[-1][3], j + n)
        else:
            ops.append(("equal", i, i + n, j, j + n))

    def coarse(alo, ahi, blo, bhi):
        if alo < ahi or blo < bhi:
            ops.append(
                ("replace" if alo < ahi and blo < bhi else "delete" if alo < ahi else "insert", alo, ahi, blo, bhi)
            )

    def rec(alo, ahi, blo, bhi, depth):
        head = 0
        while alo + head < ahi and blo + head < bhi and a[alo + head] == b[blo + head]:
            head += 1
        if head:
            equal(alo, blo, head)
            alo, blo = alo + head, blo + head
        tail = 0
        while alo < ahi - tail and blo < bhi - tail and a[ahi - 1 - tail] == b[bhi - 1 - tail]:
            tail += 1
        mid_a, mid_b = ahi - tail, bhi - tail
        pairs = (mid_a - alo) * (mid_b - blo)
        if pairs == 0:
            coarse(alo, mid_a, blo, mid_b)
        elif pairs <= min(budget[0], DIFF_MAX_PAIRS // 4) or (pairs <= budget[0] and depth >= DIFF_MAX_DEPTH):
            budget[0] -= pairs
            sm = difflib.SequenceMatcher(a=a[alo:mid_a], b=b[blo:mid_b], autojunk=False)
            for op, i1, i2, j1, j2 in sm.get_opcodes():
                if op == "equal":
                    equal(i1 + alo, j1 + blo, i2 - i1)
                else:
                    ops.append((op, i1 + alo, i2 + alo, j1 + blo, j2 + blo))
        elif depth < DIFF_MAX_DEPTH and (anchors := _unique_anchors(a[alo:mid_a], b[blo:mid_b])):
            pa, pb = alo, blo
            for i, j in anchors:
                if alo + i != pa or blo + j != pb:  # most gaps between anchors are empty: no call for those
                    rec(pa, alo + i, pb, blo + j, depth + 1)
                equal(alo + i, blo + j, 1)
                pa, pb = alo + i + 1, blo + j + 1
            rec(pa, mid_a, pb, mid_b, depth + 1)
        else:
            cut[0] = True
            coarse(alo, mid_a, blo, mid_b)
        if tail:
            equal(mid_a, mid_b, tail)

    rec(0, len(a), 0, len(b), 0)
    return ops, cut[0]


def word_diff(old: str, new: str) -> str:
    """Word-level diff, every piece escaped; linear up to a hard bound (DIFF_MAX_PAIRS), then coarse."""
    a, b = (old or "").split(), (new or "").split()
    out = []
    ops, cut = _diff_ops(a, b)
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
        if not v.get("current") and v["source"] == "model" and v["id"] > (current_id or 0):
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


def throughput(series: list[dict], bucket_s: float | None = None) -> str:
    """The throughput of a job as SVG bars (clips/s per bucket) with readable axes: one bucket still shows a
    bar, and the y ticks are round numbers with their unit."""
    if not series:
        return '<p class="cw-muted" id="job-plot-empty">No results yet: the plot starts with the first caption.</p>'
    W, H, L, B, T = 640, 190, 48, 24, 22
    ymax_raw = max(p["clips_per_s"] for p in series) or 1.0
    step = next(s for s in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 1e9) if ymax_raw / s <= 4)
    ymax = step * max(1, -(-ymax_raw // step))
    n = len(series)
    bw = min(48.0, (W - L - 4) / n)  # one bucket is one bar, not a wall
    parts = [
        f'<svg class="cw-plot" id="job-plot-svg" viewBox="0 0 {W} {H}" role="img" '
        f'aria-label="throughput, clips per second">'
    ]
    k = 0.0
    while k <= ymax + 1e-9:
        y = T + (H - T - B) * (1 - k / ymax)
        parts.append(
            f'<line x1="{L}" x2="{W}" y1="{y:.1f}" y2="{y:.1f}" class="cw-grid-line"/>'
            f'<text x="{L - 4}" y="{y + 4:.1f}" text-anchor="end">{k:g}</text>'
        )
        k += step
    for i, p in enumerate(series):
        h = (H - T - B) * p["clips_per_s"] / ymax
        parts.append(
            f'<rect x="{L + 2 + i * bw:.1f}" y="{H - B - h:.1f}" width="{max(1.0, bw - 1):.1f}" '
            f'height="{h:.1f}"><title>{esc(when_s(p["t"]))}: {p["clips_per_s"]:.2f} clips/s</title></rect>'
        )
    for i in sorted({0, n // 2, n - 1}):
        x = L + 2 + (i + 0.5) * bw
        parts.append(f'<text x="{x:.1f}" y="{H - 6}" text-anchor="middle">{esc(when_s(series[i]["t"]))}</text>')
    parts.append(f'<text x="{L - 4}" y="12" text-anchor="end" class="cw-axis">clips/s</text></svg>')
    return '<div class="cw-plot-wrap"><b>Throughput</b> (clips/s per bucket)' + "".join(parts) + "</div>"


def when_s(ts: float | None) -> str:
    if not ts:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%H:%M:%S")


def message(text: str, kind: str = "info") -> str:
    return f'<div class="cw-msg cw-msg-{esc(kind)}" role="status">{esc(text)}</div>' if text else ""


def banner(simulated: bool) -> str:
    if not simulated:
        return ""
    return (
        '<div class="cw-sim-banner" id="sim-banner">SIMULATED FLEET: captions here come from a simulator, '
        "not a real model. Do not use them for training.</div>"
    )
