"""Issue 21, class 2: every read from a fleet is bounded by decompressed size as it streams, by time, and by
fan-out. A hostile fleet on loopback (tests/support/hostile_fleet.py) answers with compression bombs, endless
bodies, trickles, huge labels and a router listing 300 workers; the runner's client and the Fleet tab read it.

Memory is measured with tracemalloc (Python allocations of this process: the decoded bytes live there), so the
figure does not depend on what else the machine runs. The benchmark with process RSS before/after is
benchmarks/bench_hostile_fleet.py.
"""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc

import httpx
import pytest

from data import limits
from serving import bounded
from serving.client import CaptionRequest, FleetClient
from serving.errors import ReplicaError
from serving.fleet import health
from serving.fleet.reader import FleetReader
from tests.support.fleet_fixtures import PROMPT
from tests.support.hostile_fleet import HostileFleet, bomb
from tests.support.reliability_fixtures import GradioSession, dependencies
from tests.support.webapp_fixtures import AppServer, add_users, build_library
from webapp.fleet import tab as fleet_tab

MiB = 1 << 20


def _peak(fn):
    """(fn(), the peak of Python allocations while it ran, in bytes)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_a_compression_bomb_is_refused_after_about_the_limit_decoded(encoding):
    data = bomb(encoding, 64)  # 64 MiB once decoded, a few KiB on the wire

    def read():
        reader = bounded.Reader({"content-encoding": encoding}, MiB)
        with pytest.raises(bounded.Oversized, match="longer than 1,048,576 bytes"):
            for i in range(0, len(data), 65536):  # the network's chunks
                reader.add(data[i : i + 65536])
            reader.finish()
        return reader.size

    size, peak = _peak(read)
    print(f"{encoding} bomb of 64 MiB: refused after {size:,} decoded bytes, peak {peak / MiB:.1f} MiB")
    assert size <= MiB + 65536 + 1
    assert peak < 4 * MiB  # httpx decodes each chunk whole: ~64 MiB for this one


@pytest.mark.parametrize(
    "headers",
    [{"content-encoding": "zstd"}, {"content-encoding": "gzip, gzip"}, {"content-encoding": "compress"}],
)
def test_an_encoding_that_cannot_be_bounded_is_refused(headers):
    with pytest.raises(bounded.BadEncoding):
        bounded.Reader(headers, MiB)


def test_valid_compressed_answers_still_decode():
    import gzip
    import zlib

    import brotli

    text = json.dumps({"caption": "a car " * 2000}).encode()
    for enc, data in {
        "gzip": gzip.compress(text),
        "gzip-members": gzip.compress(text[:500]) + gzip.compress(text[500:]),
        "deflate": zlib.compress(text),
        "br": brotli.compress(text),
    }.items():
        reader = bounded.Reader({"content-encoding": enc.split("-")[0]}, MiB)
        for i in range(0, len(data), 100):
            reader.add(data[i : i + 100])
        assert reader.finish() == text, enc
    raw = zlib.compressobj(wbits=-15)
    reader = bounded.Reader({"content-encoding": "deflate"}, MiB)  # raw deflate, as some servers send it
    reader.add(raw.compress(text) + raw.flush())
    assert reader.finish() == text


@pytest.mark.parametrize("encoding", ["gzip", "br"])
def test_the_runner_client_refuses_a_compressed_bomb_answer_without_holding_it(fleet_settings, encoding):
    with HostileFleet(encoding, bomb_mib=256) as hf:

        async def go():
            async with FleetClient(fleet_settings) as client:
                results = await asyncio.gather(
                    *(client.caption(hf.url, CaptionRequest("a.mp4", PROMPT)) for _ in range(3)),
                    return_exceptions=True,
                )
            return results

        results, peak = _peak(lambda: asyncio.run(go()))
    print(f"runner client, 3 {encoding} bombs of 256 MiB at once: peak {peak / MiB:.1f} MiB of Python allocations")
    for r in results:
        assert isinstance(r, ReplicaError) and r.kind == "oversized", r
    assert peak < 3 * limits.MAX_ANSWER_BYTES + 16 * MiB  # before: ~256 MiB per answer


@pytest.fixture
def reader(settings):
    return FleetReader(settings)


def test_the_fleet_tab_calls_at_most_max_scraped_of_300_workers(reader):
    with HostileFleet("ok", workers=300) as hf:
        t = time.monotonic()
        rows, router = fleet_tab.snapshot(reader, [hf.url])
        took = time.monotonic() - t
        called = len(hf.called())
    print(f"router with 300 workers: {called} workers called, {len(rows)} rows, {took:.2f} s")
    assert called <= health.MAX_SCRAPED  # before: 300 on every refresh
    assert len(rows) == health.MAX_SCRAPED and all(r["healthy"] for r in rows)
    assert router["listed"] == 300 and router["total_workers"] == 300
    assert len(router["workers"]) <= health.MAX_LISTED_WORKERS


@pytest.mark.parametrize("mode", ["gzip", "br", "huge"])
def test_the_fleet_tab_reads_hostile_metrics_within_a_bounded_memory(mode, reader):
    with HostileFleet(mode, workers=40, bomb_mib=64, huge_mib=400) as hf:
        (rows, router), peak = _peak(lambda: fleet_tab.snapshot(reader, [hf.url]))
        time.sleep(0.5)  # the server notices the closed connections
        sent = hf.sent()
    print(f"Fleet tab, 40 workers answering {mode}: peak {peak / MiB:.1f} MiB, {sent / MiB:.1f} MiB sent to the app")
    assert len(rows) == health.MAX_SCRAPED
    for r in rows:
        # refused past the size bound (or, on a loaded machine, the time bound)
        assert "longer than" in (r["error"] or "") or "no complete answer" in (r["error"] or ""), r["error"]
    bound = health.SCRAPE_CONCURRENCY * health.MAX_METRICS_BYTES
    assert peak < bound + 32 * MiB  # before: 64-400 MiB per replica, 40 replicas at once


def test_a_trickling_fleet_cannot_hold_a_refresh_past_its_deadline(reader):
    with HostileFleet("trickle", workers=3) as hf:
        t = time.monotonic()
        rows, _ = fleet_tab.snapshot(reader, [hf.url], timeout=1.0)
        took = time.monotonic() - t
    print(f"trickling /metrics: refresh took {took:.2f} s")
    assert took < health.REFRESH_ROUNDS * 1.0 + 5.0  # before: for ever (a byte every 0.2 s)
    assert all("no complete answer within" in (r["error"] or "") for r in rows), [r["error"] for r in rows]


def test_the_sync_helpers_are_bounded_too(reader):
    with HostileFleet("gzip", bomb_mib=64) as hf:
        st, peak = _peak(lambda: reader.scrape(hf.url))
        assert "longer than" in st.error and peak < 2 * health.MAX_METRICS_BYTES + 8 * MiB
        with httpx.Client(trust_env=False) as c:
            with pytest.raises(bounded.Oversized):
                bounded.fetch_sync(c, "GET", hf.url + "/metrics", max_bytes=MiB, seconds=5)


def test_a_fleet_tab_refresh_sends_a_bounded_page_to_the_browser(tmp_path):
    from data.settings import Settings

    s = Settings.load({"data_dir": str(tmp_path / "var"), "fleet_mode": "sim"}, environ={})
    build_library(s, n=2)
    add_users(s)
    with HostileFleet("labels", workers=40, label_kib=1024) as hf, AppServer(s, fleet_urls=[hf.url]) as srv:
        c = srv.client("ann")
        cookie = c.cookies["cw_session"]
        session = GradioSession(srv.url, cookie, dependencies(srv.url, cookie))
        try:
            dep = session.deps["fleet_refresh"]
            join = {"data": [], "fn_index": dep["id"], "session_hash": session.hash, "trigger_id": None}
            assert session.http.post("/gradio_api/queue/join", json=join).status_code == 200
            with session.http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session.hash}) as r:
                body = b""
                for line in r.iter_lines():  # the whole stream the browser reads, up to the answer
                    body += line.encode() + b"\n"
                    if "process_completed" in line:
                        break
        finally:
            session.close()
            c.close()
    print(f"Fleet tab refresh, 40 replicas naming a 1 MiB model: {len(body) / 1024:.0f} KiB to the browser")
    assert b'"success":true' in body.replace(b" ", b"")
    assert len(body) < 512 * 1024  # before: the 1 MiB name once per replica (40 MiB)
