"""One settings object for the whole workbench, each setting declared once.

A setting is a field of `Settings`: its default, its help and how its text is read live in the field
(`setting(...)`), and everything else is derived from the field: the flag `--data-dir` (`add_arguments`), the
environment variable `CW_DATA_DIR`, the help line every command shows, and what launch.sh accepts and lists
(`python -m data.settings help|env`). Precedence: explicit flag > environment > default. A list setting is
parsed once, here, into a tuple.

Paths left empty derive from `data_dir` (the database, the clip root, thumbnails), so one flag moves a whole
installation.

    python -m data.settings help                        # every setting: flag, variable, default, help
    python -m data.settings env --port 7870              # the resolved settings as `export CW_...=...` lines
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

ENV_PREFIX = "CW_"
ROLES = ("all", "node", "head")
FLEET_MODES = ("auto", "sim", "gpu")


# ---- how a setting's text is read ------------------------------------------------------------------------------
def _items(value: Any) -> list[str]:
    items = value.split(",") if isinstance(value, str) else list(value or ())
    return [s for s in (str(v).strip() for v in items) if s]


def url_list(value: Any) -> tuple[str, ...]:
    """Comma-separated base URLs (or a sequence of them) -> normalised URLs: a bare HOST:PORT gets http://,
    no trailing slash. A launch mode word is refused with the setting it belongs to."""
    out = []
    for raw in _items(value):
        if raw in FLEET_MODES:
            raise ValueError(f"{raw!r} is a launch mode, not a URL: use --fleet-mode {raw} (CW_FLEET_MODE)")
        url = (raw if "://" in raw else "http://" + raw).rstrip("/")
        if not re.match(r"^https?://[^/\s]+(/\S*)?$", url):
            raise ValueError(f"not a fleet URL: {raw!r} (expected http(s)://HOST:PORT, e.g. http://127.0.0.1:30000)")
        out.append(url)
    return tuple(dict.fromkeys(out))


def replica_urls(value: Any) -> tuple[str, ...]:
    """Replica base URLs: http(s)://HOST:PORT each, no path (a router's worker list names replicas)."""
    urls = tuple(dict.fromkeys(u.rstrip("/") for u in _items(value)))
    bad = [u for u in urls if not re.match(r"^https?://[^/\s]+$", u)]
    if bad:
        raise ValueError(f"not a replica URL: {', '.join(bad)} (expected http://HOST:PORT, e.g. http://node1:8000)")
    return urls


def gpu_list(value: Any) -> tuple[int, ...]:
    """GPU indices: '0,1,2' (or '0 1 2', or a sequence) -> (0, 1, 2)."""
    items = re.split(r"[,\s]+", value.strip()) if isinstance(value, str) else list(value or ())
    out = []
    for item in (str(i) for i in items if str(i)):
        if not item.isdigit():
            raise ValueError(f"not a GPU index: {item!r} (expected e.g. 0,1,2)")
        out.append(int(item))
    return tuple(dict.fromkeys(out))


def name_list(value: Any) -> tuple[str, ...]:
    """Comma-separated host names or addresses, lower-cased, without repeats."""
    return tuple(dict.fromkeys(s.lower() for s in _items(value)))


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"not a whole number: {value!r}") from None


def _non_negative(value: Any) -> int:
    n = _int(value)
    if n < 0:
        raise ValueError(f"must be 0 or more, not {n}")
    return n


def _positive(value: Any) -> int:
    n = _int(value)
    if n < 1:
        raise ValueError(f"must be 1 or more, not {n}")
    return n


def _bytes(value: Any) -> int:
    """A size: bytes, or with a K, M or G suffix (powers of 1024): '64M' -> 67108864."""
    text = str(value).strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    try:
        n = int(float(text[:-1] if scale > 1 else text) * scale)
    except (ValueError, OverflowError):
        raise ValueError(f"not a size: {value!r} (bytes, or e.g. 64M, 1G)") from None
    if n < 0:
        raise ValueError(f"must be 0 or more bytes, not {value!r}")
    return n


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"not a number: {value!r}") from None


def _seconds(value: Any) -> float:
    x = _float(value)
    if not 0 <= x < float("inf"):
        raise ValueError(f"must be 0 or more seconds, not {x:g}")
    return x


def _memory_share(value: Any) -> float:
    x = _float(value)
    if not 0.5 <= x <= 0.95:
        raise ValueError(f"must be 0.5-0.95 (a share of the GPU's memory), not {x:g}")
    return x


def _path(value: Any) -> Path | None:
    return Path(value).expanduser() if str(value).strip() else None


def _text(value: Any) -> str:
    """A value as its flag or variable is written (the inverse of the setting's parser)."""
    if value is None:
        return ""
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def setting(default: Any, help: str, *, parse: Callable[[Any], Any] | None = None, choices: tuple = ()) -> Any:
    """Declare a setting: its default, its help, how its text is read (default: the default's type) and, for
    a word setting, the words it takes."""
    parse = parse or {int: _int, float: _float}.get(type(default), str)
    return dataclasses.field(default=default, metadata={"help": help, "parse": parse, "choices": choices})


@dataclasses.dataclass(frozen=True)
class Settings:
    """Resolved settings. Build with `Settings.load(...)`; never mutate (use `replace`)."""

    data_dir: Path = setting(Path("var"), "folder for the database, thumbnails, logs and the demo library", parse=_path)
    db: Path | None = setting(None, "SQLite database file (default: DATA_DIR/workbench.db)", parse=_path)
    clip_root: Path | None = setting(
        None,
        "folder holding the clips, scanned by ingest; nothing outside it is ever served or sent. Ingest records it "
        "in the database, and from then on the recorded root is used (move it with `python -m data.library "
        "move-root`) (default: DATA_DIR/clips)",
        parse=_path,
    )
    media_dir: Path | None = setting(
        None, "folder for thumbnails and filmstrips (default: DATA_DIR/media)", parse=_path
    )
    host: str = setting("127.0.0.1", "address the web app binds; anything but loopback requires auth")
    port: int = setting(7860, "port of the web app")
    fleet_mode: str = setting(
        "auto",
        "what the launcher starts: 'auto' (real vLLM on a GPU node, else simulated), 'sim' (the simulated fleet; "
        "its captions are marked as such) or 'gpu' (one vLLM replica per GPU)",
        choices=FLEET_MODES,
    )
    fleet_urls: tuple[str, ...] = setting(
        (),
        "comma-separated OpenAI-compatible base URLs of a running fleet (a router or replicas) that the runner sends "
        "to and the Fleet tab watches (default: none; the runner then uses what the launcher started)",
        parse=url_list,
    )
    fleet_port: int = setting(8000, "port of the first replica of the fleet (replica i listens on FLEET_PORT+i)")
    router_port: int = setting(30000, "port of the router in front of the replicas")
    router_prometheus_port: int = setting(29000, "port of the router's Prometheus metrics")
    role: str = setting(
        "all",
        "what this machine runs: 'all' (fleet, router, runner and app here), 'node' (a GPU node: MPS and one vLLM "
        "replica per GPU, bound to REPLICA_HOST, nothing else) or 'head' (router over WORKER_URLS, runner and app; "
        "no replicas here)",
        choices=ROLES,
    )
    replica_host: str = setting(
        "127.0.0.1",
        "address replicas bind; on a GPU node serving a remote head, an address the head reaches (e.g. 10.0.0.5, "
        "or 0.0.0.0 for all)",
    )
    worker_urls: tuple[str, ...] = setting(
        (),
        "comma-separated replica URLs on GPU nodes that the head's router sends work to, e.g. "
        "http://node1:8000,http://node1:8001,http://node2:8000",
        parse=replica_urls,
    )
    media_url_base: str = setting(
        "",
        "base URL replicas on other machines fetch clips from over HTTP(S) with signed URLs: the app's address as "
        "the GPU nodes see it (e.g. http://head:7860); empty: file:// paths under the clip root (replicas on this "
        "machine; on a head, the app's own address)",
    )
    media_url_ttl: float = setting(900.0, "seconds a signed clip URL stays valid")
    allowed_media_domains: tuple[str, ...] = setting(
        (),
        "hosts replicas may fetch http(s) clips from, comma-separated (vLLM's --allowed-media-domains; default: "
        "the host of MEDIA_URL_BASE; empty: none)",
        parse=name_list,
    )
    gpus: tuple[int, ...] = setting((), "GPUs to use on a GPU node, e.g. 0,1,2 (default: all visible)", parse=gpu_list)
    model: str = setting("Qwen/Qwen3-VL-8B-Instruct", "model the replicas serve")
    served_model_name: str = setting("", "name requests use for the model (default: MODEL)")
    frames: int = setting(16, "frames sampled from each clip for the model (and for the filmstrip)")
    replica_threads: int = setting(
        0,
        "CPU threads per thread pool (OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS: torch's intra-op "
        "pool among them) in every process of a vLLM replica (default 0: the node's cores / replicas / 5 busy "
        "processes per replica, 1-2: 3 and 4 threads spent more CPU per clip at the same clips/s, docs/BENCHMARKS.md)",
        parse=_non_negative,
    )
    pin_replicas: str = setting(
        "off",
        "'on': pin each vLLM replica to its share of the node's cores (a contiguous block of cores / replicas); "
        "'off': let the kernel place them",
        choices=("off", "on"),
    )
    frame_preprocess: str = setting(
        "gpu",
        "where each replica resizes and normalizes the decoded frames before the model: 'gpu' (Qwen3-VL's video "
        "processor on the replica's GPU: 0.80 vs 1.42 CPU core-s per clip at the same clips/s, one H200, "
        "docs/GPU.md) or 'cpu' (vLLM's default)",
        choices=("gpu", "cpu"),
    )
    gpu_memory_utilization: float = setting(
        0.8,
        "share of each GPU's memory a vLLM replica's engine takes for weights and KV cache (--gpu-memory-utilization); "
        "the rest is left to its API servers, which decode and prepare every frame on the GPU. At vLLM's default 0.9, "
        "32 frames per clip ran an H200 replica out of memory and 96 requests in flight killed it; at 0.8, 32 frames "
        "passed and the KV cache still holds ~100 requests of 5,700 tokens (docs/GPU.md). 0.5-0.95",
        parse=_memory_share,
    )
    max_tokens: int = setting(
        640,
        "output token limit of every caption request (a caption at its 1,500-character bound plus the labels "
        "measured 478 tokens on vLLM 0.25)",
    )
    temperature: float = setting(0.0, "sampling temperature of caption requests")
    per_replica_inflight: int = setting(
        48,
        "requests in flight per replica, kept by all runners of a fleet together (96 killed an H200 replica at 0.9 "
        "of its memory, and the launcher refuses more than 48 above 0.8; at 0.8, 16 frames per clip, 96 ran 4.06 "
        "clips/s steady against 3.70-3.80 at 48: docs/GPU.md, docs/BENCHMARKS.md)",
    )
    window_fill_seconds: float = setting(
        0.0,
        "seconds over which a replica that was idle fills its window of PER_REPLICA_INFLIGHT requests, one more "
        "every WINDOW_FILL_SECONDS / PER_REPLICA_INFLIGHT, so that new requests' prefill runs beside others' "
        "decoding instead of in waves (serving/runner/replicas.py; 1.06x steady on a warm H200 replica with dummy "
        "weights at 12 s for 48 and 24 s for 96, nothing yet on a freshly launched one: docs/GPU.md); 0: the whole "
        "window at once",
        parse=_seconds,
    )
    request_timeout: float = setting(300.0, "seconds a caption request may take before it is abandoned")
    max_attempts: int = setting(4, "attempts per clip before its job item is failed")
    lease_seconds: float = setting(600.0, "how long a claimed job item stays leased without a result")
    answer_check_seconds: float = setting(
        5.0,
        "CPU seconds the runner gives the check of one answer (JSON, schema, confidence) in its checker process "
        "(and 10x that, at least 60 s, of wall time); an answer past it fails its item as check_timeout, never sent "
        "again",
    )
    answer_checkers: int = setting(0, "checker processes that read the runner's answers (default: cores - 1, 1-8)")
    workers: int = setting(0, "ingest worker processes (default: number of cores)")
    auth: str = setting(
        "on",
        "'on': users log in (the first admin is created from the command line); 'off': one local admin without "
        "login, allowed only when HOST is loopback",
    )
    session_idle_minutes: float = setting(120.0, "a login session unused this long ends (server side)")
    session_hours: float = setting(12.0, "a login session ends this long after login, used or not")
    trusted_proxies: tuple[str, ...] = setting(
        (),
        "comma-separated addresses of reverse proxies whose X-Forwarded-For/-Proto headers are believed (default: "
        "none, the headers are ignored)",
        parse=name_list,
    )
    allowed_hosts: tuple[str, ...] = setting(
        (),
        "extra Host names the app answers to, comma-separated (loopback names and HOST are always allowed; others "
        "are refused against DNS rebinding)",
        parse=name_list,
    )
    job_quota: int = setting(20, "re-caption jobs an annotator may start per hour (leads and admins: no quota)")
    write_budget: int = setting(
        120,
        "writes one person may make per minute in the web app: saves, review decisions, opened clips, drafts, "
        "lease pings, flags, re-captions, samples, assignments, jobs, prompt versions (a person working fast "
        "makes 20-40); past it the next one is refused with the wait",
        parse=_positive,
    )
    write_burst: int = setting(
        60,
        "writes one person may make at once before WRITE_BUDGET paces them (a page pushing the drafts it kept "
        "while signed out, a quick run of n)",
        parse=_positive,
    )
    drafts_per_person: int = setting(
        200, "unsaved edits (drafts) kept per person; past it the oldest is dropped", parse=_positive
    )
    sessions_per_person: int = setting(
        20, "login sessions kept per person (browsers signed in at once); past it the oldest ends", parse=_positive
    )
    review_lease_seconds: float = setting(
        300.0,
        "how long a clip the review queue served (or a person opened) stays theirs without activity on it: "
        "meanwhile the others' next-unreviewed skips it; moving on or signing out gives it back at once",
    )

    log_cap: int = setting(
        20 << 20,
        "bytes each log of the stack may take on disk: the log and one older copy (NAME.log.1), each cut at half; "
        "lines longer than 2 KiB are cut too, with their length (e.g. 20M, 1G)",
        parse=_bytes,
    )
    log_free_floor: int = setting(
        64 << 20,
        "free space kept for the database: below it on a log's disk the stack writes no log line (it counts them and "
        "says how many when space is back), so saves go on longer than logging (e.g. 64M; 0: log to the last byte)",
        parse=_bytes,
    )

    def __post_init__(self) -> None:
        # the paths left empty follow the data dir; words are checked here, so no Settings holds an unknown one
        for name, default in (("db", "workbench.db"), ("clip_root", "clips"), ("media_dir", "media")):
            if getattr(self, name) is None:
                object.__setattr__(self, name, Path(self.data_dir) / default)
        for f in dataclasses.fields(self):
            choices = f.metadata["choices"]
            value = getattr(self, f.name)
            if choices and value not in choices:
                hint = " (URLs go to --fleet-urls)" if f.name == "fleet_mode" and "://" in str(value) else ""
                words = ", ".join(choices[:-1]) + f" or {choices[-1]}"
                raise ValueError(f"{flag(f.name)} must be {words}, not {value!r}{hint}")

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> "Settings":
        """Resolve every setting: `overrides` (flags; None values ignored) > `CW_*` environment > default.
        A value a setting cannot read is a ValueError naming the flag and the variable."""
        env = os.environ if environ is None else environ
        given = {k: v for k, v in (overrides or {}).items() if v is not None}
        unknown = set(given) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(sorted(unknown))}")
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = given.get(f.name, env.get(env_name(f.name)))
            if raw is None:
                continue
            try:
                values[f.name] = f.metadata["parse"](raw)
            except ValueError as e:
                raise ValueError(f"{flag(f.name)} ({env_name(f.name)}): {e}") from None
        data_dir = Path(values.get("data_dir") or cls.data_dir).expanduser().resolve()
        values["data_dir"] = data_dir
        for name in ("db", "clip_root", "media_dir"):
            if values.get(name) is not None:
                values[name] = values[name].expanduser().resolve()
        return cls(**values)

    def replace(self, **changes: Any) -> "Settings":
        """A copy with `changes`, each read by its setting as a flag's text would be ("a,b" for a list)."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        return dataclasses.replace(
            self, **{k: v if v is None else fields[k].metadata["parse"](v) for k, v in changes.items()}
        )

    def as_env(self) -> dict[str, str]:
        """Every setting as its `CW_*` variable: `Settings.load(environ=s.as_env()) == s`."""
        return {env_name(f.name): _text(getattr(self, f.name)) for f in dataclasses.fields(self)}

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


def flag(name: str) -> str:
    """The command-line flag of setting `name`: `--data-dir`."""
    return "--" + name.replace("_", "-")


def env_name(name: str) -> str:
    """The environment variable of setting `name`: `CW_DATA_DIR`."""
    return ENV_PREFIX + name.upper()


def add_arguments(parser: argparse.ArgumentParser, names: Iterable[str] | None = None) -> None:
    """Add the flags of the named settings (all by default), each with the setting's help, variable and
    default. Their defaults stay None so that the environment fills in what the command line leaves out;
    `Settings.load` reads the values."""
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    for name in names or fields:
        f = fields[name]
        shown = _text(f.default)  # an empty default is described by the help itself ("default: none", ...)
        parser.add_argument(
            flag(name),
            dest=name,
            default=None,
            metavar=name.upper(),
            help=f"{f.metadata['help']} [env {env_name(name)}" + (f"; default {shown}]" if shown else "]"),
        )


def add_command_arguments(
    parser: argparse.ArgumentParser, commands: Iterable[argparse.ArgumentParser], names: Iterable[str]
) -> None:
    """The named settings' flags on a command line with subcommands: on `parser` and on each subcommand's parser,
    so that `--data-dir D` works before and after the subcommand (`accounts add bob --data-dir D`, as
    `accounts --data-dir D add bob`). A subcommand's copy has no default (argparse.SUPPRESS): a flag given
    before the subcommand is not overwritten by the subcommand's None."""
    names = list(names)
    add_arguments(parser, names)
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    for sub in commands:
        for name in names:
            sub.add_argument(
                flag(name),
                dest=name,
                default=argparse.SUPPRESS,
                metavar=name.upper(),
                help=f"{fields[name].metadata['help']} [env {env_name(name)}]",
            )


def from_args(args: argparse.Namespace) -> Settings:
    """Settings from parsed arguments (those added by `add_arguments`) plus the environment. A value the
    settings refuse ends the command with the message (exit status 2, as argparse does)."""
    names = {f.name for f in dataclasses.fields(Settings)}
    try:
        return Settings.load({k: v for k, v in vars(args).items() if k in names})
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> int:
    """`help`: every setting's flag, variable, default and help (launch.sh's --help shows it). `env [FLAGS]`:
    the settings the flags and the environment resolve to, as `export CW_...=...` lines for a shell to eval
    (launch.sh passes its setting flags through it); a bad value exits 2 with the message. `--prog NAME`
    (first) names the command in messages."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and not argv[0].startswith("-") else "help"
    prog = "python -m data.settings"
    if argv[:1] == ["--prog"] and len(argv) > 1:
        prog, argv = argv[1], argv[2:]
    p = argparse.ArgumentParser(
        prog=prog,
        add_help=False,
        allow_abbrev=False,
        usage=argparse.SUPPRESS,
        formatter_class=lambda prog: argparse.HelpFormatter(prog, max_help_position=32, width=116),
    )
    add_arguments(p)
    if command == "help":
        print(p.format_help().replace("options:", "settings (each also an environment variable CW_<NAME>):", 1))
        return 0
    if command != "env":
        print(f"{prog}: unknown command {command!r} (help or env)", file=sys.stderr)
        return 2
    args = p.parse_args(argv)
    try:
        settings = Settings.load({k: v for k, v in vars(args).items()})
    except ValueError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    for name, value in settings.as_env().items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
