"""The app built in-process, for tests that call its tabs' handlers directly (no server, no browser)."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def built_app(settings):
    """The app built in-process (login off), over 70 clips without captions: its workbench and its Blocks."""
    from data import db as dbmod
    from webapp.app import build_app

    db = dbmod.connect(settings.db)
    db["clips"].insert_all({"path": f"c{i:03d}.mp4"} for i in range(70))
    db.close()
    app = build_app(settings.replace(auth="off"))
    yield app.state.workbench, app.state.demo
    app.state.ctx.close()
