"""The built app's components and events as JSON, to compare before and after a change that must not change them
(a tab rebuilt from parts, modules moved): `python -m tests.support.app_dump > before.json`, change, dump again,
`diff before.json after.json`. Nothing differs between two dumps of one tree (function addresses are taken out).

It holds Gradio's config of the page (every component with its id, type and properties; the layout; the
dependencies), Gradio's API description (each named endpoint's parameters, in order), and per event: its API
name, the handler's name and signature (the wrapped handler's too: shows_errors and webapp.form_echo wrap them),
its input and output component ids, its triggers, trigger mode, progress display, queue and concurrency."""

from __future__ import annotations

import inspect
import json
import re
import tempfile

from data.settings import Settings
from webapp.app import build_app

VOLATILE = ("version", "app_id", "root", "connect_heartbeat", "protocol", "username", "theme_hash", "stylesheets")


def dump() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        app = build_app(Settings.load({"data_dir": tmp + "/var", "auth": "off"}, environ={}))
        try:
            demo = app.state.demo
            config = {k: v for k, v in demo.get_config_file().items() if k not in VOLATILE}
            events = []
            for i, f in demo.fns.items():
                inner = inspect.unwrap(f.fn) if f.fn else None  # under its wrappers
                events.append(
                    {
                        "id": i,
                        "api_name": f.api_name,
                        "handler": getattr(f.fn, "__name__", None),
                        "signature": str(inspect.signature(f.fn)) if f.fn else None,
                        "inner": getattr(inner, "__name__", None),
                        "inner_signature": str(inspect.signature(inner)) if inner else None,
                        "inputs": [c._id for c in f.inputs],
                        "outputs": [c._id for c in f.outputs],
                        "targets": [list(t) for t in f.targets],
                        "trigger_mode": f.trigger_mode,
                        "show_progress": f.show_progress,
                        "queue": f.queue,
                        "concurrency_limit": f.concurrency_limit,
                    }
                )
            return {"config": config, "events": events, "api": demo.get_api_info()}
        finally:
            app.state.ctx.close()


def main() -> None:
    text = json.dumps(dump(), indent=1, sort_keys=True, default=repr)
    print(re.sub(r" at 0x[0-9a-f]+", "", text))


if __name__ == "__main__":
    main()
