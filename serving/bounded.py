"""Bounded reads from the fleet: every answer a replica, a router or a node sends is read with a size bound
that counts decompressed bytes as they stream, a time bound for the whole read, and only the encodings that
can be decoded under that bound.

Why not httpx's own decoding (`aiter_bytes`, `.content`): it decompresses each network chunk whole, so a
64 KiB gzip chunk becomes 64 MiB before anyone can count it, and a few hundred bytes of brotli become
gigabytes, in the runner or the app (issue 21, class 2; docs/RELIABILITY.md has the figures). Here the raw
bytes are decompressed with an output limit (zlib's `max_length`, brotli's `output_buffer_limit`), so at most
`max_bytes` + one decoder step is ever held.

    async with client.stream("GET", url, headers=bounded.HEADERS) as resp:
        body = await bounded.read_async(resp, 1 << 20, what="/metrics")
    resp = await bounded.fetch(client, "GET", url, max_bytes=1 << 20, seconds=2.0)  # the same, in one call

Requests ask for no compression (`Accept-Encoding: identity`); a server that compresses anyway is decoded
(gzip, deflate, br) under the bound, and any other or stacked encoding is refused.

Errors (all `ReadRefused`, a `serving.errors.FleetError`, each with a `kind`; callers turn them into the
FleetError their caller expects, e.g. a ReplicaError):
    ReadRefused
    ├── Oversized    kind "oversized": more than max_bytes after decoding; nothing more is read
    ├── TooSlow      kind "timeout": the whole read took longer than its deadline (a trickling server)
    └── BadEncoding  kind "encoding": a Content-Encoding we do not decode, or corrupt compressed data
"""

from __future__ import annotations

import asyncio
import time
import zlib
from typing import Any

import httpx

from serving.errors import FleetError

HEADERS = {"accept-encoding": "identity"}


class ReadRefused(FleetError):
    """An answer not read in full because it broke a bound (the message says which)."""

    kind = "refused"


class Oversized(ReadRefused):
    kind = "oversized"


class TooSlow(ReadRefused):
    kind = "timeout"


class BadEncoding(ReadRefused):
    kind = "encoding"


class _Identity:
    def feed(self, data: bytes, room: int) -> bytes:
        return data[: room + 1]

    def flush(self, room: int) -> bytes:
        return b""


class _Zlib:
    """gzip (several members too) or deflate (zlib-wrapped, or raw as some servers send it)."""

    def __init__(self, encoding: str):
        self.encoding = encoding
        self.first = True
        self.z = zlib.decompressobj(zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS)

    def _new(self) -> None:
        self.z = zlib.decompressobj(zlib.MAX_WBITS | 16 if self.encoding == "gzip" else zlib.MAX_WBITS)

    def feed(self, data: bytes, room: int) -> bytes:
        out = bytearray()
        while data and len(out) <= room:
            try:
                piece = self.z.decompress(data, room + 1 - len(out))
            except zlib.error as e:
                if self.first and self.encoding == "deflate":  # raw deflate without the zlib header
                    self.first = False
                    self.z = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise BadEncoding(f"corrupt {self.encoding} data: {e}") from None
            self.first = False
            out += piece
            if self.z.eof:
                data = self.z.unused_data  # the next gzip member, if any
                if data:
                    self._new()
            else:
                data = self.z.unconsumed_tail
        return bytes(out)

    def flush(self, room: int) -> bytes:
        # output held back by max_length is input still in unconsumed_tail; zlib itself buffers no output
        return self.feed(self.z.unconsumed_tail, room)


class _Brotli:
    def __init__(self) -> None:
        import brotli

        self.brotli = brotli
        self.d = brotli.Decompressor()
        if not hasattr(self.d, "can_accept_more_data"):
            raise ImportError("brotli without output limits")

    def feed(self, data: bytes, room: int) -> bytes:
        try:
            # brotli's limit is soft: the buffer grows in doubling blocks past it (a 1 MiB limit can hold 2 MiB), so
            # ask for one block (~32 KiB) per call; with the limit reached the decoder keeps input back, which
            # is drained (empty input) before new data may be given
            out = bytearray(self.d.process(data, output_buffer_limit=1))
            while len(out) <= room and not self.d.can_accept_more_data():
                more = self.d.process(b"", output_buffer_limit=1)
                if not more:
                    break
                out += more
        except self.brotli.error as e:
            raise BadEncoding(f"corrupt br data: {e}") from None
        return bytes(out)

    def flush(self, room: int) -> bytes:
        return b""


def decoder_for(headers: httpx.Headers | dict) -> Any:
    """A decoder for the answer's Content-Encoding, or BadEncoding."""
    value = (headers.get("content-encoding") or "").strip().lower()
    codings = [c.strip() for c in value.split(",") if c.strip() and c.strip() != "identity"]
    if not codings:
        return _Identity()
    if len(codings) > 1:
        raise BadEncoding(f"stacked content encodings are not accepted ({value[:60]!r})")
    coding = codings[0]
    if coding in ("gzip", "x-gzip"):
        return _Zlib("gzip")
    if coding == "deflate":
        return _Zlib("deflate")
    if coding == "br":
        try:
            return _Brotli()
        except ImportError:
            pass
    raise BadEncoding(f"content encoding {coding[:40]!r} is not accepted (asked for identity)")


def _check_declared(headers: httpx.Headers | dict, max_bytes: int, what: str) -> None:
    """Refuse at once an answer whose declared length is already over the bound (compressed or not: an
    answer whose compressed form is larger than the bound is not worth reading either)."""
    declared = str(headers.get("content-length") or "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise Oversized(f"{what} of {int(declared):,} bytes refused (the limit is {max_bytes:,})")


class Reader:
    """Decoded bytes of one answer, refused past `max_bytes` (Oversized) as soon as they pass it."""

    def __init__(self, headers: httpx.Headers | dict, max_bytes: int, *, what: str = "answer"):
        self.max_bytes, self.what = max_bytes, what
        self.decoder = decoder_for(headers)
        _check_declared(headers, max_bytes, what)
        self.parts: list[bytes] = []
        self.size = 0

    def _take(self, piece: bytes) -> None:
        self.size += len(piece)
        if self.size > self.max_bytes:
            raise Oversized(f"{self.what} longer than {self.max_bytes:,} bytes: refused, not read further")
        if piece:
            self.parts.append(piece)

    def add(self, raw: bytes) -> None:
        self._take(self.decoder.feed(raw, self.max_bytes - self.size))

    def finish(self) -> bytes:
        self._take(self.decoder.flush(self.max_bytes - self.size))
        return b"".join(self.parts)


def _deadline_passed(deadline: float | None, what: str, seconds: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise TooSlow(f"{what}: no complete answer within {seconds:g} s")


def _in_memory(resp: httpx.Response, max_bytes: int, what: str) -> bytes | None:
    """The body of a response that was complete before anyone streamed it (an `httpx.MockTransport` answer:
    httpx decoded it already, in memory), checked against the bound; None for a real streamed answer."""
    try:
        body = resp.content
    except httpx.ResponseNotRead:
        return None
    _check_declared(resp.headers, max_bytes, what)
    if len(body) > max_bytes:
        raise Oversized(f"{what} longer than {max_bytes:,} bytes: refused")
    return body


async def read_async(
    resp: httpx.Response, max_bytes: int, *, what: str = "answer", seconds: float | None = None
) -> bytes:
    """The decoded body of a streamed response (`client.stream(...)`), bounded (see the module docstring)."""
    body = _in_memory(resp, max_bytes, what)
    if body is not None:
        return body
    reader = Reader(resp.headers, max_bytes, what=what)

    async def read() -> bytes:
        async for raw in resp.aiter_raw():
            reader.add(raw)
        return reader.finish()

    if seconds is None:
        return await read()
    try:
        async with asyncio.timeout(seconds):
            return await read()
    except TimeoutError:
        raise TooSlow(f"{what}: no complete answer within {seconds:g} s") from None


def read_sync(resp: httpx.Response, max_bytes: int, *, what: str = "answer", seconds: float | None = None) -> bytes:
    """The same for a sync client. The deadline is checked between reads, each read has the client's read
    timeout: a trickle is cut at most one read timeout past `seconds`."""
    body = _in_memory(resp, max_bytes, what)
    if body is not None:
        return body
    reader = Reader(resp.headers, max_bytes, what=what)
    deadline = time.monotonic() + seconds if seconds is not None else None
    for raw in resp.iter_raw():
        reader.add(raw)
        _deadline_passed(deadline, what, seconds)
    return reader.finish()


def decoded(resp: httpx.Response, body: bytes) -> httpx.Response:
    """A complete response holding the decoded `body` (no Content-Encoding, its own length), for callers that
    read `.status_code`, `.headers`, `.json()` and `.text`."""
    dropped = {"content-encoding", "content-length", "transfer-encoding"}
    headers = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in dropped]
    return httpx.Response(resp.status_code, headers=headers, content=body, request=resp.request)


def _timeout(seconds: float) -> httpx.Timeout:
    return httpx.Timeout(seconds, pool=seconds)


async def fetch(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    max_bytes: int,
    seconds: float,
    what: str | None = None,
    **kwargs: Any,
) -> httpx.Response:
    """One request, its answer read under the bounds; a complete decoded response. Raises httpx errors for
    transport failures and ReadRefused for a broken bound."""
    what = what or url
    headers = {**HEADERS, **(kwargs.pop("headers", None) or {})}
    try:
        async with asyncio.timeout(seconds):
            async with client.stream(method, url, headers=headers, timeout=_timeout(seconds), **kwargs) as resp:
                return decoded(resp, await read_async(resp, max_bytes, what=what))
    except TimeoutError:
        raise TooSlow(f"{what}: no complete answer within {seconds:g} s") from None


def fetch_sync(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    max_bytes: int,
    seconds: float,
    what: str | None = None,
    **kwargs: Any,
) -> httpx.Response:
    """`fetch` for a sync client (see read_sync for how the deadline holds)."""
    what = what or url
    headers = {**HEADERS, **(kwargs.pop("headers", None) or {})}
    with client.stream(method, url, headers=headers, timeout=_timeout(seconds), **kwargs) as resp:
        return decoded(resp, read_sync(resp, max_bytes, what=what, seconds=seconds))


__all__ = [
    "BadEncoding",
    "decoded",
    "decoder_for",
    "fetch",
    "fetch_sync",
    "HEADERS",
    "Oversized",
    "read_async",
    "read_sync",
    "Reader",
    "ReadRefused",
    "TooSlow",
]
