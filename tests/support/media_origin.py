"""A stand-in for the head's app as a media origin, misbehaving on request: for recording how real vLLM answers a
failed http media fetch (tests/serving/test_gpu_fleet.py, CW_GPU_TOPOLOGY=nodehead) and replaying it against the
simulated fleet (tests/serving/test_vllm_recordings.py).

    with MediaOrigin("127.0.0.3", clip_bytes) as o:
        o.url("clip")                  # 200, the clip
        o.url("status", 403)           # an answer of that status, empty
        o.url("slow", 25)              # the clip after 25 s
        o.url("big", 300 << 20)        # that many zero bytes (streamed, never held)

A spec (`spec_url(origin, spec)`) says the same as data, so that a recording names what the origin did:
{"serve": "clip"}, {"status": 403}, {"delay_s": 25}, {"bytes": N}.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class MediaOrigin:
    """A threaded HTTP server on `host` (port chosen free) serving `clip` and its misbehaviours."""

    def __init__(self, host: str, clip: bytes):
        clip_bytes = clip

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's name
                parts = self.path.strip("/").split("/")
                kind, arg = parts[0], (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0)
                if kind == "status":
                    self.send_response(arg)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if kind == "slow":
                    time.sleep(arg)
                if kind == "big":
                    self.send_response(200)
                    self.send_header("content-type", "video/mp4")
                    self.send_header("content-length", str(arg))
                    self.end_headers()
                    block = b"\0" * (1 << 20)
                    left = arg
                    try:
                        while left > 0:
                            self.wfile.write(block[: min(left, len(block))])
                            left -= len(block)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    return
                self.send_response(200)
                self.send_header("content-type", "video/mp4")
                self.send_header("content-length", str(len(clip_bytes)))
                self.end_headers()
                try:
                    self.wfile.write(clip_bytes)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="media-origin", daemon=True)

    def url(self, kind: str, arg: int | None = None) -> str:
        return f"{self.base}/{kind}" + (f"/{arg}" if arg is not None else "")

    def __enter__(self) -> "MediaOrigin":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def spec_url(origin: MediaOrigin, spec: dict) -> str:
    """The URL of `origin` that behaves as `spec` says (see the module docstring)."""
    if "status" in spec:
        return origin.url("status", int(spec["status"]))
    if "delay_s" in spec:
        return origin.url("slow", int(spec["delay_s"]))
    if "bytes" in spec:
        return origin.url("big", int(spec["bytes"]))
    return origin.url("clip")
