"""Issue 21, class 3: fleet control surfaces that anyone could drive. The rule: only the launcher changes a fleet.
- The router the launcher starts answered every origin with `Access-Control-Allow-Origin: *` and took
  `/add_worker` from anyone: a worker added that way got a share of a lead's next job. Now the router sits on a
  private loopback address behind serving.router_gate, which takes no cross-site request, no request without the
  fleet key and no worker change, and keeps the router's worker list the launcher's.
- The simulated fleet's knobs took cross-site posts, and on a node listened on the node's address: now a change
  needs the knobs token, no browser request is taken, and beyond loopback the controls listen on 127.0.0.1 only.
- Node replicas served anyone: now every replica the launcher starts requires the fleet key (vLLM's 401 without).
- `--allowed-media-domains` checks the host, not the port: the runner refuses to send any media URL that is not
  the app's origin, and the app's media route serves nothing unsigned.
Each test reproduces its exposure on the code before this change (it fails there)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from data import db as dbmod, jobs, prompts
from data.job_params import JobParams
from data.jobs.selection import Selection
from data.library.clipgen import tiny_library
from data.settings import Settings
from serving import fleet_key, media_urls, procs, runner as runmod, simfleet
from serving.client import CaptionRequest, FleetClient, content_part
from serving.errors import ClipRejected
from serving.launch import addresses as fleet_addresses, cli as launcher, recorded as recorded_fleet
from tests.support.fleet_fixtures import PROMPT, caption
from tests.support.waiting import wait_until

EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """A fleet as `./launch.sh` starts it on one machine: 2 simulated replicas, vllm-router, the router gate."""
    base = tmp_path_factory.mktemp("control")
    settings = Settings.load({"data_dir": str(base / "var")}, environ={})
    db = dbmod.connect(settings.db)
    ids = tiny_library(settings, db, 8)
    db.close()
    port = fleet_addresses.free_block("127.0.0.1", 2, procs.free_port())
    args = ["up", "--fleet-mode", "sim", "--replicas", "2", "--sim-arg=--speed 0", "--data-dir", str(settings.data_dir)]
    args += ["--fleet-port", str(port), "--router-port", str(procs.free_port())]
    args += ["--router-prometheus-port", str(procs.free_port()), "--startup-timeout", "60"]
    assert launcher.main(args) == 0
    rec = json.loads((settings.data_dir / "run" / "fleet.json").read_text())
    try:
        yield {
            "settings": settings,
            "ids": ids,
            "rec": rec,
            "gate": rec["router_url"],
            "router": [c for c in rec["procs"] if c["name"] == "router"][0]["url"],
            "auth": fleet_key.headers(settings),
        }
    finally:
        recorded_fleet.down(settings, grace=5, quiet=True)


def test_the_router_answers_no_cross_site_request(fleet):
    gate, auth = fleet["gate"], fleet["auth"]
    preflight = {"origin": EVIL, "access-control-request-method": "POST"}
    for r in (
        httpx.options(gate + "/add_worker", headers=preflight, timeout=10),
        httpx.options(gate + "/v1/chat/completions", headers={**preflight, **auth}, timeout=10),
        httpx.get(gate + "/workers", headers={"origin": EVIL, **auth}, timeout=10),
        httpx.get(gate + "/workers", headers={"sec-fetch-site": "cross-site", **auth}, timeout=10),
        httpx.get(gate + "/workers", headers={"host": "rebound.example", **auth}, timeout=10),  # DNS rebinding
    ):
        assert r.status_code == 403, (r.request.method, r.request.headers, r.status_code, r.text)
        assert not any(k.lower().startswith("access-control-") for k in r.headers), r.headers
    # the router itself, on its private address, names no origin a page can have
    host = httpx.URL(fleet["router"]).host
    assert host.startswith("127.") and fleet_addresses.local_host(host) == host
    r = httpx.get(fleet["router"] + "/workers", headers={"origin": EVIL}, timeout=10)
    assert r.headers.get("access-control-allow-origin") in (None, "http://no-page.invalid"), r.headers


def test_the_router_takes_no_worker_change_and_nothing_without_the_key(fleet):
    gate, auth = fleet["gate"], fleet["auth"]
    for method, path in (("POST", "/add_worker"), ("POST", "/remove_worker"), ("POST", "/flush_cache")):
        url = f"{gate}{path}?url=http://127.0.0.1:9"
        r = httpx.request(method, url, timeout=10)
        assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}, (path, r.text)
        r = httpx.request(method, url, headers={"authorization": "Bearer not-the-key"}, timeout=10)
        assert r.status_code == 401, (path, r.text)
        r = httpx.request(method, url, headers=auth, timeout=10)  # the key opens the API, not the controls
        assert r.status_code == 403 and "only the launcher changes the fleet" in r.text, (path, r.text)
    assert httpx.get(gate + "/v1/models", timeout=10).status_code == 401
    workers = httpx.get(gate + "/workers", headers=auth, timeout=10).json()["workers"]
    assert sorted(w["url"] for w in workers) == sorted(fleet["rec"]["replica_urls"])
    # the Fleet tab's reads send the key and see every replica through the gate
    from serving.fleet.reader import FleetReader
    from webapp.fleet.tab import snapshot

    rows, router = snapshot(FleetReader(fleet["settings"]), [gate])
    assert len(rows) == 2 and all(r["healthy"] for r in rows) and router["live"], (rows, router)


def test_a_worker_cannot_be_injected_into_a_leads_job(fleet, tmp_path):
    """An attacker's replica answers captions of its own. Every way in is tried -- through the router's address
    with and without the key, cross-site, and straight at the router's private address as another local
    process would -- and a lead's job then runs: the attacker gets no request that job sends."""
    settings, gate, auth = fleet["settings"], fleet["gate"], fleet["auth"]
    evil = simfleet.start_fleet(1, 0, settings.clip_root, speed=0)
    try:
        target = f"?url={evil.urls[0]}"
        for headers in ({}, auth, {**auth, "origin": EVIL}, {**auth, "sec-fetch-site": "cross-site"}):
            r = httpx.post(gate + "/add_worker" + target, headers=headers, timeout=30)
            assert r.status_code in (401, 403), (headers, r.status_code, r.text)
        # a local process that found the private address: the gate takes the worker out again within seconds
        r = httpx.post(fleet["router"] + "/add_worker" + target, timeout=60)
        assert r.status_code == 200, r.text

        def listed() -> set[str]:
            return {w["url"] for w in httpx.get(gate + "/workers", headers=auth, timeout=10).json()["workers"]}

        wait_until(lambda: evil.urls[0] not in listed(), timeout=30, what="the gate removes the foreign worker")
        before = evil.stats(0)["chat_requests"]
        db = dbmod.connect(settings.db)
        try:
            job_id = jobs.create(
                db,
                name="lead's job",
                created_by="lead",
                selection=Selection.of_clips(fleet["ids"]),
                prompt_id=prompts.latest(db)["id"],
                params=JobParams(),
            )
        finally:
            db.close()
        prog = runmod.run_job(settings, job_id, gate, backoff_base=0.05)
        assert prog["state"] == "done" and prog["counts"]["done"] == len(fleet["ids"]), prog
        assert evil.stats(0)["chat_requests"] == before
        assert listed() == set(fleet["rec"]["replica_urls"])
        log = (settings.data_dir / "logs" / "router-gate.log").read_text()
        assert f"removed worker {evil.urls[0]}" in log
    finally:
        evil.stop()


def test_the_simulated_fleets_knobs_take_no_cross_site_and_no_anonymous_change(fleet):
    replica = fleet["rec"]["replica_urls"][0]
    token = fleet["auth"]  # a launcher's simulated fleet takes the fleet key as its knobs token
    r = httpx.post(replica + "/sim/knobs", json={"die": True}, timeout=10)
    assert r.status_code == 401, r.text
    for headers in ({"origin": EVIL}, {"sec-fetch-site": "cross-site"}, {"sec-fetch-site": "same-site"}):
        r = httpx.post(
            replica + "/sim/knobs",
            json={"allowed_media_domains": "169.254.169.254"},
            headers={**token, **headers},
            timeout=10,
        )
        assert r.status_code == 403, (headers, r.text)
        assert httpx.get(replica + "/sim/stats", headers=headers, timeout=10).status_code == 403
    stats = httpx.get(replica + "/sim/stats", timeout=10).json()
    assert stats["knobs"]["allowed_media_domains"] == "" and not stats["dead"]  # nothing changed
    r = httpx.post(replica + "/sim/knobs", json={"slow": 1.0}, headers=token, timeout=10)
    assert r.status_code == 200  # the launcher (or a test holding the token) still can


def test_a_nodes_knobs_listen_on_loopback_only(tmp_path):
    """A node binds an address the head reaches; its controls must not be on it."""
    (tmp_path / "media").mkdir()
    handle = simfleet.start_fleet(1, 0, tmp_path / "media", host="0.0.0.0", speed=0)
    try:
        port = httpx.URL(handle.urls[0]).port
        r = httpx.post(f"http://127.0.0.1:{port}/sim/knobs", json={"die": True}, headers=handle._knobs_auth, timeout=10)
        assert r.status_code == 404  # not served on the node's address, whoever asks
        assert httpx.get(f"http://127.0.0.1:{port}/sim/stats", timeout=10).status_code == 404
        assert httpx.URL(handle.knob_urls[0]).host == "127.0.0.1"
        assert handle.set_knobs(0, slow=2.0)["slow"] == 2.0  # on loopback, with the token
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
    finally:
        handle.stop()


def test_node_replicas_require_the_key_the_head_sends(tmp_path):
    """`launcher up --role node` on 127.0.0.2: refused without the head's key; with it, the replicas answer /v1
    only to that key (vLLM's 401 `{"error": "Unauthorized"}`), and a head runner holding it captions a job."""
    head = Settings.load({"data_dir": str(tmp_path / "head")}, environ={})
    node = Settings.load({"data_dir": str(tmp_path / "node")}, environ={})
    port = fleet_addresses.free_block("127.0.0.2", 2, procs.free_port("127.0.0.2"))
    args = ["up", "--role", "node", "--fleet-mode", "sim", "--replicas", "2", "--replica-host", "127.0.0.2"]
    args += ["--fleet-port", str(port), "--data-dir", str(node.data_dir), "--media-url-base", "http://127.0.0.1:9"]
    args += ["--sim-arg=--speed 0", "--startup-timeout", "60"]
    assert launcher.main(args) == 1  # no key yet: refused before anything starts
    assert not (node.data_dir / "run" / "fleet.json").exists()
    node.data_dir.mkdir(parents=True, exist_ok=True)
    (node.data_dir / fleet_key.KEY_FILE).write_text(fleet_key.load(head, create=True))
    assert launcher.main(args) == 0
    try:
        urls = json.loads((node.data_dir / "run" / "fleet.json").read_text())["replica_urls"]
        for u in urls:
            r = httpx.get(u + "/v1/models", timeout=10)
            assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
            assert httpx.get(u + "/v1/models", headers=fleet_key.headers(head), timeout=10).status_code == 200
            assert httpx.get(u + "/health", timeout=10).status_code == 200
        db = dbmod.connect(head.db)
        try:
            ids = tiny_library(head, db, 4)
            job_id = jobs.create(
                db,
                name="through the node",
                created_by="lead",
                selection=Selection.of_clips(ids),
                prompt_id=prompts.latest(db)["id"],
                params=JobParams(),
            )
        finally:
            db.close()
        # no head is recorded here, so the clips go as file://, which a node's empty media folder refuses: each
        # failure is the replica's own 400 about the path, proof that the runner's key was taken (not a 401)
        prog = runmod.run_job(head, job_id, urls, backoff_base=0.05)
        assert prog["counts"]["failed"] == len(ids), prog
        d = dbmod.connect(head.db)
        try:
            errors = {
                row["last_error"] for row in d.query("SELECT last_error FROM job_items WHERE job_id = ?", [job_id])
            }
        finally:
            d.close()
        assert all("allowed-local-media-path" in e for e in errors), errors
    finally:
        recorded_fleet.down(node, grace=5, quiet=True)


def test_media_urls_off_the_apps_origin_are_never_sent(fleet_settings, sim):
    """`--allowed-media-domains` checks the host only: a replica allowed 127.0.0.1 fetches from any port of it.
    The runner's client refuses a media URL that is not the app's origin, port included, before sending."""
    app = "http://127.0.0.1:7860"
    s = fleet_settings.replace(media_url_base=app)
    sim.set_knobs(0, allowed_media_domains="127.0.0.1")
    for url in (
        "http://127.0.0.1:30000/v1/models",  # the router, on the app's host
        "http://127.0.0.1:8001/metrics",  # a replica
        "https://127.0.0.1:7860/media/signed/1?exp=1&sig=x",  # another scheme
        "http://localhost:7860/media/signed/1?exp=1&sig=x",  # another name
        "http://169.254.169.254/latest/meta-data/",
    ):
        with pytest.raises(ClipRejected) as e:
            caption(s, sim.urls[0], "a.mp4", media_url=url)
        assert e.value.kind == "origin" and "app's origin, http://127.0.0.1:7860" in str(e.value)
        assert "sig=" not in str(e.value)  # a signed URL is never written into a job's error
    assert sim.stats(0)["chat_requests"] == 0
    # the same URL shape at the app's own origin is sent (the replica then fetches it: nothing listens there)
    body = FleetClient(s).build_body(CaptionRequest("a.mp4", PROMPT, media_url=app + "/media/signed/1?exp=1&sig=x"))
    assert content_part(body, "video_url")["video_url"]["url"].startswith(app + "/media/signed/1")
    # a single machine sends no http URL at all
    with pytest.raises(ClipRejected, match="nowhere"):
        FleetClient(fleet_settings).build_body(CaptionRequest("a.mp4", PROMPT, media_url=app + "/media/signed/1"))


def test_the_media_route_serves_nothing_unsigned(tmp_path):
    from tests.support.webapp_fixtures import AppServer

    settings = Settings.load({"data_dir": str(tmp_path / "var")}, environ={})
    db = dbmod.connect(settings.db)
    cid = tiny_library(settings, db, 1)[0]
    db.close()
    with AppServer(settings, fleet_urls=[]) as app:
        key = media_urls.load_key(settings.data_dir)
        good = media_urls.signed_url(app.url, key, cid, ttl=60)
        with httpx.Client(timeout=10) as c:
            assert c.get(good).status_code == 200
            for bad in (
                f"{media_urls.ROUTE}/{cid}",
                f"{media_urls.ROUTE}/{cid}?exp={int(time.time()) + 60}",
                f"/media/{cid}",
            ):
                r = c.get(app.url + bad)
                assert r.status_code in (401, 403) and not r.content.startswith(
                    Path(settings.clip_root / "lib" / "00000.mp4").read_bytes()[:16]
                )
