"""One settings object for the whole workbench.

Every setting is declared once, as data: its name, default and help. The same name is a CLI flag
(`--data-dir`), an environment variable (`CW_DATA_DIR`) and a field of `Settings` (`data_dir`), and
launch.sh passes the same names through. Precedence: explicit flag > environment > default.

Paths left empty derive from `data_dir` (the database, the clip root, thumbnails), so one flag moves
a whole installation.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

ENV_PREFIX = "CW_"
ROLES = ("all", "node", "head")
FLEET_MODES = ("auto", "sim", "gpu")


def url_list(value: Any) -> tuple[str, ...]:
    """Comma-separated base URLs (or a sequence of them) -> normalised URLs: a bare HOST:PORT gets http://,
    no trailing slash. A launch mode word is refused with the setting it belongs to."""
    items = value.split(",") if isinstance(value, str) else list(value or ())
    out = []
    for raw in (str(v).strip() for v in items):
        if not raw:
            continue
        if raw in FLEET_MODES:
            raise ValueError(f"{raw!r} is a launch mode, not a URL: use --fleet-mode {raw} (CW_FLEET_MODE)")
        url = (raw if "://" in raw else "http://" + raw).rstrip("/")
        if not re.match(r"^https?://[^/\s]+(/\S*)?$", url):
            raise ValueError(f"not a fleet URL: {raw!r} (expected http(s)://HOST:PORT, e.g. http://127.0.0.1:30000)")
        out.append(url)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Spec:
    name: str
    default: Any
    help: str
    type: type = str


SPECS: tuple[Spec, ...] = (
    Spec("data_dir", "var", "folder for the database, thumbnails, logs and the demo library"),
    Spec("db", "", "SQLite database file (default: DATA_DIR/workbench.db)"),
    Spec(
        "clip_root",
        "",
        "folder holding the clips, scanned by ingest; nothing outside it is ever served or sent. "
        "Ingest records it in the database, and from then on the recorded root is used (move it with "
        "`python -m data.library move-root`) (default: DATA_DIR/clips)",
    ),
    Spec("media_dir", "", "folder for thumbnails and filmstrips (default: DATA_DIR/media)"),
    Spec("host", "127.0.0.1", "address the web app binds; anything but loopback requires auth"),
    Spec("port", 7860, "port of the web app", int),
    Spec(
        "fleet_mode",
        "auto",
        "what the launcher starts: 'auto' (real vLLM on a GPU node, else simulated), 'sim' (the simulated "
        "fleet; its captions are marked as such) or 'gpu' (one vLLM replica per GPU)",
    ),
    Spec(
        "fleet_urls",
        (),
        "comma-separated OpenAI-compatible base URLs of a running fleet (a router or replicas) that the runner "
        "sends to and the Fleet tab watches (default: none; the runner then uses the launcher's router, "
        "http://127.0.0.1:ROUTER_PORT)",
        url_list,
    ),
    Spec("fleet_port", 8000, "first replica port (replica i listens on FLEET_PORT+i)", int),
    Spec("router_port", 30000, "port of the router in front of the replicas", int),
    Spec("router_prometheus_port", 29000, "port of the router's Prometheus metrics", int),
    Spec(
        "role",
        "all",
        "what this machine runs: 'all' (fleet, router, runner and app here), 'node' (a GPU node: "
        "MPS and one vLLM replica per GPU, bound to REPLICA_HOST, nothing else) or 'head' (router over "
        "WORKER_URLS, runner and app; no replicas here)",
    ),
    Spec(
        "replica_host",
        "127.0.0.1",
        "address replicas bind; on a GPU node serving a remote head, an address "
        "the head reaches (e.g. 10.0.0.5, or 0.0.0.0 for all)",
    ),
    Spec(
        "worker_urls",
        "",
        "comma-separated replica URLs on GPU nodes that the head's router sends work to, "
        "e.g. http://node1:8000,http://node1:8001,http://node2:8000",
    ),
    Spec(
        "media_url_base",
        "",
        "base URL replicas on other machines fetch clips from over HTTP(S) with signed "
        "URLs: the app's address as the GPU nodes see it (e.g. http://head:7860); empty: file:// paths under "
        "the clip root (replicas on this machine; on a head, the app's own address)",
    ),
    Spec("media_url_ttl", 900.0, "seconds a signed clip URL stays valid", float),
    Spec(
        "allowed_media_domains",
        "",
        "hosts replicas may fetch http(s) clips from (vLLM's "
        "--allowed-media-domains; default: the host of MEDIA_URL_BASE; empty: none)",
    ),
    Spec("gpus", "", "GPUs to use on a GPU node, e.g. 0,1,2 (default: all visible)"),
    Spec("model", "Qwen/Qwen3-VL-8B-Instruct", "model the replicas serve"),
    Spec("served_model_name", "", "name requests use for the model (default: MODEL)"),
    Spec("frames", 16, "frames sampled from each clip for the model (and for the filmstrip)", int),
    Spec(
        "max_tokens",
        640,
        "output token limit of every caption request (a caption at its 1,500-character "
        "bound plus the labels measured 478 tokens on vLLM 0.25)",
        int,
    ),
    Spec("temperature", 0.0, "sampling temperature of caption requests", float),
    Spec("per_replica_inflight", 48, "requests the runner keeps in flight per replica", int),
    Spec("request_timeout", 300.0, "seconds a caption request may take before it is abandoned", float),
    Spec("max_attempts", 4, "attempts per clip before its job item is failed", int),
    Spec("lease_seconds", 600.0, "how long a claimed job item stays leased without a result", float),
    Spec("workers", 0, "ingest worker processes (default: number of cores)", int),
    Spec(
        "auth",
        "on",
        "'on': users log in (the first admin is created from the command line); 'off': one local "
        "admin without login, allowed only when HOST is loopback",
    ),
    Spec("session_idle_minutes", 120.0, "a login session unused this long ends (server side)", float),
    Spec("session_hours", 12.0, "a login session ends this long after login, used or not", float),
    Spec(
        "trusted_proxies",
        "",
        "comma-separated addresses of reverse proxies whose X-Forwarded-For/-Proto "
        "headers are believed (default: none, the headers are ignored)",
    ),
    Spec(
        "allowed_hosts",
        "",
        "extra Host names the app answers to, comma-separated (loopback names and HOST "
        "are always allowed; others are refused against DNS rebinding)",
    ),
    Spec("job_quota", 20, "re-caption jobs an annotator may start per hour (leads and admins: no quota)", int),
)

_BY_NAME = {s.name: s for s in SPECS}
# `fleet` used to mean either the launch mode or the URLs; old scripts still pass it (--fleet, CW_FLEET)
LEGACY_FLEET = "fleet"


def _coerce(spec: Spec, value: Any) -> Any:
    if value is None:
        return spec.default
    if spec.type is bool:
        return str(value).lower() in {"1", "true", "yes", "on"}
    return spec.type(value)


@dataclass(frozen=True)
class Settings:
    """Resolved settings. Build with `Settings.load(...)`; never mutate (use `replace`)."""

    data_dir: Path = Path("var")
    db: Path = Path("var/workbench.db")
    clip_root: Path = Path("var/clips")
    media_dir: Path = Path("var/media")
    host: str = "127.0.0.1"
    port: int = 7860
    fleet_mode: str = "auto"
    fleet_urls: tuple[str, ...] = ()
    fleet_port: int = 8000
    router_port: int = 30000
    router_prometheus_port: int = 29000
    role: str = "all"
    replica_host: str = "127.0.0.1"
    worker_urls: str = ""
    media_url_base: str = ""
    media_url_ttl: float = 900.0
    allowed_media_domains: str = ""
    gpus: str = ""
    model: str = "Qwen/Qwen3-VL-8B-Instruct"
    served_model_name: str = ""
    frames: int = 16
    max_tokens: int = 640
    temperature: float = 0.0
    per_replica_inflight: int = 48
    request_timeout: float = 300.0
    max_attempts: int = 4
    lease_seconds: float = 600.0
    workers: int = 0
    auth: str = "on"
    session_idle_minutes: float = 120.0
    session_hours: float = 12.0
    trusted_proxies: str = ""
    allowed_hosts: str = ""
    job_quota: int = 20
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> "Settings":
        """Resolve every setting: `overrides` (flags; None values ignored) > `CW_*` env > default."""
        env = os.environ if environ is None else environ
        overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        overrides, env = _translate_legacy_fleet(overrides, env)
        unknown = set(overrides) - set(_BY_NAME)
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(sorted(unknown))}")
        values: dict[str, Any] = {}
        for spec in SPECS:
            raw = overrides.get(spec.name, env.get(ENV_PREFIX + spec.name.upper()))
            values[spec.name] = _coerce(spec, raw)
        data_dir = Path(values["data_dir"]).expanduser().resolve()
        values["data_dir"] = data_dir
        values["db"] = Path(values["db"]).expanduser().resolve() if values["db"] else data_dir / "workbench.db"
        values["clip_root"] = (
            Path(values["clip_root"]).expanduser().resolve() if values["clip_root"] else data_dir / "clips"
        )
        values["media_dir"] = (
            Path(values["media_dir"]).expanduser().resolve() if values["media_dir"] else data_dir / "media"
        )
        if values["role"] not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {values['role']!r}")
        if values["fleet_mode"] not in FLEET_MODES:
            hint = " (URLs go to --fleet-urls)" if "://" in str(values["fleet_mode"]) else ""
            raise ValueError(f"fleet mode must be one of {', '.join(FLEET_MODES)}, not {values['fleet_mode']!r}{hint}")
        return cls(**values)

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)

    @property
    def model_name(self) -> str:
        """The name requests carry in `model` (vLLM's --served-model-name)."""
        return self.served_model_name or self.model

    @property
    def auth_required(self) -> bool:
        return self.auth.lower() != "off" or not self.loopback

    @property
    def loopback(self) -> bool:
        return self.host in {"127.0.0.1", "localhost", "::1"}


def _translate_legacy_fleet(
    overrides: dict[str, Any], env: Mapping[str, str]
) -> tuple[dict[str, Any], Mapping[str, str]]:
    """`fleet` (flag) and CW_FLEET (environment) -> fleet_mode or fleet_urls, with a deprecation warning that
    names the new spelling. The new names win where both are given."""
    flag = overrides.pop(LEGACY_FLEET, None)
    if flag is not None and str(flag).strip():
        name, value = _legacy_fleet_target(str(flag))
        _warn_legacy(f"--fleet {flag}", f"--{name.replace('_', '-')} {value}")
        overrides.setdefault(name, value)
    raw = env.get(ENV_PREFIX + "FLEET", "").strip()
    if raw:
        name, value = _legacy_fleet_target(raw)
        _warn_legacy(f"{ENV_PREFIX}FLEET={raw}", f"{ENV_PREFIX}{name.upper()}={value}")
        key = ENV_PREFIX + name.upper()
        if key not in env:
            env = {**env, key: value}
    return overrides, env


def _legacy_fleet_target(value: str) -> tuple[str, str]:
    value = value.strip()
    return ("fleet_mode", value) if value in FLEET_MODES else ("fleet_urls", value)


def _warn_legacy(old: str, new: str) -> None:
    # FutureWarning: Python shows it by default (a DeprecationWarning would be hidden from the user who needs it)
    warnings.warn(
        f"{old} is deprecated: the fleet setting was split in two; write {new} "
        "(--fleet-mode auto|sim|gpu is what the launcher starts, --fleet-urls the fleet to send to)",
        FutureWarning,
        stacklevel=4,
    )


def add_arguments(parser: argparse.ArgumentParser, names: Iterable[str] | None = None) -> None:
    """Add `--flag` options for the named settings (all by default). Defaults stay None so that the
    environment can fill in what the command line leaves out. Values are parsed by `Settings.load`."""
    names = list(names or _BY_NAME)
    for name in names:
        spec = _BY_NAME[name]
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            default=None,
            type=spec.type if spec.type in (int, float, str) else str,
            help=f"{spec.help} [env {ENV_PREFIX}{name.upper()}; default {spec.default!r}]",
        )
    if {"fleet_mode", "fleet_urls"} & set(names):
        parser.add_argument(
            "--fleet",
            dest=LEGACY_FLEET,
            default=None,
            help="deprecated: a mode word (auto|sim|gpu) means --fleet-mode, URLs mean --fleet-urls",
        )


def from_args(args: argparse.Namespace) -> Settings:
    """Settings from parsed arguments (those added by `add_arguments`) plus the environment. A value the
    settings refuse ends the command with the message (exit status 2, as argparse does)."""
    try:
        return Settings.load({k: v for k, v in vars(args).items() if k in _BY_NAME or k == LEGACY_FLEET})
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
