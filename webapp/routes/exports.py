"""GET /export?fmt=jsonl|csv&filter=<json>: what the current filter shows, as a download. Leads only,
checked here on the server (the link is only shown to leads, but hiding a link protects nothing).

The file is written by data.export (the clip library's exporter) into a temporary file by a worker thread
with its own connection, then streamed.
"""

from __future__ import annotations

import os
import tempfile

import anyio
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from data import clips, db as dbmod, export as exporter, limits
from data.errors import DataError
from webapp.context import AppContext

FORMATS = {"jsonl": "application/x-ndjson", "csv": "text/csv"}


def write_export(db_path, f: clips.Filter, fmt: str, path: str) -> None:
    db = dbmod.connect(db_path)
    try:
        with open(path, "w", newline="", encoding="utf-8") as out:
            exporter.export(db, f, fmt, out)
    finally:
        db.close()


def install(app: FastAPI, ctx: AppContext, user_name) -> None:
    @app.get("/export", include_in_schema=False)
    async def export(request: Request, fmt: str = "jsonl", filter: str = "{}"):
        user = ctx.user_by_name(user_name(request))
        if user is None:
            raise HTTPException(401, "not logged in")
        if not user.can("lead"):
            raise HTTPException(403, "export needs the lead role")
        if fmt not in FORMATS:
            raise HTTPException(400, f"fmt must be one of {', '.join(FORMATS)}")
        if len(filter) > 4096:
            raise HTTPException(400, "filter is too long (4,096 characters at most)")
        try:
            fdict = limits.outside_json(filter, "The filter")
            if not isinstance(fdict, dict):
                raise ValueError
            f = clips.Filter.from_dict(fdict)
        except DataError as e:  # UnreadableJson too: not JSON, or nested too deep
            raise HTTPException(400, f"bad filter: {e}") from None
        except (ValueError, TypeError):
            raise HTTPException(400, "filter must be a JSON object of clip filter fields") from None
        fd, path = tempfile.mkstemp(prefix="cw-export-", suffix="." + fmt)
        os.close(fd)
        try:
            await anyio.to_thread.run_sync(write_export, ctx.settings.db, f, fmt, path)
        except BaseException:  # the download will not happen: never leave the temp file behind
            os.unlink(path)
            raise
        return FileResponse(
            path, media_type=FORMATS[fmt], filename=f"clips.{fmt}", background=BackgroundTask(os.unlink, path)
        )
