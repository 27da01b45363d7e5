"""The media routes: a clip, its thumbnail and its filmstrip, by clip id.

The client only ever names a clip id. The path comes from SQLite, is resolved (symlinks followed) and must
land inside the clip root (media files: inside the media dir); anything else is a 404 with no detail.
Starlette's FileResponse answers Range requests with 206, so the browser's player can seek.
"""

from __future__ import annotations

import mimetypes
import os
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, Response

from data import clips
from data.errors import NotFound
from webapp.context import AppContext

PLACEHOLDER = Path(__file__).parents[1] / "static" / "no-thumbnail.svg"  # webapp/static
VIDEO_TYPES = {
    ".mp4": "video/mp4",
    ".m4v": "video/mp4",
    ".mov": "video/quicktime",
    ".webm": "video/webm",
    ".mkv": "video/x-matroska",
    ".avi": "video/x-msvideo",
    ".ts": "video/mp2t",
}


def resolve_inside(root: Path, relative: str | None) -> Path | None:
    """`root/relative` as a real path if it is an existing regular file inside `root`, else None.

    Refuses absolute paths, NUL bytes, and anything whose real path (after symlinks and `..`) leaves root.
    """
    if not relative or "\x00" in relative:
        return None
    rel = Path(relative)
    if rel.is_absolute() or relative.startswith(("/", "\\")):
        return None
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(real_root / rel))
    try:
        real.relative_to(real_root)
    except ValueError:
        return None
    if real == real_root or not real.is_file():
        return None
    return real


def _media_path(settings, stored: str | None) -> Path | None:
    """Thumbnails and filmstrips are stored relative to the media dir (an absolute path inside it is
    tolerated, since the ingest may record either)."""
    if not stored:
        return None
    media = Path(os.path.realpath(settings.media_dir))
    if os.path.isabs(stored):
        try:
            stored = str(Path(os.path.realpath(stored)).relative_to(media))
        except ValueError:
            return None
    return resolve_inside(media, stored)


def _clip_file(ctx: AppContext, clip_id: int) -> tuple[Path, str]:
    """The clip's file inside the clip root and its media type; 404 when the clip is unknown or its stored
    path does not resolve inside the root. FileResponse serves it with Range (the player seeks)."""
    try:
        rel = clips.path_of(ctx.db(), clip_id)
    except NotFound:
        raise HTTPException(404) from None
    path = resolve_inside(ctx.settings.clip_root, rel)
    if path is None:
        raise HTTPException(404)
    return path, VIDEO_TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[
        0
    ] or "application/octet-stream"


def install(app: FastAPI, ctx: AppContext, user_name) -> None:
    """Add /media/{id}, /thumb/{id}, /filmstrip/{id} and /preview/{id} (the H.264 copy of an HEVC clip);
    `user_name(request)` gates them like the app."""

    def gate(request: Request) -> None:
        if user_name(request) is None:
            raise HTTPException(401, "not logged in")

    @app.get("/media/{clip_id}", include_in_schema=False)
    def media(clip_id: int, request: Request) -> Response:
        gate(request)
        path, media_type = _clip_file(ctx, clip_id)
        return FileResponse(path, media_type=media_type, headers={"Cache-Control": "private, max-age=3600"})

    def image(clip_id: int, request: Request, column: str) -> Response:
        gate(request)
        path = _media_path(ctx.settings, clips.media_of(ctx.db(), clip_id, column))
        if path is None:
            if column == "thumbnail":
                return FileResponse(PLACEHOLDER, media_type="image/svg+xml")
            raise HTTPException(404)
        return FileResponse(
            path,
            media_type=mimetypes.guess_type(path.name)[0] or "image/jpeg",
            headers={"Cache-Control": "private, max-age=86400"},
        )

    @app.get("/thumb/{clip_id}", include_in_schema=False)
    def thumb(clip_id: int, request: Request) -> Response:
        return image(clip_id, request, "thumbnail")

    @app.get("/filmstrip/{clip_id}", include_in_schema=False)
    def filmstrip(clip_id: int, request: Request) -> Response:
        return image(clip_id, request, "filmstrip")

    @app.get("/preview/{clip_id}", include_in_schema=False)
    def preview(clip_id: int, request: Request) -> Response:
        return image(clip_id, request, "preview")  # an .mp4 under media_dir, served with Range like the rest


def install_signed(app: FastAPI, ctx: AppContext) -> None:
    """Add /media/signed/{id}?exp=&sig=: a clip for a replica on another node (serving.media_urls).

    No login: the signature is the credential, and it names one clip until one instant. Refused with 403
    when expired or forged (the reason in the body, nothing about the clip); 404 when the clip is unknown or
    its path does not resolve inside the clip root. Range requests work as on /media/{id}."""
    from serving import media_urls

    key = media_urls.load_key(ctx.settings.data_dir)

    @app.get(media_urls.ROUTE + "/{clip_id}", include_in_schema=False)
    def signed_media(clip_id: int, request: Request) -> Response:
        why = media_urls.check(key, clip_id, request.query_params.get("exp"), request.query_params.get("sig"))
        if why:
            return Response(f"refused: {why}\n", status_code=403, media_type="text/plain")
        path, media_type = _clip_file(ctx, clip_id)
        return FileResponse(path, media_type=media_type, headers={"Cache-Control": "no-store"})
