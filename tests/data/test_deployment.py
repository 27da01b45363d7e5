"""Issue 23: a head remembers it is a head. The library records its role, media base and TTL (data.deployment), so
every runner on it -- the README's terminal command with only --data-dir and --fleet-urls, a script building a
Runner, a resumed job -- sends signed URLs of the head's app, and a flag that says otherwise is refused with the
command that changes the record. Two runners on one job share it: each clip is sent by one of them, written once.

The nodes are simulated replicas on 127.0.0.2 that can fetch only over http from the app (an empty
--allowed-local-media-path, --allowed-media-domains 127.0.0.1) and require the head's fleet key."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from data import db as dbmod, jobs, prompts
from data.errors import DeploymentMismatch
from data.job_params import JobParams
from data.jobs.selection import Selection
from data.library import clip_root, deployment
from data.library.clipgen import tiny_library
from data.settings import Settings
from serving import fleet_key, media_urls, simfleet
from serving.runner import Runner
from tests.support.webapp_fixtures import AppServer

ROOT = Path(__file__).resolve().parents[2]
N_CLIPS = 12


def plain_env(**extra: str) -> dict[str, str]:
    """A terminal on the head: none of the CW_ variables a launch exports (but `extra`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CW_")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def run(*args: str, timeout: float = 180, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env or plain_env(), cwd=ROOT, timeout=timeout
    )


def counts(settings: Settings, job_id: int) -> dict:
    from data.jobs import queries as job_queries

    d = dbmod.connect(settings.db)
    try:
        return {"job": job_queries.get(d, job_id), "counts": job_queries.counts(d, job_id)}
    finally:
        d.close()


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A library with the real app serving it (auth on), recorded as a head whose nodes fetch from that app."""
    base = tmp_path_factory.mktemp("head")
    settings = Settings.load({"data_dir": str(base / "var")}, environ={})
    db = dbmod.connect(settings.db)
    ids = tiny_library(settings, db, N_CLIPS)
    db.close()
    with AppServer(settings, fleet_urls=[]) as app:
        db = dbmod.connect(settings.db)
        try:
            rec = deployment.record_head(db, settings.replace(role="head", media_url_base=app.url, media_url_ttl=120))
        finally:
            db.close()
        yield {
            "settings": settings,
            "app": app,
            "ids": ids,
            "record": rec,
            "key": fleet_key.load(settings, create=True),
        }


@pytest.fixture
def node(head, tmp_path):
    """A GPU node's replicas: http from the app only, the head's key required."""
    empty = tmp_path / "no-local-media"
    empty.mkdir()
    handle = simfleet.start_fleet(
        2, 0, empty, host="127.0.0.2", speed=0.02, allowed_media_domains="127.0.0.1", api_key=head["key"]
    )
    yield handle
    handle.stop()


def new_job(settings: Settings, ids: list[int], name: str) -> int:
    d = dbmod.connect(settings.db)
    try:
        return jobs.create(
            d,
            name=name,
            created_by="lead",
            selection=Selection.of_clips(ids),
            prompt_id=prompts.latest(d)["id"],
            params=JobParams(),
        )
    finally:
        d.close()


def test_the_record_is_what_a_head_launch_wrote_and_plain_settings_pick_it_up(head):
    settings, app = head["settings"], head["app"]
    assert head["record"] == {"role": "head", "media_url_base": app.url, "media_url_ttl": 120.0}
    plain = Settings.load({"data_dir": str(settings.data_dir)}, environ={})  # no role, no base, no TTL given
    assert (plain.role, plain.media_url_base) == ("all", "")
    got = clip_root.settings_for_path(plain)
    assert (got.role, got.media_url_base, got.media_url_ttl) == ("head", app.url, 120.0)
    # a script building a Runner from plain settings sends signed URLs of the recorded base, valid 120 s
    from serving.runner.store import JobConfig

    runner = Runner(plain, "http://127.0.0.2:1")
    try:
        item = {"path": "lib/00000.mp4", "clip_id": head["ids"][0], "job_id": 1, "sidecar": None}
        req = runner._request(JobConfig(prompts.PRESETS[-1], JobParams()), item)
    finally:
        runner._db.close()
    assert req.media_url.startswith(f"{app.url}{media_urls.ROUTE}/{head['ids'][0]}?exp=")
    exp = int(req.media_url.split("exp=")[1].split("&")[0])
    assert 100 < exp - time.time() <= 121


def test_the_readme_command_on_a_head_sends_signed_urls_with_no_flag_to_remember(head, node):
    """`python -m serving.caption --data-dir DIR --fleet-urls URL --has-caption no`, from a shell without any CW_
    variable: every clip captioned, every one fetched over http from the app, none as file://."""
    settings = head["settings"]
    r = run(
        "-m",
        "serving.caption",
        "--data-dir",
        str(settings.data_dir),
        "--fleet-urls",
        ",".join(node.urls),
        "--has-caption",
        "no",
        "--no-progress",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{N_CLIPS} captioned, 0 failed" in r.stderr, r.stderr[-2000:]
    fetched = [node.stats(i)["media_fetches"] for i in range(2)]
    assert sum(f["http"] for f in fetched) >= N_CLIPS and sum(f["file"] for f in fetched) == 0, fetched


def test_a_flag_that_contradicts_the_record_is_refused_with_the_command_that_changes_it(head):
    settings, app = head["settings"], head["app"]
    for given, named in (
        ({"media_url_base": "http://10.9.9.9:7860"}, "--media-url-base http://10.9.9.9:7860"),
        ({"media_url_ttl": 60}, "--media-url-ttl 60"),
    ):
        s = Settings.load({"data_dir": str(settings.data_dir), **given}, environ={})
        with pytest.raises(DeploymentMismatch) as e:
            clip_root.settings_for_path(s)
        assert named in str(e.value) and "python -m data.deployment set --role head" in str(e.value)
        assert app.url in str(e.value)  # what the record says
    # the terminal command says the same, exit 2, before it creates any job
    r = run("-m", "serving.caption", "--data-dir", str(settings.data_dir), "--media-url-base", "http://10.9.9.9:1")
    assert r.returncode == 2 and "python -m data.deployment set" in r.stderr, r.stderr
    # the value the record holds is no contradiction
    same = Settings.load({"data_dir": str(settings.data_dir), "media_url_base": app.url + "/"}, environ={})
    assert clip_root.settings_for_path(same).media_url_base == app.url


def test_the_record_is_shown_and_changed_from_the_command_line(tmp_path):
    data = str(tmp_path / "var")
    r = run("-m", "data.deployment", "show", "--data-dir", data)
    assert r.returncode == 0 and "nothing recorded: a single machine" in r.stdout
    s = Settings.load({"data_dir": data}, environ={})
    db = dbmod.connect(s.db)
    try:
        deployment.record_head(db, s.replace(role="head", host="10.0.0.1", port=7860))
        deployment.record_head(db, s.replace(role="head", host="10.0.0.1", port=7860))  # the same head: a no-op
        with pytest.raises(DeploymentMismatch, match="set --role head --media-url-base http://10.0.0.2:7860"):
            deployment.record_head(db, s.replace(role="head", host="10.0.0.2", port=7860))  # the head moved
        with pytest.raises(ValueError, match="cannot reach"):
            deployment.record_head(db, s.replace(role="head"))  # an app on 127.0.0.1: no node could fetch
    finally:
        db.close()
    r = run(
        "-m", "data.deployment", "set", "--role", "head", "--media-url-base", "http://10.0.0.2:7860", "--data-dir", data
    )
    assert r.returncode == 0 and "http://10.0.0.2:7860" in r.stdout, r.stderr
    db = dbmod.connect(s.db)
    try:
        assert deployment.record_head(db, s.replace(role="head", host="10.0.0.2", port=7860))["media_url_base"] == (
            "http://10.0.0.2:7860"
        )
        rows = [e["action"] for e in db.query("SELECT action FROM events WHERE action LIKE 'deployment.%'")]
        assert rows == ["deployment.record", "deployment.set"]
    finally:
        db.close()
    # a single machine again: file:// URLs, and a head flag is now the contradiction
    assert run("-m", "data.deployment", "set", "--role", "all", "--data-dir", data).returncode == 0
    assert clip_root.settings_for_path(s).role == "all"
    r = run("-m", "data.deployment", "env", "--data-dir", data, env=plain_env(CW_ROLE="head"))  # as launch.sh runs it
    assert r.returncode == 2 and "python -m data.deployment set --role head" in r.stderr, r.stderr
    r = run("-m", "data.deployment", "env", "--data-dir", data)
    assert r.returncode == 0 and r.stdout.strip() == "export CW_ROLE=all"
    r = run("-m", "data.deployment", "set", "--role", "head", "--data-dir", data)
    assert r.returncode == 2 and "needs --media-url-base" in r.stderr


def _supervised(settings: Settings, fleet_url: str, log: Path) -> subprocess.Popen:
    """The head's supervised runner, sending to `fleet_url` (the launcher's fleet), its log in `log`."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "serving.runner",
            "--data-dir",
            str(settings.data_dir),
            "--fleet-urls",
            fleet_url,
            "--replicas",
            "1",
            "--per-replica-inflight",
            "2",
        ],
        env=plain_env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen, log: Path) -> dict:
    """SIGTERM the runner; what it did (its last words: the final info as JSON)."""
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(30)
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("{")]
    import json

    return json.loads(lines[-1]) if lines else {}


def _caption_cli(settings: Settings, fleet_url: str, name: str, *extra: str) -> subprocess.CompletedProcess:
    return run(
        "-m",
        "serving.caption",
        "--data-dir",
        str(settings.data_dir),
        "--fleet-urls",
        fleet_url,
        "--replicas",
        "1",
        "--per-replica-inflight",
        "2",
        "--no-progress",
        "--name",
        name,
        *extra,
        timeout=240,
    )


def _node(head, tmp_path: Path):
    empty = tmp_path / "no-local-media"
    empty.mkdir(exist_ok=True)
    # ~0.3 s a request, 2 at a time per runner: both runners are busy at once
    kw = dict(host="127.0.0.2", speed=1.0, slow=0.3, allowed_media_domains="127.0.0.1", api_key=head["key"])
    return simfleet.start_fleet(1, 0, empty, **kw)


def test_two_runners_share_one_job_each_clip_sent_by_one_and_written_once(head, tmp_path):
    """The head's supervised runner and the terminal command on one job of the fleet both send to: allowed on
    purpose. Items are claimed with leases in SQLite, so each clip goes to one runner, and the leases other runners
    hold count against a runner's in-flight bound, so that the replicas never get both runners' bounds at once,
    and each gets a share of it; every request goes with a signed URL (the record)."""
    settings = head["settings"]
    node = _node(head, tmp_path)
    log = tmp_path / "supervised.log"
    supervised = _supervised(settings, node.urls[0], log)
    try:
        r = _caption_cli(settings, node.urls[0], "shared")
        assert r.returncode == 0, r.stderr[-3000:]
        assert supervised.poll() is None, "the supervised runner died"
        sent = node.stats(0)
    finally:
        did = _stop(supervised, log)
        node.stop()
    d = dbmod.connect(settings.db)
    try:
        job_id = next(d.query("SELECT id FROM jobs WHERE name = 'shared'"))["id"]
        per_clip = list(
            d.query("SELECT clip_id, COUNT(*) AS n FROM captions WHERE job_id = ? GROUP BY clip_id", [job_id])
        )
    finally:
        d.close()
    c = counts(settings, job_id)
    assert c["job"]["state"] == "done" and c["counts"]["done"] == N_CLIPS and c["counts"]["failed"] == 0, c
    assert len(per_clip) == N_CLIPS and all(row["n"] == 1 for row in per_clip)  # written once each
    assert 0 < did.get("done", 0) < N_CLIPS, did  # both runners worked: the supervised one some, the command the rest
    # and together they kept the replica's in-flight bound of 2 (plus the one request a runner holding none may
    # send): each alone keeps 2, so both at once used to send 4, and a real replica died at twice its bound
    # (docs/gpu-runs/2026-12-03-h200)
    assert 1 <= sent["most_at_once"] <= 3, sent
    assert sent["media_fetches"]["http"] >= N_CLIPS and sent["media_fetches"]["file"] == 0


def test_a_terminal_job_runs_on_the_fleet_it_names_and_nowhere_else(head, tmp_path):
    """Issue 31, point 5: `serving.caption --fleet-urls X` made a job the supervised runner captioned on the
    launcher's fleet. A job records its fleet: the supervised runner (on another fleet) takes nothing of it, and a
    resume runs on the recorded fleet unless the command names another, which the job then moves to."""
    settings = head["settings"]
    named, launchers = _node(head, tmp_path), _node(head, tmp_path)
    log = tmp_path / "supervised.log"
    supervised = _supervised(settings, launchers.urls[0], log)
    try:
        r = _caption_cli(settings, named.urls[0], "named")
        assert r.returncode == 0, r.stderr[-3000:]
        assert supervised.poll() is None, "the supervised runner died"
        to_named, to_launchers = named.stats(0)["chat_requests"], launchers.stats(0)["chat_requests"]
        d = dbmod.connect(settings.db)
        try:
            job = next(d.query("SELECT id, fleet FROM jobs WHERE name = 'named'"))
            replicas = {row[0] for row in d.execute("SELECT replica FROM captions WHERE job_id = ?", [job["id"]])}
            # two more jobs for the named fleet, as the command makes them (one to resume, one to move)
            again, move = (
                jobs.create(
                    d,
                    name=name,
                    created_by="cli:lead",
                    selection=Selection.of_clips(head["ids"][:4]),
                    prompt_id=prompts.latest(d)["id"],
                    params=JobParams(),
                    fleet=jobs.fleet_of(named.urls),
                )
                for name in ("resume me", "move me")
            )
        finally:
            d.close()
        time.sleep(3)  # the supervised runner looks for work every 0.25 s: these are not its fleet's
        assert launchers.stats(0)["chat_requests"] == 0
        # resumed without --fleet-urls: on the fleet it was made for (the launcher's record names another)
        resumed = run("-m", "serving.caption", "--data-dir", str(settings.data_dir), "--resume", str(again))
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert launchers.stats(0)["chat_requests"] == 0 and counts(settings, again)["counts"]["done"] == 4
        # naming another fleet moves the job there, said on the terminal
        moved = _caption_cli(settings, launchers.urls[0], "moved", "--resume", str(move))
        assert moved.returncode == 0, moved.stderr[-3000:]
        assert f"it runs on {jobs.fleet_of(launchers.urls)} from now on" in moved.stderr, moved.stderr[-2000:]
        assert launchers.stats(0)["chat_requests"] >= 4 and counts(settings, move)["counts"]["done"] == 4
    finally:
        _stop(supervised, log)
        named.stop()
        launchers.stop()
    print(f"job for {named.urls[0]}: {to_named} requests there, {to_launchers} to the supervised runner's fleet")
    assert job["fleet"] == jobs.fleet_of(named.urls)
    assert to_launchers == 0 and to_named >= N_CLIPS  # before: the supervised runner took a share
    assert replicas == set(named.urls), replicas


def test_a_runner_with_another_key_is_refused_by_the_node_with_a_message(head, node, tmp_path):
    """The node requires the head's key: a library with another key gets vLLM's 401, each item failed once with a
    message naming the key (never retried: it is the same for every clip)."""
    other = Settings.load({"data_dir": str(tmp_path / "other")}, environ={})
    fleet_key.load(other, create=True)
    r = httpx.get(node.urls[0] + "/v1/models", headers=fleet_key.headers(other), timeout=10)
    assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}
    assert httpx.get(node.urls[0] + "/v1/models", headers=node.headers, timeout=10).status_code == 200
    assert httpx.get(node.urls[0] + "/health", timeout=10).status_code == 200  # as vLLM: only /v1 needs the key
    from serving.answers import classify_status

    err = classify_status(401, "Unauthorized", node.urls[0])
    assert not err.retryable and "python -m serving.fleet_key" in str(err)
