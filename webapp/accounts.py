"""The web app's accounts from the command line: add users, set roles and passwords (data.users holds them).

Examples:
  python -m webapp.accounts add alice --role admin          # prompts for the password twice
  python -m webapp.accounts add carol --role lead --data-dir var   # --data-dir before or after the command
  python -m webapp.accounts add bob --role annotator --password-file /run/secrets/bob
  python -m webapp.accounts list
  python -m webapp.accounts set-role bob lead
  python -m webapp.accounts passwd bob
  python -m webapp.accounts disable bob
  python -m webapp.accounts ensure-admin    # first run: an `admin` with a random password, if there is no user
  python -m webapp.accounts sign-in-link bob   # a one-time link for bob's new browser (an hour): see below

A sign-in link is for a person who cannot get a turn at the login form from a network nobody of the team ever
signed in from, while someone keeps failing on their account from fresh networks (webapp.login.throttle): the browser
that opens it counts as one the account signed in from, so others' failures do not hold it back. It is not a
session: the password is still asked. Hand it to the person over a channel you trust; it works once, for an hour.
"""

from __future__ import annotations

import argparse
import getpass
import os
import secrets
import sys
from pathlib import Path

from data import db as dbmod, sessions, settings as settings_mod, team, users
from data.errors import DataError


def _password(args: argparse.Namespace) -> str:
    if args.password_file:
        return Path(args.password_file).read_text().rstrip("\r\n")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise DataError("the passwords differ")
    return first


def ensure_admin(db, data_dir: Path) -> None:
    """First run: no default password exists anywhere, so make a random one for `admin` and tell the operator."""
    if users.list_users(db):
        return
    password = secrets.token_urlsafe(12)
    users.create(db, "admin", role="admin", password=password, actor="launch")
    path = Path(data_dir) / "admin-password"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    print(
        f"created user 'admin' with password {password} (kept in {path}; change it with "
        f"`python -m webapp.accounts passwd admin`)"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m webapp.accounts", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("add", help="add a user, e.g. `add alice --role admin`")
    a.add_argument("name")
    # dest is not "role": that name is a setting (what a machine runs: all/node/head), and from_args reads it
    a.add_argument("--role", dest="user_role", choices=users.ROLES, default="annotator")
    a.add_argument("--password-file", help="read the password from this file instead of prompting")
    sub.add_parser("list", help="list users and roles, e.g. `list`")
    r = sub.add_parser("set-role", help="change a role, e.g. `set-role bob lead`")
    r.add_argument("name")
    r.add_argument("user_role", metavar="role", choices=users.ROLES)
    pw = sub.add_parser("passwd", help="set a new password, e.g. `passwd bob`")
    pw.add_argument("name")
    pw.add_argument("--password-file")
    sub.add_parser(
        "ensure-admin",
        help="if there is no user yet, create `admin` with a random password, print it "
        "and keep it in DATA_DIR/admin-password (mode 0600), e.g. `ensure-admin`",
    )
    link = sub.add_parser(
        "sign-in-link",
        help="print a one-time link (an hour) that lets bob's new browser past others' failed sign-ins, e.g. "
        "`sign-in-link bob --base-url https://workbench.example.org`",
    )
    link.add_argument("name")
    link.add_argument("--base-url", help="the app's address as people open it (default: http://HOST:PORT)")
    for cmd in ("disable", "enable"):
        d = sub.add_parser(cmd, help=f"{cmd} a user's login, e.g. `{cmd} bob`")
        d.add_argument("name")
    # --data-dir and --db before or after the command (`add bob --role lead --data-dir var`)
    settings_mod.add_command_arguments(p, sub.choices.values(), ["data_dir", "db"])
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = settings_mod.from_args(args)
    db = dbmod.connect(settings.db)
    try:
        if args.command == "add":
            u = users.create(db, args.name, role=args.user_role, password=_password(args))
            print(f"added {u['name']} ({u['role']})")
        elif args.command == "ensure-admin":
            ensure_admin(db, settings.data_dir)
        elif args.command == "list":
            for u in users.list_users(db):
                print("\t".join([u["name"], u["role"]] + (["disabled"] if u["disabled"] else [])))
        elif args.command == "set-role":
            u = users.set_role(db, args.name, args.user_role)
            print(f"{u['name']} is now {u['role']}")
        elif args.command == "sign-in-link":
            user = users.get(db, args.name)
            if user is None or user.get("disabled"):
                raise DataError(f"no active user named {args.name!r} (see `list`)")
            token = sessions.issue_link(db, user["name"])
            base = (args.base_url or f"http://{settings.host}:{settings.port}").rstrip("/")
            print(f"{base}/login/link/{token}")
            print(
                f"(for {user['name']}: works once, for {sessions.LINK_TTL_S / 3600:g} hour; the password is still "
                "asked)",
                file=sys.stderr,
            )
        elif args.command == "passwd":
            users.set_password(db, args.name, _password(args))
            print(f"password of {args.name} changed")
        else:
            u = team.set_disabled(db, args.name, args.command == "disable")
            back = f"; {u['released_clips']} assigned clip(s) back in the review queue" if u["released_clips"] else ""
            print(f"{args.name} {args.command}d{back}")
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2  # refused (a usage error, as the other command lines say it)
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
