"""The Jobs tab's markup: the runner's line, the start form's count and cost, the job shown with its bar and
throughput, and the notices about the fleet (their words are webapp.jobs.fleet_notice's). Values escaped as in
webapp.render."""

from __future__ import annotations

from webapp.render import esc, when_s


def runner_alive(name: str, pid, age_s: float, fleet: str = "", fleet_bad: bool = False) -> str:
    """The runner's line while its heartbeat is fresh, with the fleet in a few words (fleet_notice.summary)."""
    return (
        f'<div class="cw-runner cw-ok" id="runner-status">Runner alive: {esc(name)} '
        f"(pid {esc(pid)}, heartbeat {age_s:.0f} s ago)"
        + (
            f' · <span class="cw-fleet-state{" cw-fleet-bad" if fleet_bad else ""}" id="fleet-state">'
            f"{esc(fleet)}</span>"
            if fleet
            else ""
        )
        + "</div>"
    )


def runner_missing(command: str, age_s: float | None = None) -> str:
    """The runner's line when no heartbeat is fresh (`age_s`: the latest one's age), with the command that starts
    it."""
    last = f" (last heartbeat {age_s:.0f} s ago)" if age_s is not None else ""
    return (
        f'<div class="cw-runner cw-stale" id="runner-status">Runner not running{esc(last)}: jobs stay queued. '
        f"Start it with <code>{esc(command)}</code> (launch.sh does this).</div>"
    )


def job_cost(text: str, estimate: bool = True) -> str:
    """What a job will cost, in words (webapp.jobs.start); `estimate` False: why there is no estimate."""
    return f' <span class="cw-cost{"" if estimate else " cw-cost-none"}" id="job-cost">{esc(text)}</span>'


def job_preview(n: int, selection: str, at: float, cost: str = "") -> str:
    """How many clips a start would caption, of which selection, counted when; `cost`: job_cost's markup."""
    return (
        f'<div class="cw-preview" id="job-preview-count" data-n="{int(n)}">Start would caption <b>{int(n):,}</b> '
        f"clips: {esc(selection)} (counted at {when_s(at)} UTC).{cost}</div>"
    )


def job_detail(job: dict, pct: float, eta: str, ran: str) -> str:
    """The job shown (data.jobs.queries.progress): its state, counts, rate, ETA and how long it ran, over a bar;
    data-* for scripts and tests."""
    c = job["counts"]
    failed = job["state"] == "failed"
    # a job that captioned nothing says so, never "100%": the bar shows what was captioned, in the failure colour
    shown = f"not one of its {int(job['total']):,} clips captioned" if failed else f"{pct:.0f}%"
    return (
        f'<div class="cw-job-detail{" cw-job-failed" if failed else ""}" id="job-progress" '
        f'data-job="{int(job["id"])}" data-pct="{pct:.0f}" data-state="{esc(job["state"])}">'
        f"Job {int(job['id'])} “{esc(job['name'])}”: <b>{esc(job['state'])}</b>"
        f" · {shown} · done {int(c['done'])} · failed {int(c['failed'])} · pending {int(c['pending'])}"
        f" · in flight {int(c['leased'])}"
        + ("" if failed else f" · {job['rate']:.2f} clips/s")  # a rate of failures is no captioning pace
        + (f" · ETA {esc(eta)}" if eta else "")
        + f" · ran {esc(ran)}"
        + (" · why: the failures below; Retry failed sends again those a retry can help" if failed else "")
        + f'<div class="cw-bar"><div style="width:{0.0 if failed else pct:.1f}%"></div></div></div>'
    )


def jobs_hidden(n: int, active: int) -> str:
    """What the job list's filter leaves out: `n` one-clip re-caption jobs, `active` of them queued or running."""
    return (
        f'<div class="cw-counts" id="jobs-hidden" data-n="{int(n)}">{int(n):,} one-clip re-caption job(s) hidden'
        + (f" ({int(active):,} queued or running)" if active else "")
        + ": Show “re-captions only” or “all” to list them.</div>"
    )


def no_runner(fleet: str, here: str | None, run_there: str, move: str) -> str:
    """For a job no running runner takes because none sends to its fleet: what to run (`run_there`), and where
    the runner here sends to (`here`; `move`: how to move the job there)."""
    return (
        f'<div class="cw-fleet-wait" id="fleet-wait" data-state="no-runner" role="status"><b>No runner sends to '
        f"this job's fleet ({esc(fleet)}).</b> A job runs only on the fleet it was made for"
        + (f"; the runner here sends to {esc(here)}" if here else "")
        + f". Run it there: <code>{esc(run_there)}</code>{esc(move)}.</div>"
    )


def fleet_wait(state: str, head: str, then: str, causes: list[tuple[str, str]]) -> str:
    """The notice for a job whose runner finds the fleet `state` ("down", "failing"): what is wrong (`head`),
    what the runner does meanwhile (`then`), and each replica's latest failure as (URL, what)."""
    items = "".join(f"<li><code>{esc(url)}</code>: {esc(what)}</li>" for url, what in causes)
    return (
        f'<div class="cw-fleet-wait" id="fleet-wait" data-state="{esc(state)}" role="status">'
        f"<b>{esc(head)}.</b> {esc(then)}" + (f'<ul class="cw-fleet-causes">{items}</ul>' if items else "") + "</div>"
    )


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
        # a bucket the job ran only part of (it started or ended in it, or it is still filling) is over that part
        over = f" over the {p['seconds']:.1f} s the job ran in it" if p.get("partial") else ""
        cls = ' class="cw-partial"' if over else ""
        parts.append(
            f'<rect x="{L + 2 + i * bw:.1f}" y="{H - B - h:.1f}" width="{max(1.0, bw - 1):.1f}" '
            f'height="{h:.1f}"{cls} data-n="{int(p["n"])}" data-seconds="{p.get("seconds", 0):.3f}" '
            f'data-rate="{p["clips_per_s"]:.4f}"><title>{esc(when_s(p["t"]))}: {p["clips_per_s"]:.2f} clips/s{over}'
            "</title></rect>"
        )
    for i in sorted({0, n // 2, n - 1}):
        x = L + 2 + (i + 0.5) * bw
        parts.append(f'<text x="{x:.1f}" y="{H - 6}" text-anchor="middle">{esc(when_s(series[i]["t"]))}</text>')
    parts.append(f'<text x="{L - 4}" y="12" text-anchor="end" class="cw-axis">clips/s</text></svg>')
    return (
        '<div class="cw-plot-wrap"><b>Throughput</b> (clips/s per bucket; a lighter bar: over the part of its bucket '
        "the job ran, as it started, ended or is still filling)" + "".join(parts) + "</div>"
    )
