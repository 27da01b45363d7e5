"""Where the fleet's replicas fetch clips from, recorded in the database like the clip root (data.library.clip_root).

A deployment is a role, a media base and a lifetime. On a single machine (`role` all, the default) nothing is
recorded and clips go to the replicas as `file://` paths under the clip root. A **head** (GPU nodes elsewhere)
records itself the first time it is launched (`record_head`, from `python -m serving.launcher up --role head`,
which `./launch.sh --role head` runs): its role, the base URL nodes fetch clips from (the app's own address, or
`--media-url-base`) and the lifetime of a signed URL. From then on every process that opens the library through
`data.library.clip_root.settings_for` -- the supervised runner, `python -m serving.caption`, a resumed job, a script
calling `serving.runner` -- sends signed URLs of that base, with no flag to remember.

A setting that contradicts the record is refused (`DeploymentMismatch`) with the command that changes the
record; a setting left at its default says nothing and the record applies:

    python -m data.deployment show --data-dir var
    python -m data.deployment set --role head --media-url-base http://10.0.0.1:7860 --data-dir var
    python -m data.deployment set --role all --data-dir var     # a single machine again: file:// URLs
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import socket
import sys
from pathlib import Path

import sqlite_utils

from data import events, settings as settings_mod
from data.db import connect, immediate, now
from data.errors import DataError, DeploymentMismatch

ROLES = ("all", "head")  # what the record can say; a GPU node has no database
LOOPBACK = ("127.0.0.1", "localhost", "::1")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(settings_mod.Settings)}


def media_base(settings: settings_mod.Settings) -> str:
    """Where replicas fetch clips from: `media_url_base` if set; on a head without it, the app's own address
    (it must then bind an address the nodes reach); otherwise '' (file:// under the clip root)."""
    base = (settings.media_url_base or "").strip()
    if base:
        return base.rstrip("/")
    if settings.role == "head":
        host = settings.host
        if host in LOOPBACK:
            raise ValueError(
                "the head's app binds 127.0.0.1, which GPU nodes cannot reach: pass --host with an "
                "address they reach (login is then required) or --media-url-base"
            )
        if host in ("0.0.0.0", "::"):
            host = socket.getfqdn()
        return f"http://{host}:{settings.port}"
    return ""


def recorded(db: sqlite_utils.Database) -> dict | None:
    """The recorded deployment (role, media_url_base, media_url_ttl, recorded_at, recorded_by), or None: a
    single machine that was never a head."""
    return next(db.query("SELECT * FROM deployment WHERE id = 1"), None)


def _change_command(settings: settings_mod.Settings, role: str, base: str, ttl: float) -> str:
    cmd = ["python", "-m", "data.deployment", "set", "--role", role]
    if role == "head":
        cmd += ["--media-url-base", base or "URL", "--media-url-ttl", f"{ttl:g}"]
    return shlex.join(cmd + ["--data-dir", str(settings.data_dir)])


def _describe(rec: dict) -> str:
    if rec["role"] == "head":
        base, ttl = rec["media_url_base"], rec["media_url_ttl"]
        return f"a head whose nodes fetch clips from {base} (signed URLs valid {ttl:g} s)"
    return "a single machine (clips go as file:// paths)"


def _contradictions(rec: dict, settings: settings_mod.Settings) -> list[str]:
    """The settings given (not left at their defaults) that say something else than the record."""
    out = []
    if settings.role not in (_DEFAULTS["role"], "node", rec["role"]):
        out.append(f"--role {settings.role}")
    base = (settings.media_url_base or "").strip().rstrip("/")
    if base and base != rec["media_url_base"]:
        out.append(f"--media-url-base {base}")
    if settings.media_url_ttl != _DEFAULTS["media_url_ttl"] and settings.media_url_ttl != rec["media_url_ttl"]:
        out.append(f"--media-url-ttl {settings.media_url_ttl:g}")
    return out


def settings_for(db: sqlite_utils.Database, settings: settings_mod.Settings) -> settings_mod.Settings:
    """`settings` with the recorded role, media base and TTL (unchanged when nothing is recorded, or for a GPU
    node, which has no library). Raises DeploymentMismatch when a given setting contradicts the record."""
    rec = recorded(db)
    if rec is None or settings.role == "node":
        return settings
    wrong = _contradictions(rec, settings)
    if wrong:
        want_role = settings.role if settings.role != _DEFAULTS["role"] else rec["role"]
        raise DeploymentMismatch(
            f"this library is recorded as {_describe(rec)}, and {', '.join(wrong)} says otherwise. Leave the "
            f"flag out to use the record, or change the record: "
            + _change_command(
                settings,
                want_role,
                (settings.media_url_base or rec["media_url_base"]).rstrip("/"),
                settings.media_url_ttl
                if settings.media_url_ttl != _DEFAULTS["media_url_ttl"]
                else rec["media_url_ttl"],
            )
        )
    return settings.replace(role=rec["role"], media_url_base=rec["media_url_base"], media_url_ttl=rec["media_url_ttl"])


def record_head(db: sqlite_utils.Database, settings: settings_mod.Settings, *, actor: str = "launch") -> dict:
    """Record the head this launch is (its media base: `media_base(settings)`), the first time; the same head
    again is a no-op. A head that would serve clips from another base or TTL than recorded is refused
    (DeploymentMismatch), as is a library set to a single machine. Raises ValueError when the head's app binds
    an address nodes cannot reach."""
    base = media_base(settings.replace(role="head"))
    with immediate(db):
        rec = recorded(db)
        if rec is None:
            rec = {"role": "head", "media_url_base": base, "media_url_ttl": float(settings.media_url_ttl)}
            db.execute(
                "INSERT INTO deployment (id, role, media_url_base, media_url_ttl, recorded_at, recorded_by) "
                "VALUES (1, ?, ?, ?, ?, ?)",
                ["head", base, rec["media_url_ttl"], now(), actor],
            )
            events.record(db, actor, "deployment.record", **rec)
            return rec
    ttl_given = settings.media_url_ttl != _DEFAULTS["media_url_ttl"]
    if (
        rec["role"] != "head"
        or base != rec["media_url_base"]
        or (ttl_given and settings.media_url_ttl != rec["media_url_ttl"])
    ):
        ttl = settings.media_url_ttl if ttl_given else rec["media_url_ttl"]
        raise DeploymentMismatch(
            f"this library is recorded as {_describe(rec)}; this launch would make it a head serving clips from "
            f"{base} (valid {ttl:g} s). If that is what you want, change the record first: "
            + _change_command(settings, "head", base, ttl)
        )
    return dict(rec)


def set_record(
    db: sqlite_utils.Database, role: str, media_url_base: str = "", media_url_ttl: float | None = None, *, actor: str
) -> dict:
    """Change the record: a head (`media_url_base` required, an http(s) URL) or a single machine (`all`)."""
    if role not in ROLES:
        raise DataError(f"role must be {' or '.join(ROLES)}, not {role!r}")
    base = (media_url_base or "").strip().rstrip("/")
    ttl = float(_DEFAULTS["media_url_ttl"] if media_url_ttl is None else media_url_ttl)
    if role == "head" and not (base.startswith(("http://", "https://")) and len(base) > 8):
        raise DataError(
            "a head needs --media-url-base: the app's address as the GPU nodes see it, e.g. http://10.0.0.1:7860"
        )
    if not 1 <= ttl <= 24 * 3600:
        raise DataError(f"--media-url-ttl must be between 1 and 86400 seconds, not {ttl:g}")
    if role == "all":
        base = ""
    with immediate(db):
        old = recorded(db)
        db.execute(
            "INSERT OR REPLACE INTO deployment (id, role, media_url_base, media_url_ttl, recorded_at, recorded_by) "
            "VALUES (1, ?, ?, ?, ?, ?)",
            [role, base, ttl, now(), actor],
        )
        events.record(
            db,
            actor,
            "deployment.set",
            role=role,
            media_url_base=base,
            media_url_ttl=ttl,
            was=None if old is None else {k: old[k] for k in ("role", "media_url_base", "media_url_ttl")},
        )
    return recorded(db)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m data.deployment",
        description="Show or change where the fleet fetches this library's clips from (a head's signed URLs, or "
        "file:// on a single machine). `env` prints the role the record gives, for launch.sh.",
        epilog="examples:\n"
        "  python -m data.deployment show --data-dir var\n"
        "  python -m data.deployment set --role head --media-url-base http://10.0.0.1:7860 --data-dir var\n"
        "  python -m data.deployment set --role all --data-dir var",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    show = sub.add_parser("show", help="print the recorded deployment")
    change = sub.add_parser("set", help="change the record (a head, or a single machine again)")
    change.add_argument("--role", dest="new_role", required=True, choices=ROLES, help="head or all")
    change.add_argument("--media-url-base", dest="new_base", default="", help="a head's: the app as nodes see it")
    change.add_argument("--media-url-ttl", dest="new_ttl", type=float, default=None, help="seconds (default 900)")
    env = sub.add_parser("env", help="the role, after the record, as an `export CW_ROLE=...` line (launch.sh)")
    settings_mod.add_command_arguments(parser, (show, change, env), ["data_dir", "db"])
    args = parser.parse_args(argv)
    s = settings_mod.from_args(args)
    if args.cmd == "env":
        if s.role != "node" and Path(s.db).exists():  # a node, or a library not made yet, has no record
            db = connect(s.db)
            try:
                s = settings_for(db, s)
            except DataError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            finally:
                db.close()
        print(f"export {settings_mod.env_name('role')}={shlex.quote(s.role)}")
        return 0
    db = connect(s.db)
    try:
        if args.cmd == "show":
            rec = recorded(db)
            print(_describe(rec) if rec else "nothing recorded: a single machine (clips go as file:// paths)")
            return 0
        rec = set_record(db, args.new_role, args.new_base, args.new_ttl, actor="admin")
        print(f"recorded: {_describe(rec)}")
        return 0
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        db.close()


if __name__ == "__main__":
    sys.exit(main())
