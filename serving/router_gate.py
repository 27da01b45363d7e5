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
Refusals are JSON in vLLM's error shape, and the connection is closed after one. Each refusal is said in the
gate's log with its status, its reason and the address it came from (`refused 401 from 127.0.0.1:51234: no fleet
key (no Authorization header): GET /workers`): every reader of the workbench sends the key
(serving.fleet.reader), so a refusal is a reader that forgot it, or someone else. Bounded: the first of each kind
(status, reason, address) at once, then how many more like it every REFUSED_SAY_S; at most MAX_KINDS kinds
tracked (the rest counted together); every value from the request clipped and escaped; never the key or the
token given (a wrong key is said as "a token that is not the fleet key"), and anything equal to the key is
redacted (serving.redact).

The router's private address is hidden from web pages, not from other accounts on the head (every local process
can reach a loopback socket). So the gate also keeps the router's worker list what the launcher gave it: every
WATCH_S it reads the router's `/workers`, removes any worker the launcher did not start it with, and adds back one
that was removed (each change said on stderr, in the gate's log). A worker added behind its back gets requests
for at most that long; docs/SCALE.md says what remains.

How: a small asyncio proxy, one connection to the router per client connection. Each request is read with h11
(strict framing; a body up to MAX_BODY_BYTES, ours are a few KiB), checked, and written again for the router with
a Content-Length of its own, so that the router can only read what the gate read; the router's answers are copied
back byte for byte (the runner bounds what it reads). A gate of uvicorn + httpx cost ~3.6 ms of CPU per request,
twice the runner's own; this one is measured by benchmarks/bench_gate.py (docs/BENCHMARKS.md). It is started by
the launcher:

    python -m serving.router_gate --port 30000 --upstream http://127.83.21.9:41234 --data-dir var
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import socket
import sys
import time
from typing import Callable, Iterable
from urllib.parse import urlsplit

import h11
import httpx

from data.settings import add_arguments, from_args
from serving import console, fleet_key

MAX_BODY_BYTES = 16 << 20
MAX_HEAD_BYTES = 64 << 10
WATCH_S = 1.0  # how often the router's worker list is compared with the launcher's
REFUSED_SAY_S = 10.0  # refusals of one kind from one address: the first at once, then a count at most this often
MAX_KINDS = 64  # kinds of refusal (status, reason, address) counted apart; the rest are counted together
VALUE_CHARS = 100  # of a value from the request (a path, a Host) in a log line
MAX_WORKERS_BYTES = 1 << 20  # the router's /workers answer: a few hundred bytes per worker
FORWARDED = {
    b"POST": {b"/v1/chat/completions", b"/v1/completions"},
    b"GET": {
        b"/v1/models",
        b"/health",
        b"/liveness",
        b"/readiness",
        b"/workers",
        b"/list_workers",
        b"/get_loads",
        b"/get_server_info",
        b"/get_model_info",
    },
}
# hop-by-hop headers (RFC 9110 7.6.1) and the framing the gate writes itself
_DROP = {b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"upgrade", b"host"}
_DROP |= {b"content-length", b"transfer-encoding"}
_REASONS = {401: "Unauthorized", 403: "Forbidden", 400: "Bad Request", 413: "Content Too Large", 502: "Bad Gateway"}


def _error(status: int, message: str, kind: str) -> tuple[int, bytes]:
    return status, json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()


def _answer(status: int, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: application/json\r\n"
    return (head + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


def _shown(value: bytes | str, n: int = VALUE_CHARS) -> str:
    """A value the client sent, fit for one log line: decoded as latin-1, clipped, non-printables escaped."""
    text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    text = text if len(text) <= n else text[:n] + "..."
    return ascii(text)[1:-1]


def _say(msg: str) -> None:
    try:  # best effort: the log is on the data dir's disk, which may be full; the gate goes on
        print(f"[router-gate] {msg}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


class RouterGate:
    """Checks each request (see the module docstring) and forwards what passes to the router at `upstream`."""

    def __init__(
        self,
        upstream: str,
        key: str,
        *,
        port: int,
        host: str = "127.0.0.1",
        workers: Iterable[str] | None = None,
        redact: Callable[[str], str] | None = None,
    ):
        self.upstream = upstream.rstrip("/")
        u = urlsplit(self.upstream)
        self.up_host, self.up_port = u.hostname or "127.0.0.1", u.port or 80
        self._key = hashlib.sha256(key.encode()).digest()
        self.hosts = {f"{h}:{port}".encode() for h in {host, "127.0.0.1", "localhost"}} | {f"[::1]:{port}".encode()}
        # the worker list the launcher started the router with (None: not watched)
        self.workers = None if workers is None else {w.rstrip("/") for w in workers}
        self._adding: set[str] = set()
        self.redact = redact or (lambda text: text)  # the fleet key out of every line (serving.redact)
        # (status, reason, address) -> [refused since last said, when last said, the latest: its reason and request]
        self._refused: dict[tuple, list] = {}
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None), trust_env=False)  # the watchdog's

    def refusal(self, method: bytes, target: bytes, headers: dict[bytes, bytes]) -> tuple[int, bytes, str] | None:
        """(status, body, reason for the log) when the request is refused, else None. `headers`: lower-case names.
        The reason holds no token: a wrong key is said as such."""
        host = headers.get(b"host", b"")
        if host.lower() not in self.hosts:
            why = f"Host '{_shown(host)}' is not a loopback name at the gate's port"
            return *_error(403, "the router gate answers loopback names only", "Forbidden"), why
        site = headers.get(b"sec-fetch-site")
        if b"origin" in headers or (site is not None and site != b"none"):
            why = f"sent by a browser for a page (Origin '{_shown(headers.get(b'origin', b''))}')"
            return *_error(403, "the router gate takes no request a browser sends for a page", "Forbidden"), why
        given = headers.get(b"authorization")
        scheme, _, token = (given or b"").decode("latin-1").partition(" ")
        digest = hashlib.sha256(token.encode("latin-1")).digest()
        if scheme.lower() != "bearer" or not hmac.compare_digest(digest, self._key):
            why = (
                "no fleet key (no Authorization header)"
                if given is None
                else "no fleet key (its authorization header has another scheme)"
                if scheme.lower() != "bearer"
                else "a token that is not the fleet key"
            )
            return 401, json.dumps({"error": "Unauthorized"}).encode(), why  # vLLM's answer to a wrong key
        path = target.split(b"?", 1)[0]
        if path not in FORWARDED.get(method, ()):
            name = f"{method.decode('latin-1')} {path.decode('latin-1')[:200]}"
            return (
                *_error(
                    403,
                    f"{name} is not forwarded: the router gate passes the OpenAI API and read-only status; "
                    "only the launcher changes the fleet (restart the head with another --worker-urls)",
                    "Forbidden",
                ),
                "not the OpenAI API or a read-only status (only the launcher changes the fleet)",
            )
        return None

    def refused(self, status: int, why: str, source, request: str) -> None:
        """Say a refusal in the gate's log (the module docstring): `source` the client's address, `request` its
        method and path (no query). The first of its kind from its address at once, then counted."""
        address = f"{source[0]}:{source[1]}" if isinstance(source, tuple) and len(source) >= 2 else str(source)
        host = address.rsplit(":", 1)[0]
        kind = (status, why.split(" '", 1)[0], host)  # a Host or Origin value does not make a kind of its own
        if kind not in self._refused and len(self._refused) >= MAX_KINDS:
            kind = (status, "other refusals", "other addresses")
        entry = self._refused.get(kind)
        line = f"refused {status} from {_shown(address, 64)}: {why}: {_shown(request)}"
        if entry is None:
            self._refused[kind] = [0, time.monotonic(), ""]
            _say(self.redact(line))
            return
        entry[0] += 1
        entry[2] = f"{why}: {_shown(request)}"
        if time.monotonic() - entry[1] >= REFUSED_SAY_S:
            self.say_refused(kind)

    def say_refused(self, kind: tuple | None = None) -> None:
        """Say how many refusals of `kind` (every kind when None) came since it was last said, if any."""
        for k in [kind] if kind is not None else list(self._refused):
            n, _, latest = self._refused[k]
            if n:
                status, _, host = k
                _say(self.redact(f"refused {status} from {_shown(host, 64)}: {n} more since the line before; {latest}"))
            self._refused[k] = [0, time.monotonic(), latest]

    async def _request(self, conn: h11.Connection, reader: asyncio.StreamReader) -> tuple | None:
        """The next request on the connection, checked: (request, body), (status, refusal body, reason, what was
        asked), or None when the client is gone."""
        req, body = None, bytearray()
        while True:
            ev = conn.next_event()
            if ev is h11.NEED_DATA:
                data = await reader.read(65536)
                conn.receive_data(data)
                if not data and req is None:
                    return None
                continue
            if isinstance(ev, h11.Request):
                req = ev
                no = self.refusal(ev.method, ev.target, dict(ev.headers))
                if no is not None:
                    return *no, _asked(ev)
            elif isinstance(ev, h11.Data):
                body += ev.data
                if len(body) > MAX_BODY_BYTES:
                    too_large = _error(413, f"request body over {MAX_BODY_BYTES} bytes", "RequestEntityTooLarge")
                    return *too_large, f"a body over {MAX_BODY_BYTES} bytes", _asked(req)
            elif isinstance(ev, h11.EndOfMessage):
                return req, bytes(body)
            else:  # ConnectionClosed, or PAUSED
                return None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: its requests in order, each checked, over one connection to the router."""
        _nodelay(writer)
        source = writer.get_extra_info("peername")
        up: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        pump: asyncio.Task | None = None
        rest = b""
        try:
            while True:
                conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
                if rest:  # what the client sent after the last request (h11 reads b"" as the end of the stream)
                    conn.receive_data(rest)
                try:
                    got = await self._request(conn, reader)
                except h11.RemoteProtocolError as e:
                    bad = _error(400, f"not a request the gate forwards: {e}", "BadRequestError")
                    got = *bad, f"not HTTP the gate reads: '{_shown(str(e))}'", "-"
                if got is None:
                    return
                if isinstance(got[0], int):  # refused: said (unless an answer may still be streaming), then closed
                    self.refused(got[0], got[2], source, got[3])
                    if pump is None or pump.done():
                        writer.write(_answer(*got[:2]))
                        await writer.drain()
                    return
                req, body = got
                rest = conn.trailing_data[0]
                if up is None:
                    try:
                        up = await asyncio.open_connection(self.up_host, self.up_port)
                    except OSError as e:
                        writer.write(_answer(*_error(502, f"the router is not answering: {e}", "BadGateway")))
                        await writer.drain()
                        return
                    _nodelay(up[1])
                    pump = asyncio.ensure_future(_copy(up[0], writer))
                out = h11.Connection(h11.CLIENT)
                headers = [(k, v) for k, v in req.headers if k not in _DROP]
                headers += [
                    (b"host", f"{self.up_host}:{self.up_port}".encode()),
                    (b"content-length", b"%d" % len(body)),
                ]
                data = out.send(h11.Request(method=req.method, target=req.target, headers=headers))
                data += (out.send(h11.Data(data=body)) if body else b"") + out.send(h11.EndOfMessage())
                up[1].write(data)
                await up[1].drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            if pump is not None:
                pump.cancel()
            for w in (writer, up[1] if up else None):
                if w is not None:
                    w.close()

    # ---- the worker list ------------------------------------------------------------------------------------
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

    async def say_counts(self) -> None:
        """Say the refusals counted and not yet said, every REFUSED_SAY_S (a flood's last ones included)."""
        while True:
            await asyncio.sleep(REFUSED_SAY_S)
            self.say_refused()

    async def serve(self, host: str, port: int, stop: asyncio.Event | None = None) -> None:
        """Listen on host:port until `stop` is set (or forever), keeping the worker list if one was given."""
        server = await asyncio.start_server(self.handle, host, port, backlog=2048)
        watcher = asyncio.ensure_future(self.watch()) if self.workers is not None else None
        counting = asyncio.ensure_future(self.say_counts())
        try:
            async with server:
                await (stop.wait() if stop is not None else server.serve_forever())
        finally:
            counting.cancel()
            self.say_refused()
            if watcher is not None:
                watcher.cancel()
            await self.client.aclose()


def _asked(req: h11.Request) -> str:
    """What a request asked for, for the log: its method and path, no query (a signature may be in one)."""
    return f"{req.method.decode('latin-1')} {req.target.split(b'?', 1)[0].decode('latin-1')}"


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The router's answers back to the client, as they come; the client's connection ends with the router's."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


def main(argv: list[str] | None = None) -> int:
    console.install()  # every line it writes, logged or printed, bounded (serving.log_clip; best-effort output)
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
    workers = None if args.keep_workers is None else [w for w in args.keep_workers.split(",") if w]
    redact = fleet_key.auth(settings).redact  # nothing equal to the key is ever logged
    gate = RouterGate(args.upstream, key, port=args.listen_port, host=args.listen_host, workers=workers, redact=redact)

    async def run() -> None:
        import signal

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await gate.serve(args.listen_host, args.listen_port, stop)

    try:
        asyncio.run(run())
    except OSError as e:
        print(f"router_gate: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
