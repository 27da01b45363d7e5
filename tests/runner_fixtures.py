"""Helpers for the runner's tests: clip rows without video files, and a fake fleet client at the HTTP
boundary (the only place fakes are allowed) for tests that are about the loop, not the protocol."""

from __future__ import annotations

import asyncio
import collections
import random

from data import prompts
from serving.client import CaptionResult
from serving.errors import ClipRejected, FleetError

LABELS = {"scenario_category": "normal_driving", "hazard_level": "none", "road_users": ["car"],
          "ego_maneuver": "going_straight", "weather": "clear", "lighting": "daylight", "road_type": "urban"}


def add_clips(db, n: int, *, prefix: str = "clip", probe_errors: dict[int, str] | None = None) -> list[int]:
    """Insert `n` clip rows (paths only; the fake client never opens them). Returns their ids."""
    probe_errors = probe_errors or {}
    rows = [{"path": f"{prefix}/{i:05d}.mp4", "size": 1000, "duration": 5.0, "width": 1280, "height": 720,
             "frames": 150, "probe_error": probe_errors.get(i)} for i in range(n)]
    with db.conn:
        db["clips"].insert_all(rows)
    return [r["id"] for r in db.query("SELECT id FROM clips WHERE path LIKE ? ORDER BY id", [prefix + "/%"])]


def default_prompt(db) -> dict:
    return prompts.latest(db)


class FakeClient:
    """Answers caption requests after `latency` seconds; `script(url, req, n)` may raise a FleetError.

    Records every request (replica, clip path) and the peak number in flight per replica."""

    def __init__(self, latency: float = 0.0, script=None, seed: int = 0):
        self.latency = latency
        self.script = script
        self.calls: list[tuple[str, str]] = []
        self.per_clip = collections.Counter()
        self.inflight = collections.Counter()
        self.peak = collections.Counter()
        self.rng = random.Random(seed)
        self.closed = False

    async def caption(self, url, req):
        self.calls.append((url, req.clip_path))
        self.per_clip[req.clip_path] += 1
        self.inflight[url] += 1
        self.peak[url] = max(self.peak[url], self.inflight[url])
        try:
            if self.latency:
                await asyncio.sleep(self.latency * (0.5 + self.rng.random()))
            if self.script is not None:
                self.script(url, req, self.per_clip[req.clip_path])
            return CaptionResult(
                text=f"caption of {req.clip_path}", labels=dict(LABELS),
                provenance={"model": "fake-simulated", "prompt_id": req.prompt["id"],
                            "prompt_name": req.prompt["name"], "prompt_version": req.prompt["version"],
                            "params": {"max_completion_tokens": req.max_tokens}, "frames": req.frames,
                            "replica": url, "decode_backend": "none", "latency_ms": 1.0, "prompt_tokens": 10,
                            "completion_tokens": 20, "finish_reason": "stop", "simulated": True})
        finally:
            self.inflight[url] -= 1

    async def aclose(self):
        self.closed = True


__all__ = ["add_clips", "default_prompt", "FakeClient", "LABELS", "ClipRejected", "FleetError"]
