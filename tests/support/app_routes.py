"""Every route of the web app, read from the app itself: its own routes and mounts, and every route of the Gradio
app mounted at its root (FastAPI's included routers opened up). The S2 table (docs/roles.csv) must classify each
one, so a route a new Gradio (or a new module of ours) adds fails the test until someone decides who may use it.
"""

from __future__ import annotations

import re

from starlette.routing import Mount

PLACEHOLDER = re.compile(r"\{[^}]+\}")


def _methods(route) -> set[str]:
    return set(getattr(route, "methods", None) or ()) - {"HEAD"}  # HEAD is answered as GET (and has a GET twin)


def app_routes(app) -> tuple[set[str], set[str]]:
    """(the app's own routes and mounts, Gradio's routes) as 'METHOD /path' (mounts as 'MOUNT /path')."""
    own, gradio = set(), set()
    for r in app.routes:
        if isinstance(r, Mount):
            own.add(f"MOUNT {r.path or '/'}")
            if not r.path:  # Gradio's app, at the root
                gradio |= _gradio(r.app.routes)
        else:
            own.update(f"{m} {r.path}" for m in _methods(r))
    return own, gradio


def _gradio(routes) -> set[str]:
    out = set()
    for r in routes:
        inner = getattr(r, "original_router", None)  # FastAPI's include_router (the /gradio_api routes)
        if inner is not None:
            out |= _gradio(inner.routes)
        elif isinstance(r, Mount):
            out.add(f"MOUNT {r.path}")
        else:
            out.update(f"{m} {r.path}" for m in _methods(r))
    return out


def concrete(path: str) -> str:
    """A path of a route template with every parameter filled in ('x')."""
    return PLACEHOLDER.sub("x", path)
