"""The Fleet tab's markup: the replicas' count, the router's status and its workers (the words and values are
webapp.fleet.tab's). Values escaped as in webapp.render."""

from __future__ import annotations

from webapp.render import esc


def fleet_summary(healthy: int, shown: int, listed: int, scraped: int, simulated: bool) -> str:
    """ "3 of 4 replicas healthy", and how many of the `listed` are `shown` when there are more than the
    `scraped` of one refresh."""
    return (
        f'<div class="cw-counts">{int(healthy)} of {int(shown)} replicas healthy'
        + (
            f" ({int(shown)} of {int(listed)} shown: at most {int(scraped)} are scraped per refresh)"
            if listed > shown
            else ""
        )
        + (" · <b>simulated</b>" if simulated else "")
        + "</div>"
    )


def requests_seen(seen: dict) -> str:
    """What the caption requests did between the last two refreshes (webapp.fleet.tab.requests_seen): answered
    and failed on the replicas, refused by the router; "every request failed" when some failed and none was
    answered. data-* for scripts and tests."""
    answered, failed, refused = int(seen["answered"]), int(seen["failed"]), int(seen["refused"])
    when = f"in the last {seen['seconds']:.0f} s" if seen.get("seconds") is not None else "since the fleet started"
    bad = (failed + refused) > 0 and answered == 0
    router = ""
    if seen.get("router_metrics"):
        router = f"; the router refused {refused:,} (no available workers)"
        if seen.get("breakers_open"):
            router += f", its circuit breaker open for {int(seen['breakers_open'])} of {int(seen['workers'])} workers"
    head = "Every caption request failed " if bad else "Caption requests "
    return (
        f'<div class="cw-counts{" cw-fleet-bad" if bad else ""}" id="fleet-requests" data-answered="{answered}" '
        f'data-failed="{failed}" data-refused="{refused}" data-failing="{1 if bad else 0}">'
        f"{esc(head + when)}: {answered:,} answered, {failed:,} failed on the replicas (HTTP 5xx){esc(router)}"
        "</div>"
    )


def runner_view(words: str) -> str:
    """The runner's word on the fleet (the Jobs tab's runner line says the same), or nothing without a runner."""
    if not words:
        return ""
    return f'<div class="cw-counts" id="fleet-runner-view">The runner: {esc(words)}</div>'


def workers_table(head: list[str], rows: list[tuple[bool, list[str]]], more: int, empty: str) -> str:
    """The router's workers, a row each as (down, its cells), and how many `more` are not shown; `empty` when
    there are none."""
    if not rows:
        return f'<span class="cw-muted">{esc(empty)}</span>'
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join(
        "<tr"
        + (' class="cw-down"' if down else "")
        + ">"
        + "".join(f"<td>{esc(cell)}</td>" for cell in cells)
        + "</tr>"
        for down, cells in rows
    )
    more_html = f'<p class="cw-muted">{int(more):,} more not shown</p>' if more > 0 else ""
    return f'<table class="cw-workers" id="fleet-workers"><tr>{th}</tr>{body}</table>{more_html}'


def router_table(rows: list[tuple[str, str]], workers: str) -> str:
    """The router's status as (name, value) rows, then its workers (`workers`: workers_table's markup)."""
    return (
        '<table class="cw-prov" id="fleet-router-table">'
        + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
        + f"<tr><th>workers</th><td>{workers}</td></tr>"
        + "</table>"
    )
