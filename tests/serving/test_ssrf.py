"""S4: the fleet cannot be turned against the host.
- The launcher gives every replica `--allowed-local-media-path` = the clip root and nothing wider (dry run).
- The client refuses any clip path outside the root (URLs, `..`, absolute, encoded, symlinks out) before a
  request is sent: the replica counts 0 requests.
- The simulated fleet refuses the same probes sent to it directly (file URLs outside the root, cloud metadata
  and other http URLs not in --allowed-media-domains, other schemes): 4xx, never a caption.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import httpx
import pytest

from serving.client import clip_url, resolve_clip
from serving.errors import ClipRejected
from tests.support.fleet_fixtures import caption

PROBES = [
    "http://169.254.169.254/",
    "http://169.254.169.254/latest/meta-data/iam/",
    "file:///etc/passwd",
    "file://root/../x",
    "file://localhost/etc/passwd",
    "https://example.com/a.mp4",
    "gopher://127.0.0.1:6379/",
    "data:video/mp4;base64,AAAA",
    "../outside.mp4",
    "../../etc/passwd",
    "/etc/passwd",
    "many/../../outside.mp4",
    "%2e%2e/outside.mp4",
    "%252e%252e%252foutside.mp4",
    "..\\outside.mp4",
    "~/x.mp4",
    "C:/Windows/win.ini",
    "link_out.mp4",
    "a.mp4\x00.txt",
    "a.mp4\n",
    "",
    ".",
]


@pytest.mark.parametrize("path", PROBES, ids=[repr(p)[:40] for p in PROBES])
def test_client_refuses_paths_outside_the_root(fleet_settings, path):
    with pytest.raises(ClipRejected):
        resolve_clip(fleet_settings, path)
    with pytest.raises(ClipRejected):
        clip_url(fleet_settings, path)


def test_client_refusal_sends_nothing(fleet_settings, sim):
    for path in PROBES:
        with pytest.raises(ClipRejected):
            caption(fleet_settings, sim.urls[0], path)
    assert sim.stats(0)["chat_requests"] == 0
    # and a good clip still goes through the same path
    assert caption(fleet_settings, sim.urls[0], "a.mp4").text


FLEET_PROBES = [
    "http://169.254.169.254/latest/meta-data/",
    "http://127.0.0.1:1/x.mp4",
    "https://example.com/a.mp4",
    "file:///etc/passwd",
    "file://root/../x",
    "gopher://127.0.0.1:6379/_INFO",
    "ftp://127.0.0.1/a.mp4",
]


def test_simulated_fleet_refuses_probes(sim, clip_root):
    outside = clip_root.parent / "outside.mp4"
    probes = FLEET_PROBES + [
        f"file://{clip_root}/../outside.mp4",
        f"file://{outside}",
        f"file://{clip_root}/link_out.mp4",
    ]
    for url in probes:
        r = httpx.post(
            sim.urls[0] + "/v1/chat/completions",
            timeout=10,
            trust_env=False,
            json={
                "model": None,
                "max_completion_tokens": 64,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "describe"},
                            {"type": "video_url", "video_url": {"url": url}},
                        ],
                    }
                ],
            },
        )
        assert 400 <= r.status_code < 500, (url, r.status_code, r.text[:200])
        assert "choices" not in r.json()
    ok = httpx.post(
        sim.urls[0] + "/v1/chat/completions",
        timeout=10,
        trust_env=False,
        json={
            "max_completion_tokens": 64,
            "messages": [
                {"role": "user", "content": [{"type": "video_url", "video_url": {"url": f"file://{clip_root}/a.mp4"}}]}
            ],
        },
    )
    assert ok.status_code == 200


def test_launcher_gives_replicas_only_the_clip_root(tmp_path):
    root = tmp_path / "clips"
    root.mkdir()
    for fleet in ("gpu", "sim"):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "serving.launcher",
                "up",
                "--fleet-mode",
                fleet,
                "--gpus",
                "0,1",
                "--dry-run",
                "--vllm-version",
                "0.33.0",
                "--data-dir",
                str(tmp_path / "var"),
                "--clip-root",
                str(root),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        lines = [ln for ln in out.stdout.splitlines() if "vllm" in ln and " serve " in ln or "simfleet" in ln]
        assert lines, out.stdout
        for ln in lines:
            args = shlex.split(ln.split("> ")[0])
            paths = [args[i + 1] for i, a in enumerate(args) if a == "--allowed-local-media-path"]
            assert paths == [str(root.resolve())], (fleet, ln)
            assert not any(a.startswith("--allowed-media-domains") for a in args)
            assert "--host" not in args or args[args.index("--host") + 1] == "127.0.0.1", ln
