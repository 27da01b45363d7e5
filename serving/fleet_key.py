"""The fleet key: the bearer token every replica the launcher starts requires, and everything on the head sends.

A replica answers `/v1/...` only with `Authorization: Bearer <key>` (vLLM's `--api-key`, given to it as
`VLLM_API_KEY` so that the key never shows in a process list or a dry run); the router gate in front of
vllm-router (serving.router_gate) requires the same key, and vllm-router passes the header on to the replicas.
Every request to the fleet carries it: the fleet client's (serving.client) and every read of its health
(serving.fleet.reader: the runner's look, the Fleet and Jobs tabs, the launcher's health checks and `status`), each
from `auth(settings)`, which also holds what every text the fleet sends back goes through before it is stored,
logged or shown (`FleetAuth.redact`: the key, any bearer token and URL signatures removed, serving.redact).

It lives in `DATA_DIR/fleet.key` (0600). On a single machine or a head it is made on first use. A GPU node
never makes one: it must hold the head's, or its replicas would refuse the head (and `./launch.sh --role node`
says so before starting anything):

    python -m serving.fleet_key show --data-dir var     # on the head: the key (made once)
    python -m serving.fleet_key set --data-dir var      # on a node: paste it (one line on stdin)
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

from data.settings import Settings, add_arguments, from_args
from serving import keyfile
from serving.errors import FleetError
from serving.redact import Redactor

KEY_FILE = "fleet.key"
ENV = "VLLM_API_KEY"  # what vLLM (and the simulated fleet) read the key from when --api-key is not given
_KEY = re.compile(r"[A-Za-z0-9_-]{32,256}")


class FleetKeyError(FleetError, RuntimeError):
    """The key file is missing where it must exist, or holds something that is not a key (a RuntimeError too, as
    it was before it joined the fleet errors)."""

    kind = "fleet_key"


def path(settings: Settings) -> Path:
    return Path(settings.data_dir) / KEY_FILE


def load(settings: Settings, *, create: bool = False) -> str | None:
    """The key of this data dir; made (0600) when `create` and missing; None when missing otherwise."""
    raw = keyfile.read_or_make(path(settings), (lambda: secrets.token_urlsafe(32).encode()) if create else None)
    if raw is None:
        return None
    key = raw.decode("ascii", "replace").strip()
    if not _KEY.fullmatch(key):
        raise FleetKeyError(
            f"{path(settings)} does not hold a fleet key (32-256 letters, digits, '-' or '_'): store the head's "
            "with `python -m serving.fleet_key set`, or delete the file on the head to make a new one"
        )
    return key


@dataclass(frozen=True)
class FleetAuth:
    """A data dir's fleet key as requests carry it (`headers`), and the redactor every text from the fleet goes
    through (`redact`). Made by `auth(settings)`; the fleet client and the fleet reader hold one each."""

    key: str | None
    redact: Redactor = field(repr=False)

    @property
    def headers(self) -> dict[str, str]:
        """`{"authorization": "Bearer <key>"}`, or {} without a key (a fleet that wants none)."""
        return {"authorization": f"Bearer {self.key}"} if self.key else {}

    def __repr__(self) -> str:  # never the key, in a traceback or a log
        return f"FleetAuth(key={'set' if self.key else None})"


def auth(settings: Settings) -> FleetAuth:
    """The fleet key of `settings`' data dir (none: a fleet that wants none) and its redactor."""
    key = load(settings)
    return FleetAuth(key, Redactor([key]))


def headers(settings: Settings) -> dict[str, str]:
    """`{"authorization": "Bearer <key>"}` when this data dir has a key, else {} (a fleet that wants none)."""
    return auth(settings).headers


def require_for_node(settings: Settings) -> str:
    """The key a GPU node's replicas will require: the head's, stored here before the node starts."""
    key = load(settings)
    if key is None:
        raise FleetKeyError(
            f"this node has no fleet key ({path(settings)}): its replicas must require the head's. On the head run "
            f"`python -m serving.fleet_key show --data-dir DIR`, then here `python -m serving.fleet_key set "
            f"--data-dir {settings.data_dir}` and paste it"
        )
    return key


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m serving.fleet_key",
        description="Show the fleet key of a head (made on first use) or store a head's key on a GPU node.",
        epilog="examples:\n  python -m serving.fleet_key show --data-dir var\n"
        "  python -m serving.fleet_key set --data-dir var < head-fleet.key",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("command", choices=("show", "set"), help="show: print the key (made once); set: store one")
    add_arguments(p, ("data_dir",))
    args = p.parse_args(argv)
    settings = from_args(args)
    try:
        if args.command == "show":
            print(load(settings, create=True))
            return 0
        key = sys.stdin.readline().strip()
        if not _KEY.fullmatch(key):
            print("fleet_key: that is not a fleet key (what `show` prints on the head)", file=sys.stderr)
            return 2
        keyfile.write(path(settings), key.encode())
        print(f"stored in {path(settings)} (0600)", file=sys.stderr)
        return 0
    except FleetKeyError as e:
        print(f"fleet_key: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
