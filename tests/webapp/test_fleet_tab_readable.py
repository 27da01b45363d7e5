"""The Fleet tab is for a person (issue 18 point 11): the router's status reads yes/no and "—", never `True` or
`None`, its workers are a table with their health, and the replica table has no raw values. Read through a real
vllm-router in front of the simulated fleet, with one replica killed to see a worker go unhealthy."""

from __future__ import annotations

import re

import pytest

from serving import simfleet
from tests.support.fleet_fixtures import write_clip
from tests.support.runner_fixtures import real_router
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def routed_fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleettab") / "clips"
    write_clip(root / "a.mp4", seconds=0.5)
    handle = simfleet.start_fleet(2, 0, root, mode="thread", speed=0.0)
    try:
        with real_router(handle.urls, tmp_path_factory.mktemp("router")) as url:
            yield handle, url
    finally:
        handle.stop()


def test_the_fleet_tab_shows_the_router_and_its_workers_for_a_person(settings, routed_fleet):
    from webapp.app import build_app

    handle, router = routed_fleet
    app = build_app(settings.replace(auth="off", fleet_urls=(router,)))
    try:
        tab = app.state.workbench.fleet
        out = tab.refresh(None)
        html = out[tab.router]
        text = re.sub(r"<[^>]+>", " ", html)
        assert not re.search(r"\b(True|False|None)\b", text), text
        assert "{" not in text and "'" not in text
        assert 'id="fleet-workers"' in html and html.count("<tr") >= 2 + 4  # a header and a row per worker
        assert "healthy workers" in text and "2 of 2" in text and re.search(r"live\s+yes", text)
        for u in handle.urls:
            assert u in html
        cells = out[tab.table].to_numpy().ravel().tolist()
        assert all(str(c) not in ("None", "nan", "") for c in cells), cells
        handle.kill_replica(1)
        wait_until(
            lambda: "1 of 2" in re.sub(r"<[^>]+>", " ", tab.refresh(None)[tab.router]),
            timeout=30,
            what="the router to see the dead worker",
        )
        assert 'class="cw-down"' in tab.refresh(None)[tab.router]
    finally:
        app.state.ctx.close()


def test_the_requests_line_says_what_the_requests_did_between_two_refreshes():
    """Answered and failed per replica, refused by the router, over the time between two scrapes; a counter that
    went down (a replica restarted) counts from 0; "every request failed" only when some failed and none was
    answered."""
    from webapp.fleet import render as render_fleet
    from webapp.fleet.tab import requests_seen

    def snap(t, ok, failed, refused, breakers=("open", "open")):
        rows = [{"url": f"http://r{i}", "success_total": ok[i], "failed_total": failed[i]} for i in range(2)]
        workers = {f"http://r{i}": {"breaker": b} for i, b in enumerate(breakers)}
        return t, rows, {"metrics": {"no_available_workers": refused, "workers": workers}}

    first = snap(100.0, [50, 40], [0, 0], 0)
    failing = snap(110.0, [50, 40], [6, 2], 14)
    seen = requests_seen(first, failing)
    assert (seen["seconds"], seen["answered"], seen["failed"], seen["refused"]) == (10.0, 0, 8, 14)
    line = render_fleet.requests_seen(seen)
    assert 'data-failing="1"' in line and "Every caption request failed in the last 10 s" in line
    assert "circuit breaker open for 2 of 2 workers" in line
    restarted = snap(120.0, [3, 41], [0, 2], 14, ("closed", "closed"))  # r0 restarted: its counters from 0
    seen = requests_seen(failing, restarted)
    assert (seen["answered"], seen["failed"], seen["refused"], seen["breakers_open"]) == (4, 0, 0, 0)
    assert 'data-failing="0"' in render_fleet.requests_seen(seen)
    assert "since the fleet started" in render_fleet.requests_seen(requests_seen(None, first))
