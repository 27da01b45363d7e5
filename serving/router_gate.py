"""The router gate: the only way to vllm-router, which itself lets anyone drive it.

vllm-router 0.1.17 authenticates nobody: `/add_worker`, `/remove_worker` and `/flush_cache` take any caller, and
`--api-key` only names a key for workers (it is not checked on requests, and chat requests reach the workers
with the caller's own `Authorization` header). Unless `--cors-allowed-origins` is given, every answer carries
`Access-Control-Allow-Origin: *`, so any web page a browser on the head opens may read it and post to it.
A worker added that way receives a share of every job and its answers are stored as ordinary model captions.

So the launcher starts the router on a private loopback address (a random 127.x.y.z and port, recorded in
`DATA_DIR/run/fleet.json`, whose folder only the owner reads) with CORS limited to an origin no page can have,
and puts this gate on the router's usual address (`--router-port`). The gate forwards a request only if:
- its `Host` is a loopback name at the gate's port (a page on a DNS-rebound name is refused);
- no browser sent it for a page (no `Origin`; `Sec-Fetch-Site` absent or `none`);
- it carries the fleet key (`Authorization: Bearer`, serving.fleet_key), which vllm-router then passes on to the
  replicas, which require it too;
- it is the OpenAI API (`POST /v1/chat/completions`, `/v1/completions`, `GET /v1/models`) or a read-only status
  (`/health`, `/liveness`, `/readiness`, `/workers`, `/list_workers`, `/get_loads`, `/get_server_info`,
  `/get_model_info`). Anything else, `/add_worker` included, is refused: only the launcher changes a fleet, by
  starting the router with its worker list.
Refusals are JSON in vLLM's error shape; no answer carries an `Access-Control-*` header.

The router's private address is hidden from web pages, not from other accounts on the head (every local process
can reach a loopback socket). So the gate also keeps the router's worker list what the launcher gave it: every
WATCH_S it reads the router's `/workers`, removes any worker the launcher did not start it with, and adds back one
that was removed (each change said on stderr, in the gate's log). A worker added behind its back gets requests
for at most that long; docs/SCALE.md says what remains.

Bodies stream both ways (a request body is read whole first, up to MAX_BODY_BYTES: ours are a few KiB); the
runner bounds what it reads of an answer. `python -m serving.router_gate` is started by the launcher:

    python -m serving.router_gate --port 30000 --upstream http://127.83.21.9:41234 --data-dir var
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import sys
from typing import Any, Iterable

import httpx

from data.settings import add_arguments, from_args
from serving import fleet_key

MAX_BODY_BYTES = 16 << 20
WATCH_S = 1.0  # how often the router's worker list is compared with the launcher's
MAX_WORKERS_BYTES = 1 << 20  # the router's /workers answer: a few hundred bytes per worker
FORWARDED = {
    "POST": {"/v1/chat/completions", "/v1/completions"},
    "GET": {
        "/v1/models",
        "/health",
        "/liveness",
        "/readiness",
        "/workers",
        "/list_workers",
        "/get_loads",
        "/get_server_info",
        "/get_model_info",
    },
}
# hop-by-hop headers (RFC 9110 7.6.1) and the ones the gate sets itself
_DROP_REQUEST = {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"upgrade", b"host"}
_DROP_RESPONSE = {b"connection", b"keep-alive", b"transfer-encoding", b"trailer", b"upgrade"}


def _error(status: int, message: str, kind: str) -> tuple[int, bytes]:
    return status, json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()


class RouterGate:
    """The ASGI app: checks each request (see the module docstring) and forwards what passes to `upstream`."""

    def __init__(
        self, upstream: str, key: str, *, port: int, host: str = "127.0.0.1", workers: Iterable[str] | None = None
    ):
        self.upstream = upstream.rstrip("/")
        # the worker list the launcher started the router with (None: not watched)
        self.workers = None if workers is None else {w.rstrip("/") for w in workers}
        self._adding: set[str] = set()
        self._key = hashlib.sha256(key.encode()).digest()
        self.hosts = {f"{h}:{port}".encode() for h in {host, "127.0.0.1", "localhost"}} | {f"[::1]:{port}".encode()}
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=10.0, read=1800.0, write=60.0, pool=None),
            limits=httpx.Limits(max_connections=8192, max_keepalive_connections=1024),
            trust_env=False,
        )

    def refusal(self, method: str, path: str, headers: dict[bytes, bytes]) -> tuple[int, bytes] | None:
        """(status, body) when the request is refused, else None."""
        if headers.get(b"host", b"").lower() not in self.hosts:
            return _error(403, "the router gate answers loopback names only", "Forbidden")
        site = headers.get(b"sec-fetch-site")
        if b"origin" in headers or (site is not None and site != b"none"):
            return _error(403, "the router gate takes no request a browser sends for a page", "Forbidden")
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        given = hashlib.sha256(token.encode("latin-1")).digest()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given, self._key):
            return 401, json.dumps({"error": "Unauthorized"}).encode()  # vLLM's answer to a wrong key
        if path not in FORWARDED.get(method, ()):
            return _error(
                403,
                f"{method} {path} is not forwarded: the router gate passes the OpenAI API and read-only status; "
                "only the launcher changes the fleet (restart the head with another --worker-urls)",
                "Forbidden",
            )
        return None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            watcher = None
            while True:
                kind = (await receive())["type"]
                if kind == "lifespan.startup":
                    if self.workers is not None:
                        watcher = asyncio.ensure_future(self.watch())
                    await send({"type": "lifespan.startup.complete"})
                elif kind == "lifespan.shutdown":
                    if watcher is not None:
                        watcher.cancel()
                    await self.client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        headers = dict(scope["headers"])
        no = self.refusal(scope["method"], scope["path"], headers)
        body = b""
        if no is None:
            more = True
            while more:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    return
                body += msg.get("body", b"")
                more = msg.get("more_body", False)
                if len(body) > MAX_BODY_BYTES:
                    no = _error(413, f"request body over {MAX_BODY_BYTES} bytes", "RequestEntityTooLarge")
                    break
        if no is not None:
            status, text = no
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(text)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": text})
            return
        url = self.upstream + scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
        fwd = [(k, v) for k, v in scope["headers"] if k.lower() not in _DROP_REQUEST]
        try:
            resp = await self.client.send(
                self.client.build_request(scope["method"], url, headers=fwd, content=body), stream=True
            )
        except httpx.HTTPError as e:
            status, text = _error(502, f"the router is not answering: {type(e).__name__}", "BadGateway")
            await send(
                {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": text})
            return
        try:
            out = [
                (k, v)
                for k, v in resp.headers.raw
                if k.lower() not in _DROP_RESPONSE and not k.lower().startswith(b"access-control-")
            ]
            await send({"type": "http.response.start", "status": resp.status_code, "headers": out})
            async for chunk in resp.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await resp.aclose()

    async def listed(self) -> set[str] | None:
        """The workers the router lists now (None: no readable answer)."""
        try:
            async with self.client.stream("GET", self.upstream + "/workers", timeout=5.0) as r:
                body = b""
                async for chunk in r.aiter_raw():
                    body += chunk
                    if len(body) > MAX_WORKERS_BYTES:
                        return None
            data = json.loads(body)
            return {str(w["url"]).rstrip("/") for w in data["workers"]}
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None

    async def _add_back(self, url: str) -> None:
        try:  # the router answers once the worker is healthy: this may take a while, so it runs on its own
            r = await self.client.post(self.upstream + "/add_worker", params={"url": url})
            _say(f"worker {url} was removed behind the launcher's back: added it again ({r.status_code})")
        except httpx.HTTPError as e:
            _say(f"worker {url} was removed behind the launcher's back; adding it again failed: {e}")
        finally:
            self._adding.discard(url)

    async def watch_once(self) -> None:
        """Make the router's worker list the launcher's again: foreign workers removed, missing ones added."""
        now = await self.listed()
        if now is None or self.workers is None:
            return
        for url in sorted(now - self.workers):
            try:
                r = await self.client.post(self.upstream + "/remove_worker", params={"url": url})
                _say(f"removed worker {url}: not one the launcher started this router with ({r.status_code})")
            except httpx.HTTPError as e:
                _say(f"worker {url} is not the launcher's, and removing it failed: {e}")
        for url in sorted(self.workers - now - self._adding):
            self._adding.add(url)
            asyncio.ensure_future(self._add_back(url))

    async def watch(self) -> None:
        while True:
            await self.watch_once()
            await asyncio.sleep(WATCH_S)


def _say(msg: str) -> None:
    print(f"[router-gate] {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m serving.router_gate",
        description=__doc__.split("\n\n")[0],
        epilog="example: python -m serving.router_gate --port 30000 --upstream http://127.83.21.9:41234 --data-dir var",
    )
    p.add_argument("--host", dest="listen_host", default="127.0.0.1", help="address to listen on (loopback)")
    p.add_argument("--port", dest="listen_port", type=int, required=True, help="port to listen on (the router's)")
    p.add_argument("--upstream", required=True, help="the router's private URL")
    p.add_argument(
        "--keep-workers",
        dest="keep_workers",
        default=None,
        help="comma-separated worker URLs the router was started with: its list is kept so",
    )
    add_arguments(p, ("data_dir",))
    args = p.parse_args(argv)
    settings = from_args(args)
    key = fleet_key.load(settings)
    if not key:
        print(f"router_gate: no fleet key in {fleet_key.path(settings)}: the launcher makes it", file=sys.stderr)
        return 2
    import uvicorn

    workers = None if args.keep_workers is None else [w for w in args.keep_workers.split(",") if w]
    gate = RouterGate(args.upstream, key, port=args.listen_port, host=args.listen_host, workers=workers)
    uvicorn.run(
        gate,
        host=args.listen_host,
        port=args.listen_port,
        log_level="warning",
        access_log=False,
        http="h11",
        lifespan="on",
        timeout_keep_alive=75,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
