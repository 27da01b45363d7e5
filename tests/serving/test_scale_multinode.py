"""Beyond one node, rehearsed on loopback (issue 12): signed media URLs, and two "nodes" of simulated replicas
on 127.0.0.2 and 127.0.0.3 behind the real vllm-router that can only fetch clips over signed HTTP URLs from the
real app (they get an empty --allowed-local-media-path, so file:// cannot reach the clip root)."""

from __future__ import annotations

import os
import stat
import time

import httpx
import pytest

from data import db as dbmod, jobs, prompts
from data.job_params import JobParams
from data.jobs.selection import Selection
from data.library import deployment
from data.library.clipgen import tiny_clip, tiny_library
from serving import media_urls, runner as runmod, simfleet
from tests.support.runner_fixtures import real_router
from tests.support.webapp_fixtures import AppServer


# ---- the signature itself -------------------------------------------------------------------------------------
def test_key_is_created_0600_once_and_reused(tmp_path):
    k1 = media_urls.load_key(tmp_path)
    mode = stat.S_IMODE((tmp_path / media_urls.KEY_FILE).stat().st_mode)
    assert mode == 0o600 and len(k1) == 32
    assert media_urls.load_key(tmp_path) == k1
    os.chmod(tmp_path / media_urls.KEY_FILE, 0o644)  # loosened by someone: tightened again on use
    assert media_urls.load_key(tmp_path) == k1
    assert stat.S_IMODE((tmp_path / media_urls.KEY_FILE).stat().st_mode) == 0o600


def test_check_accepts_only_the_signed_clip_until_its_expiry():
    key, other = b"k" * 32, b"o" * 32
    url = media_urls.signed_url("http://head:7860/", key, 7, ttl=60, now=1000.0)
    assert url.startswith("http://head:7860/media/signed/7?exp=1060&sig=")
    sig = url.rsplit("sig=", 1)[1]
    assert media_urls.check(key, 7, "1060", sig, now=1000.0) is None
    assert media_urls.check(key, 7, "1060", sig, now=1061.0) == "expired"
    assert media_urls.check(key, 8, "1060", sig, now=1000.0) == "bad signature"  # another clip
    assert media_urls.check(key, 7, "1061", sig, now=1000.0) == "bad signature"  # a longer life
    assert media_urls.check(other, 7, "1060", sig, now=1000.0) == "bad signature"  # another key
    assert media_urls.check(key, 7, "1060", "0" * 64, now=1000.0) == "bad signature"
    assert media_urls.check(key, 7, "soon", sig, now=1000.0) == "malformed expiry"
    assert media_urls.check(key, 7, "1060", None, now=1000.0) == "malformed signature"
    far = int(1000 + media_urls.MAX_TTL_S + 10)
    assert media_urls.check(key, 7, far, media_urls.signature(key, 7, far), now=1000.0) == "expiry too far ahead"


def test_media_base_and_domains_follow_the_settings(settings):
    assert deployment.media_base(settings) == ""  # one machine: file://
    s = settings.replace(media_url_base="https://head.example:8443/")
    assert deployment.media_base(s) == "https://head.example:8443"
    assert media_urls.media_domains(s) == "head.example"
    assert media_urls.media_domains(s.replace(allowed_media_domains="A.example, b.example")) == "a.example,b.example"
    with pytest.raises(ValueError, match="cannot reach"):
        deployment.media_base(settings.replace(role="head"))
    assert deployment.media_base(settings.replace(role="head", host="10.0.0.9", port=7861)) == "http://10.0.0.9:7861"


# ---- the app's route and the rehearsal ------------------------------------------------------------------------
N_CLIPS = 8


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """The real app (auth on) over a library of tiny clips, a row pointing outside the root, and a symlink out."""
    from data.settings import Settings

    base = tmp_path_factory.mktemp("head")
    settings = Settings.load({"data_dir": str(base / "var"), "fleet_mode": "sim"}, environ={})
    db = dbmod.connect(settings.db)
    ids = tiny_library(settings, db, N_CLIPS)
    (base / "outside.mp4").write_bytes(tiny_clip())
    (settings.clip_root / "lib" / "link_out.mp4").symlink_to(base / "outside.mp4")
    with db.conn:
        db["clips"].insert_all([{"path": "../outside.mp4"}, {"path": "lib/link_out.mp4"}])
    escapes = [r["id"] for r in db.query("SELECT id FROM clips WHERE path IN ('../outside.mp4', 'lib/link_out.mp4')")]
    db.close()
    with AppServer(settings, fleet_urls=[]) as app:
        yield {
            "app": app,
            "settings": app.settings,
            "ids": ids,
            "escapes": escapes,
            "key": media_urls.load_key(settings.data_dir),
        }


def test_signed_route_serves_the_clip_and_refuses_expired_forged_and_escaping(head):
    app, key, cid = head["app"], head["key"], head["ids"][0]
    want = (head["settings"].clip_root / "lib" / "00000.mp4").read_bytes()
    with httpx.Client(base_url=app.url, timeout=10) as c:  # anonymous: the signature is the credential
        assert c.get(f"/media/{cid}").status_code == 401  # the plain route still needs a login
        good = media_urls.signed_url(app.url, key, cid, ttl=60)
        r = c.get(good)
        assert r.status_code == 200 and r.content == want
        r = c.get(good, headers={"Range": "bytes=0-99"})
        assert r.status_code == 206 and r.content == want[:100]
        expired = media_urls.signed_url(app.url, key, cid, ttl=60, now=time.time() - 120)
        r = c.get(expired)
        assert r.status_code == 403 and "expired" in r.text and not r.content.startswith(want[:16])
        forged = good[:-6] + ("000000" if not good.endswith("000000") else "111111")
        assert c.get(forged).status_code == 403
        assert c.get(media_urls.signed_url(app.url, b"x" * 32, cid, ttl=60)).status_code == 403  # other key
        other = good.replace(f"/signed/{cid}?", f"/signed/{head['ids'][1]}?")  # a signature moved to another clip
        assert c.get(other).status_code == 403
        assert c.get(f"{media_urls.ROUTE}/{cid}").status_code == 403  # no signature at all
        for bad in head["escapes"]:  # validly signed, but the stored path leaves the clip root
            r = c.get(media_urls.signed_url(app.url, key, bad, ttl=60))
            assert r.status_code == 404 and len(r.content) < 100
        assert c.get(media_urls.signed_url(app.url, key, 10**9, ttl=60)).status_code == 404


def test_two_nodes_on_loopback_caption_a_job_over_signed_urls_only(head, tmp_path):
    app, settings = head["app"], head["settings"]
    empty = tmp_path / "no-local-media"  # what a GPU node gets: file:// reaches nothing
    empty.mkdir()
    nodes = [
        simfleet.start_fleet(2, 0, empty, host=h, speed=0.02, allowed_media_domains="127.0.0.1")
        for h in ("127.0.0.2", "127.0.0.3")
    ]
    try:
        workers = [u for n in nodes for u in n.urls]
        assert {httpx.URL(u).host for u in workers} == {"127.0.0.2", "127.0.0.3"}
        # a replica cannot read the head's clip root through file://
        r = httpx.post(
            workers[0] + "/v1/chat/completions",
            timeout=10,
            json={
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "video_url", "video_url": {"url": f"file://{settings.clip_root}/lib/00000.mp4"}}
                        ],
                    }
                ]
            },
        )
        assert r.status_code == 400 and "allowed-local-media-path" in r.text
        # nor fetch from a host it was not allowed (the SSRF refusal stays)
        r = httpx.post(
            workers[0] + "/v1/chat/completions",
            timeout=10,
            json={
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "video_url", "video_url": {"url": "http://169.254.169.254/latest/meta-data"}}
                        ],
                    }
                ]
            },
        )
        assert r.status_code == 400 and "must be from one of the allowed domains" in r.text
        head_settings = settings.replace(media_url_base=app.url, media_url_ttl=120.0)
        db = dbmod.connect(settings.db)
        try:
            job_id = jobs.create(
                db,
                name="two nodes",
                created_by="test",
                selection=Selection.of_clips(head["ids"]),
                prompt_id=prompts.latest(db)["id"],
                params=JobParams(),
            )
        finally:
            db.close()
        with real_router(workers, tmp_path) as router:
            prog = runmod.run_job(head_settings, job_id, router, backoff_base=0.05)
        stats = [n.stats(i) for n in nodes for i in range(2)]
    finally:
        for n in nodes:
            n.stop()
    assert prog["state"] == "done", prog
    assert prog["counts"].get("done") == N_CLIPS, prog["counts"]
    fetched = [s["media_fetches"] for s in stats]
    assert sum(f["http"] for f in fetched) >= N_CLIPS and sum(f["file"] for f in fetched) == 0, fetched
    per_node = [sum(s["media_fetches"]["http"] for s in stats[:2]), sum(s["media_fetches"]["http"] for s in stats[2:])]
    assert all(n > 0 for n in per_node), per_node  # the router spread the job over both nodes
    db = dbmod.connect(settings.db)
    try:
        rows = list(
            db.query(
                "SELECT c.text FROM captions c JOIN job_items i ON i.clip_id = c.clip_id "
                "WHERE i.job_id = ? AND c.source = 'model'",
                [job_id],
            )
        )
    finally:
        db.close()
    assert len(rows) >= N_CLIPS and all("[SIMULATED]" in r["text"] for r in rows)
