"""Short-lived signed URLs for clips, so that replicas on other nodes can fetch them from the app.

A replica on another machine cannot open `file:///clips/...`. Instead the runner sends
`{base}/media/signed/{clip_id}?exp={unix seconds}&sig={hex}`: the app's media route serves the clip to
anyone holding that URL until `exp`, and answers 403 to an expired or forged one. The URL names a clip id,
never a path: the app looks the path up in SQLite and serves it only if it resolves inside the clip root.

The signature is HMAC-SHA256 over `"{clip_id}.{exp}"` with a 32-byte key kept in the data dir
(`DATA_DIR/media-url.key`, mode 0600, created on first use). The runner and the app on the head share the
data dir and so the key; nothing else needs it. Rotating the key (deleting the file, restarting app and
runner) invalidates every URL in flight: those items fail with the fetch error (a 4xx, not retried) and can be
retried from the job.

Why not itsdangerous: it would work, but the token here is two integers and one MAC, and the verification
rule (expiry checked against our clock, constant-time compare) is the whole of the security argument; ten
lines of `hmac` keep it visible.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from serving import keyfile
from serving.errors import FleetError

KEY_FILE = "media-url.key"
KEY_BYTES = 32
ROUTE = "/media/signed"
# A signature is accepted until `exp`; a URL whose exp lies further ahead than this was not made by us
# (our TTLs are minutes) and is refused even with a valid MAC, bounding the damage of a leaked key's URLs.
MAX_TTL_S = 24 * 3600


class MediaKeyError(FleetError, RuntimeError):
    """The key file exists but cannot be trusted (wrong size, or readable by others); a RuntimeError too, as it
    was before it joined the fleet errors."""

    kind = "media_key"


def key_path(data_dir: str | Path) -> Path:
    return Path(data_dir) / KEY_FILE


def load_key(data_dir: str | Path) -> bytes:
    """The signing key of this installation, created (0600) on first use."""
    path = key_path(data_dir)
    key = keyfile.read_or_make(path, lambda: secrets.token_bytes(KEY_BYTES)) or b""
    if len(key) < KEY_BYTES:
        raise MediaKeyError(
            f"{path} holds {len(key)} bytes, not a {KEY_BYTES}-byte key: delete it and start "
            "again, app and runner (a new key is made; URLs already sent are then refused)"
        )
    return key


def signature(key: bytes, clip_id: int, exp: int) -> str:
    return hmac.new(key, f"{int(clip_id)}.{int(exp)}".encode(), hashlib.sha256).hexdigest()


def signed_url(base: str, key: bytes, clip_id: int, *, ttl: float, now: float | None = None) -> str:
    """The URL a replica fetches clip `clip_id` from, valid for `ttl` seconds."""
    exp = int((time.time() if now is None else now) + max(1.0, float(ttl)))
    return f"{base.rstrip('/')}{ROUTE}/{int(clip_id)}?exp={exp}&sig={signature(key, clip_id, exp)}"


_EXP = re.compile(r"[0-9]{1,12}")  # Unix seconds, ASCII digits (int() also takes other scripts' digits)
_SIG = re.compile(r"[0-9a-fA-F]{64}")


def check(key: bytes, clip_id: int, exp: Any, sig: Any, *, now: float | None = None) -> str | None:
    """Why the signed request is refused ("expired", "bad signature", ...), or None if it is good."""
    if isinstance(exp, int) and not isinstance(exp, bool):
        exp = str(exp)
    if not isinstance(exp, str) or not _EXP.fullmatch(exp):
        return "malformed expiry"
    exp_i = int(exp)
    # ASCII hex only: hmac.compare_digest raises TypeError on non-ASCII text (uncaught: an anonymous 500)
    if not isinstance(sig, str) or not _SIG.fullmatch(sig):
        return "malformed signature"
    if not hmac.compare_digest(signature(key, clip_id, exp_i), sig.lower()):
        return "bad signature"
    t = time.time() if now is None else now
    if exp_i < t:
        return "expired"
    if exp_i > t + MAX_TTL_S:
        return "expiry too far ahead"
    return None


def media_domains(settings: Any) -> str:
    """vLLM's `--allowed-media-domains` for replicas: `allowed_media_domains` if set, else the host of
    `media_url_base` ('' when clips go as file://)."""
    if settings.allowed_media_domains:
        return ",".join(settings.allowed_media_domains)
    base = (getattr(settings, "media_url_base", "") or "").strip()
    return (urlsplit(base).hostname or "").lower() if base else ""


__all__ = [
    "check",
    "KEY_FILE",
    "load_key",
    "media_domains",
    "MediaKeyError",
    "ROUTE",
    "signature",
    "signed_url",
]
