"""A replica (and router) that repeats our request back in every answer: the request's headers (the fleet key in
`Authorization` among them) and the clip's URL (a signed one carries `sig=`), as a careless or hostile server
might, for the tests of the redaction at the fleet client's and the fleet reader's boundary (issue 31, point 4).

The clip id in the URL (`.../media/signed/<id>?...`, or a file name ending in its id) picks how the answer
repeats it (`MODES`, by id modulo their number):
- refuse: 400 with the echo as vLLM's error message (the clip fails at once);
- fail:   500 with the echo as the message, and the `Authorization` header as the status line's reason phrase
          (httpx logs that line);
- plain:  502 with a text body whose first 500 characters (what the client keeps) end 20 characters into the key;
- answer: 200, a chat completion whose content is the echo (not JSON: a bad answer, its raw text kept);
- body:   200 whose body is the echo, not a chat completion.
Each echo also repeats the key split by a newline, by zero-width spaces and over two JSON fields (issue 46).
As a router it answers `/liveness`, `/readiness` and `/workers` (a worker whose fields repeat the key), and
`/health` and `/metrics` 200 (the metrics' model name repeats the key).

    with EchoFleet(delay=3.0) as echo:   # each chat answer after 3 s
        echo.url          # the base URL; echo.requests: how many chat requests came
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ("refuse", "fail", "plain", "answer", "body")


def mode_of(clip_id: int) -> str:
    return MODES[clip_id % len(MODES)]


class EchoFleet:
    """A threaded HTTP server on 127.0.0.1 (port chosen free) answering as the module docstring says."""

    def __init__(self, delay: float = 0.0) -> None:
        fleet = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _token(self) -> str:
                return (self.headers.get("authorization") or "").partition(" ")[2]

            def _echo(self, body: bytes = b"") -> str:
                headers = "; ".join(f"{k}: {v}" for k, v in self.headers.items())
                urls = re.findall(rb'"url":\s*"([^"]+)"', body)
                found = b" ".join(urls).decode()
                quoted = found.replace("&", "%26").replace("=", "%3D")
                t = self._token()
                return (
                    f"you sent {self.command} {self.path} with {headers} for {found} (quoted: {quoted}); "
                    f'as JSON {{"Authorization": "{self.headers.get("authorization")}"}}; your key is {t}; '
                    # the shapes issue 46 saw stored: split by a newline, by zero-width spaces, over two JSON fields
                    f"split {t[:20]}\n{t[20:]}; spaced {t[:15]}\u200b{t[15:30]}\u200b{t[30:]}; "
                    f"fields {json.dumps({'first': t[:21], 'rest': t[21:]})}"
                )

            def _send(self, status: int, body: bytes, ctype: str = "application/json", reason: str | None = None):
                self.send_response(status, reason)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # http.server's name
                echo = self._echo()
                if self.path.startswith("/workers"):
                    worker = {"url": fleet.url, "is_healthy": True, "note": echo[:1000]}
                    self._send(200, json.dumps({"workers": [worker], "total": 1}).encode())
                elif self.path.startswith("/metrics"):
                    model = echo.replace('"', "'").replace("\\", "/")[:200]
                    text = f'vllm:num_requests_running{{model_name="{model}"}} 0.0\n'
                    self._send(200, text.encode(), "text/plain")
                elif self.path.startswith(("/liveness", "/readiness", "/health")):
                    self._send(200, b"{}")
                else:
                    self._send(404, json.dumps({"error": {"message": echo, "code": 404}}).encode())

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                fleet.requests += 1
                time.sleep(delay)
                echo = self._echo(body)
                ids = re.findall(rb"/media/signed/(\d+)|(\d+)\.mp4", body)
                clip_id = int(next((a or b for a, b in ids), b"0"))
                mode = mode_of(clip_id)
                if mode == "refuse":
                    self._send(400, json.dumps({"error": {"message": echo, "type": "BadRequestError"}}).encode())
                elif mode == "fail":
                    reason = f"Internal Server Error for {self.headers.get('authorization')}"
                    self._send(500, json.dumps({"error": {"message": echo}}).encode(), reason=reason)
                elif mode == "plain":  # cut by the client at 500 characters, 20 into the key
                    bare = " key " + self._token()
                    self._send(502, ("x" * (500 - 26) + bare + " " + echo).encode(), "text/plain")
                elif mode == "answer":
                    choice = {"message": {"role": "assistant", "content": echo}, "finish_reason": "stop", "index": 0}
                    self._send(200, json.dumps({"choices": [choice], "model": "echo"}).encode())
                else:
                    self._send(200, echo.encode(), "text/plain")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="echo-fleet", daemon=True)

    def __enter__(self) -> "EchoFleet":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
