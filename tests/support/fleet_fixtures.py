"""Fixtures for the fleet client, simulated fleet and fleet metrics tests: tiny real clips made with PyAV,
a clip root, a simulated fleet on loopback (ephemeral ports, stopped in teardown), the default prompt."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from data import examples
from data.job_params import JobParams
from data.library import clipgen
from serving import simfleet
from serving.client import CaptionRequest, FleetClient

PROMPT = examples.PROMPT


def write_clip(path: Path, w: int = 160, h: int = 90, seconds: float = 1.0, fps: int = 10) -> Path:
    """A tiny H.264 MP4 (a gray level that changes every frame)."""
    return clipgen.tiny_clip(path, width=w, height=h, frames=int(seconds * fps), fps=fps, step=23)


@pytest.fixture(scope="session")
def clip_root(tmp_path_factory):
    """A clip root with good clips, a corrupt one, and a file outside the root next to it."""
    base = tmp_path_factory.mktemp("fleet")
    root = base / "clips"
    write_clip(root / "a.mp4")
    write_clip(root / "day" / "b c.mp4", 320, 180)
    for i in range(6):
        write_clip(root / "many" / f"{i:02d}.mp4")
    (root / "corrupt.mp4").write_bytes(b"<!DOCTYPE html><html>not a video</html>")
    write_clip(base / "outside.mp4")
    (root / "link_out.mp4").symlink_to(base / "outside.mp4")
    (root / "link_in.mp4").symlink_to(root / "a.mp4")
    return root


@pytest.fixture
def fleet_settings(settings, clip_root):
    return settings.replace(clip_root=clip_root, request_timeout=10.0)


@pytest.fixture
def sim(clip_root):
    """Two simulated replicas (thread mode, zero latency) for one test."""
    handle = simfleet.start_fleet(2, 0, clip_root, mode="thread", speed=0)
    yield handle
    handle.stop()


def caption(settings, url: str, clip: str, **kw):
    """Run one FleetClient.caption to completion (the client lives on this call's event loop). Keywords: the
    client's (transport, ...), the job's parameters (frames, max_tokens, ...), the request's (prompt, camera)."""
    ctor = {k: kw.pop(k) for k in ("transport", "media_base_url", "decode_backend") if k in kw}
    kw["params"] = JobParams(**{f.name: kw.pop(f.name) for f in dataclasses.fields(JobParams) if f.name in kw})

    async def go():
        client = FleetClient(settings, **ctor)
        try:
            return await client.caption(url, CaptionRequest(clip, kw.pop("prompt", PROMPT), **kw))
        finally:
            await client.aclose()

    return asyncio.run(go())
