"""Fixtures for the web app tests: a small generated clip library, users of each role, and the app served by
uvicorn in a thread on a free loopback port."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import httpx
import numpy as np
import pytest
from PIL import Image

from data import captions, db as dbmod, taxonomy, users
from data.library import clipgen
from data.settings import Settings
from serving.procs import free_port

PASSWORD = "correct horse battery"
ROLES = {"ann": "annotator", "ann2": "annotator", "lead": "lead", "admin": "admin"}


def write_clip(path: Path, *, seconds: float = 2.0, fps: int = 10, w: int = 320, h: int = 180, seed: int = 0) -> None:
    """A small H.264 MP4 (moov first so the player can start before the whole file arrives)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    base = rng.integers(40, 200, size=3)

    def frames():
        for i in range(int(seconds * fps)):
            img = np.zeros((h, w, 3), np.uint8)
            img[:] = base
            img[h // 2 :, :] = (60, 60, 60)
            x = (i * 7) % (w - 40)
            img[h // 2 - 20 : h // 2 + 10, x : x + 40] = (200, 30, 30)
            yield img

    clipgen.encode(
        path,
        frames(),
        width=w,
        height=h,
        rate=fps,
        container_options={"movflags": "+faststart"},
        options={"preset": "ultrafast", "g": str(fps)},
    )


def write_image(path: Path, *, w: int = 320, h: int = 180, color=(90, 120, 160)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (w, h), color).save(path, "JPEG", quality=70)


LABELS = {
    "scenario_category": "pedestrian_crossing",
    "hazard_level": "medium",
    "road_users": ["car", "pedestrian"],
    "ego_maneuver": "slowing",
    "weather": "clear",
    "lighting": "daylight",
    "road_type": "urban",
}


def machine_provenance(**extra) -> dict:
    return {
        "model": "sim/Qwen3-VL-8B-simulated",
        "prompt_id": None,
        "prompt_name": "av-hazard",
        "prompt_version": 1,
        "params": {"frames": 16, "max_tokens": 320},
        "frames": 16,
        "replica": "http://127.0.0.1:8000",
        "decode_backend": "pynvvideocodec",
        "latency_ms": 812.0,
        "prompt_tokens": 3100,
        "completion_tokens": 150,
        "finish_reason": "stop",
        "simulated": True,
        **extra,
    }


@dataclass
class Library:
    settings: Settings
    clip_ids: list[int]
    video_file: Path  # one real clip, to compare bytes


def build_library(settings: Settings, n: int = 24) -> Library:
    """n clip rows sharing a few real files; thumbnails and filmstrips in the media dir; a mix of captions,
    one ingest failure and one HEVC row."""
    root, media = settings.clip_root, settings.media_dir
    video = root / "drive" / "clip_000.mp4"
    write_clip(video)
    write_image(media / "thumbs" / "t0.jpg")
    (media / "previews").mkdir(parents=True, exist_ok=True)
    (media / "previews" / "p6.mp4").write_bytes(video.read_bytes())
    write_image(media / "filmstrips" / "f0.jpg", w=960, h=60, color=(140, 90, 60))
    db = dbmod.connect(settings.db)
    rows = []
    for i in range(n):
        rel = f"drive/clip_{i:03d}.mp4"
        if i:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(video.read_bytes())
        rows.append(
            {
                "path": rel,
                "size": video.stat().st_size,
                "duration": 2.0,
                "fps": 10.0,
                "frames": 20,
                "width": 320,
                "height": 180,
                "codec": "hevc" if i in (5, 6) else "h264",
                # clip 6: an HEVC clip with its H.264 preview (data.library.media.make_preview writes those)
                "preview": "previews/p6.mp4" if i == 6 else None,
                "probe_error": "truncated: moov box missing" if i == 7 else None,
                "thumbnail": "thumbs/t0.jpg",
                "filmstrip": "filmstrips/f0.jpg",
                "sidecar": '{"camera": "front_center"}',
                "ingested_at": time.time(),
            }
        )
    db["clips"].insert_all(rows)
    ids = [r["id"] for r in db.query("SELECT id FROM clips ORDER BY id")]
    weathers = ["clear", "rain", "fog", "snow"]
    for k, cid in enumerate(ids):
        if k in (7, 8, 9):
            continue  # failed and two uncaptioned
        labels = {
            **LABELS,
            "weather": weathers[k % 4],
            "hazard_level": taxonomy.HAZARD_LEVELS[k % len(taxonomy.HAZARD_LEVELS)],
        }
        captions.add_machine(
            db,
            cid,
            job_id=None,
            text=f"The ego vehicle drives through clip {k}: a pedestrian "
            f"waits at the kerb while a {'bus' if k % 3 else 'cyclist'} passes.",
            labels=labels,
            provenance=machine_provenance(),
        )
    db.close()
    return Library(settings, ids, video)


def add_users(settings: Settings) -> dict[str, str]:
    db = dbmod.connect(settings.db)
    for name, role in ROLES.items():
        if users.get(db, name) is None:
            users.create(db, name, role=role, password=PASSWORD)
    db.close()
    return dict(ROLES)


class AppServer:
    """uvicorn serving build_app(settings) in a thread, on 127.0.0.1:free port."""

    def __init__(self, settings: Settings, *, fleet_urls: Iterable[str] | None = None):
        import uvicorn

        from webapp.app import build_app

        self.port = free_port()
        self.settings = settings.replace(port=self.port)
        if fleet_urls is not None:  # the fleet the app watches (the FLEET_URLS setting)
            self.settings = self.settings.replace(fleet_urls=tuple(fleet_urls))
        self.app = build_app(self.settings)
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", ws="none")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "AppServer":
        self.thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not self.thread.is_alive():
                raise RuntimeError("the app server thread died while starting")
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(self.url + "/login", timeout=1)
                return self
            time.sleep(0.1)
        raise RuntimeError("the app did not start within 30 s")

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.app.state.ctx.close()

    def client(self, user: str | None = None) -> httpx.Client:
        """An httpx client, logged in as `user` (anonymous if None)."""
        c = httpx.Client(base_url=self.url, timeout=30, follow_redirects=False)
        if user:
            r = c.post("/login", data={"username": user, "password": PASSWORD, "next": "/"})
            assert r.status_code == 303, r.text
        return c


@pytest.fixture(scope="module")
def web_settings(tmp_path_factory) -> Settings:
    d = tmp_path_factory.mktemp("webapp")
    return Settings.load({"data_dir": str(d / "var"), "fleet_mode": "sim"}, environ={})


@pytest.fixture(scope="module")
def library(web_settings) -> Library:
    lib = build_library(web_settings)
    add_users(web_settings)
    return lib


@pytest.fixture(scope="module")
def server(web_settings, library):
    with AppServer(web_settings, fleet_urls=[]) as s:
        yield s
