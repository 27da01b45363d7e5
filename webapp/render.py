"""HTML pieces the UI shows. Every piece of user or model text goes through `esc` (html.escape, quotes too);
nothing else builds markup from data."""

from __future__ import annotations

import datetime as dt
import difflib
import time
import html
import json
from typing import Any, Iterable

from data import taxonomy


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
        preview = r.get("caption_preview") or ("no caption yet" if not r.get("probe_error") else r["probe_error"])
        out.append(
            f'<a class="cw-tile" href="?clip={int(r["id"])}" data-clip="{int(r["id"])}" id="tile-{int(r["id"])}">'
            f'<img loading="lazy" src="/thumb/{int(r["id"])}" alt="">'
            f'<div class="cw-tile-path">#{int(r["id"])} {esc(r.get("path"))}</div>'
            f'<div class="cw-tile-badges">{"".join(badges)}</div>'
            f'<div class="cw-tile-caption">{esc(preview)}</div></a>')
    if not out:
        return '<p class="cw-empty">No clips match this filter.</p>'
    return '<div class="cw-grid">' + "".join(out) + "</div>"


def counts(summary: dict[str, int], matching: int, exact: bool = True) -> str:
    parts = [f"<b>{matching:,}{'' if exact else '+'}</b> match", f"{summary.get('clips', 0):,} clips",
             f"{summary.get('captioned', 0):,} captioned", f"{summary.get('approved', 0):,} approved",
             f"{summary.get('rejected', 0):,} rejected", f"{summary.get('failed', 0):,} ingest failed"]
    return '<div class="cw-counts">' + " · ".join(parts) + "</div>"


def player(clip: dict) -> str:
    cid = int(clip["id"])
    if clip.get("probe_error"):
        return (f'<div class="cw-notice cw-error">This clip failed at ingest: {esc(clip["probe_error"])}. '
                "It cannot be played or captioned.</div>")
    if (clip.get("codec") or "").lower() in ("hevc", "h265"):
        if clip.get("preview"):
            return (f'<video id="cw-video" class="cw-video" src="/preview/{cid}" controls preload="metadata" '
                    'playsinline muted></video><div class="cw-notice" id="hevc-notice">HEVC (H.265) clip: '
                    "browsers cannot play it, so this is a 640-px H.264 preview made at ingest. The model sees "
                    f'the original. <a href="/media/{cid}" download>Download the original</a>.</div>')
        return ('<div class="cw-notice" id="hevc-notice">This clip is HEVC (H.265): browsers cannot play it. '
                "The filmstrip below shows the frames the model saw. "
                f'<a href="/media/{cid}" download>Download the clip</a>.</div>')
    return (f'<video id="cw-video" class="cw-video" src="/media/{cid}" controls preload="metadata" '
            'playsinline muted></video>')


def filmstrip(clip: dict) -> str:
    if not clip.get("filmstrip"):
        return '<p class="cw-muted">No filmstrip for this clip.</p>'
    return (f'<img class="cw-filmstrip" id="cw-filmstrip" src="/filmstrip/{int(clip["id"])}" '
            'alt="frames the model saw">')


def header(clip: dict, user: str, role: str) -> str:
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
    return '<div class="cw-clip-header">' + " · ".join(bits) + "</div>"


PROVENANCE_LABELS = (("model", "model"), ("prompt", None), ("replica", "replica"),
                     ("decode backend", "decode_backend"), ("latency", None), ("tokens", None),
                     ("frames", "frames"), ("job", "job_id"), ("params", None), ("finish", "finish_reason"))


def provenance(cap: dict | None) -> str:
    if not cap:
        return '<p class="cw-muted">No caption yet.</p>'
    rows = [("source", f"{cap['source']} by {cap['author']}"), ("version", cap["version"]),
            ("written", when(cap.get("created_at")))]
    if cap["source"] == "model":
        rows += [("model", cap.get("model")),
                 ("prompt", f"{cap.get('prompt_name') or '?'} v{cap.get('prompt_version') or '?'}"
                            f" (id {cap.get('prompt_id')})"),
                 ("replica", cap.get("replica")), ("decode backend", cap.get("decode_backend")),
                 ("latency", f"{cap['latency_ms']:.0f} ms" if cap.get("latency_ms") is not None else None),
                 ("tokens", f"{cap.get('prompt_tokens')} in / {cap.get('completion_tokens')} out"),
                 ("frames", cap.get("frames")), ("job", cap.get("job_id")),
                 ("params", json.dumps(cap.get("params"), sort_keys=True) if cap.get("params") else None),
                 ("finish", cap.get("finish_reason"))]
    if cap.get("note"):
        rows.append(("note", cap["note"]))
    sim = ('<div class="cw-sim-marker" id="prov-simulated">SIMULATED caption: written by the simulated fleet, '
           "not a real model</div>") if cap.get("simulated") else ""
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
            ops.append(("replace" if alo < ahi and blo < bhi else "delete" if alo < ahi else "insert",
                        alo, ahi, blo, bhi))

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
    if not versions:
        return '<p class="cw-muted">No versions yet.</p>'
    by_id = {v["id"]: v for v in versions}
    items = []
    started = time.perf_counter()
    for i, v in enumerate(versions):
        base = by_id.get(v.get("parent_id")) or (versions[i + 1] if i + 1 < len(versions) else None)
        marks = []
        if v.get("current"):
            marks.append('<span class="cw-badge cw-current">current</span>')
        if v.get("simulated"):
            marks.append('<span class="cw-badge cw-sim">SIMULATED</span>')
        if not v.get("current") and v["source"] == "model" and v["id"] > max(
                (x["id"] for x in versions if x.get("current")), default=0):
            marks.append('<span class="cw-badge">candidate</span>')
        head = (f"v{int(v['version'])} · {esc(v['source'])} · {esc(v['author'])} · {when(v.get('created_at'))}"
                + (f" · job {int(v['job_id'])}" if v.get("job_id") else "")
                + (f" · {esc(v.get('prompt_name'))} v{esc(v.get('prompt_version'))}" if v.get("prompt_name") else "")
                + " " + "".join(marks))
        if base and time.perf_counter() - started > HISTORY_DIFF_BUDGET_S:
            # R11: diffs of many long versions add up; past the budget older versions show their text only
            text = (esc(v["text"]) + f' <span class="cw-muted cw-diff-cut">{esc(HISTORY_CUT)}</span>')
            labels = label_diff(base["labels"], v["labels"])
        elif base:
            text = word_diff(base["text"], v["text"])
            labels = label_diff(base["labels"], v["labels"])
        else:
            text, labels = esc(v["text"]), ""
        items.append(f'<li class="cw-version"><div class="cw-version-head">{head}</div>'
                     f'<div class="cw-diff">{text}</div>'
                     + (f'<div class="cw-label-diff">{labels}</div>' if labels else "") + "</li>")
    return '<ol class="cw-history">' + "".join(items) + "</ol>"


def message(text: str, kind: str = "info") -> str:
    return f'<div class="cw-msg cw-msg-{esc(kind)}" role="status">{esc(text)}</div>' if text else ""


def banner(simulated: bool) -> str:
    if not simulated:
        return ""
    return ('<div class="cw-sim-banner" id="sim-banner">SIMULATED FLEET: captions here come from a simulator, '
            "not a real model. Do not use them for training.</div>")
