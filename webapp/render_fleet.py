"""The Fleet tab's markup: the replicas' count, the router's status and its workers (the words and values are
webapp.fleet_tab's). Values escaped as in webapp.render."""

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
