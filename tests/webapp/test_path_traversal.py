"""S1: no file outside the clip root (or the media dir) is served, whatever the path looks like.

Payloads go over a raw socket so that no client normalises `..` or decodes anything before the server sees it.
A canary file sits next to the clip root; its content must never appear in any response, anonymous or
logged in. Clip rows with hostile stored paths (.., absolute, symlink out) check the media routes' own
resolution.
"""

from __future__ import annotations

import socket
import uuid

import pytest

from data import db as dbmod
from webapp.routes.media import resolve_inside

CANARY = "CANARY-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def planted(web_settings, library):
    """The canary outside the roots, a symlink to it inside each root, and clip rows pointing out."""
    canary = web_settings.data_dir / "canary-secret.txt"
    canary.write_text(CANARY)
    (web_settings.clip_root / "drive" / "escape.mp4").symlink_to(canary)
    (web_settings.media_dir / "thumbs" / "escape.jpg").symlink_to(canary)
    (web_settings.clip_root / "linkdir").symlink_to(web_settings.data_dir)
    db = dbmod.connect(web_settings.db)
    hostile = [
        "drive/escape.mp4",
        "../canary-secret.txt",
        str(canary),
        "linkdir/canary-secret.txt",
        "drive/../../canary-secret.txt",
        "drive/clip_000.mp4\x00../../canary-secret.txt",
        "/etc/passwd",
        "..\\canary-secret.txt",
    ]
    rows = [
        {"path": p, "thumbnail": t, "filmstrip": t, "preview": t}
        for p, t in zip(
            hostile,
            [
                "thumbs/escape.jpg",
                "../canary-secret.txt",
                str(canary),
                "../../etc/passwd",
                "thumbs/../../canary-secret.txt",
                "/etc/passwd",
                "thumbs/escape.jpg",
                "..\\x",
            ],
        )
    ]
    db["clips"].insert_all(rows)
    ids = [r["id"] for r in db.query("SELECT id FROM clips WHERE path IN (%s)" % ",".join("?" * len(hostile)), hostile)]
    db.close()
    return canary, ids


def raw_get(port: int, target: str, cookie: str | None = None) -> tuple[int, bytes]:
    req = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
    if cookie:
        req += f"Cookie: cw_session={cookie}\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(req.encode("latin-1", "replace") + b"\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    return status, data


def payloads(canary: str, clip_root: str) -> list[str]:
    rel_up = [
        "../",
        "..%2f",
        "%2e%2e/",
        "%2e%2e%2f",
        "%252e%252e%252f",
        "..%5c",
        "..\\",
        "%c0%ae%c0%ae/",
        "..%c0%af",
        "....//",
        "..;/",
        "%2e%2e%5c",
        "..%252f",
        ".%2e/",
        "%u002e%u002e/",
    ]
    names = ["canary-secret.txt", "etc/passwd"]
    prefixes = [
        "/media/",
        "/media/1/",
        "/thumb/",
        "/filmstrip/",
        "/preview/",
        "/gradio_api/file=",
        "/file=",
        "/cw-static/",
        "/gradio_api/file/",
        "/static/",
        "/assets/",
    ]
    out = []
    for prefix in prefixes:
        for up in rel_up[:8] if prefix not in ("/media/", "/cw-static/") else rel_up:
            for depth in (1, 3):
                out.append(prefix + up * depth + names[0 if depth == 1 else 1])
        for absolute in (
            canary,
            "/etc/passwd",
            canary.replace("/", "%2f"),
            "%2fetc%2fpasswd",
            f"{clip_root}/../canary-secret.txt",
            canary + "%00.mp4",
            "file://" + canary,
        ):
            out.append(prefix + absolute)
    return out


@pytest.mark.parametrize("who", ["anonymous", "ann"])
def test_no_byte_outside_the_roots(server, planted, web_settings, who):
    canary, _ = planted
    cookie = server.client(who).cookies.get("cw_session") if who != "anonymous" else None
    sent = payloads(str(canary), str(web_settings.clip_root))
    assert len(sent) >= 200
    leaks = []
    for target in sent:
        status, body = raw_get(server.port, target, cookie)
        if CANARY.encode() in body or b"root:x:0:0" in body:
            leaks.append((target, status))
    assert leaks == []


def test_hostile_stored_paths_are_404(server, planted):
    _, ids = planted
    c = server.client("ann")
    assert len(ids) >= 6
    for cid in ids:
        for route in ("media", "thumb", "filmstrip", "preview"):
            r = c.get(f"/{route}/{cid}")
            assert CANARY not in r.text and "root:x:0:0" not in r.text
            if route != "thumb":
                assert r.status_code == 404, (route, cid, r.status_code)
            else:  # a refused thumbnail falls back to the placeholder image
                assert r.headers["content-type"].startswith("image/svg")


def test_good_clip_is_served_with_ranges(server, library):
    c = server.client("ann")
    whole = library.video_file.read_bytes()
    r = c.get(f"/media/{library.clip_ids[0]}", headers={"Range": "bytes=100-199"})
    assert r.status_code == 206 and r.content == whole[100:200]
    assert r.headers["content-range"] == f"bytes 100-199/{len(whole)}"
    assert server.client().get(f"/media/{library.clip_ids[0]}").status_code == 401


def test_resolve_inside_refuses_escapes(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "ok.mp4").write_bytes(b"x")
    (tmp_path / "secret").write_text("s")
    (root / "a" / "out.mp4").symlink_to(tmp_path / "secret")
    assert resolve_inside(root, "a/ok.mp4") == (root / "a" / "ok.mp4").resolve()
    for bad in (
        "../secret",
        "a/../../secret",
        str(tmp_path / "secret"),
        "a/out.mp4",
        "a/ok.mp4\x00",
        "/etc/passwd",
        "",
        None,
        "a",
        ".",
        "a/missing.mp4",
    ):
        assert resolve_inside(root, bad) is None, bad
