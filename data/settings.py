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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

ENV_PREFIX = "CW_"
ROLES = ("all", "node", "head")


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
        "fleet",
        "auto",
        "where captions come from: 'auto' (real vLLM on a GPU node, else simulated), "
        "'sim', 'gpu', or comma-separated OpenAI-compatible base URLs",
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
    fleet: str = "auto"
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


def add_arguments(parser: argparse.ArgumentParser, names: Iterable[str] | None = None) -> None:
    """Add `--flag` options for the named settings (all by default). Defaults stay None so that the
    environment can fill in what the command line leaves out."""
    for name in names or _BY_NAME:
        spec = _BY_NAME[name]
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            default=None,
            type=spec.type if spec.type is not bool else str,
            help=f"{spec.help} [env {ENV_PREFIX}{name.upper()}; default {spec.default!r}]",
        )


def from_args(args: argparse.Namespace) -> Settings:
    """Settings from parsed arguments (those added by `add_arguments`) plus the environment."""
    return Settings.load({k: v for k, v in vars(args).items() if k in _BY_NAME})
