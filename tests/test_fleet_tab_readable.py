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
