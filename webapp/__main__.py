"""Run the web app: `python -m webapp [settings flags]`.

Examples:
  python -m webapp --data-dir var                      # http://127.0.0.1:7860, login on
  python -m webapp --auth off                          # one local admin, loopback only
  python -m webapp --fleet-urls http://127.0.0.1:8000,http://127.0.0.1:8001   # replicas for the Fleet tab
  python -m webapp --fleet-mode sim                    # the simulated fleet: banner and [SIMULATED] marks

Binds 127.0.0.1 unless --host says otherwise; refuses a non-loopback host without login. Create the first
admin with `python -m webapp.accounts add NAME --role admin`.
"""

from __future__ import annotations

import argparse
import logging
import sys

from data import settings as settings_mod
from serving import console


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m webapp", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    settings_mod.add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    # the app's log may sit on a full disk: a line (or a traceback Gradio prints) that cannot be written must
    # never stop an event from answering
    console.install()
    # one line per record, with its time (each record bounded by serving.log_clip, each line by the log sink)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    settings = settings_mod.from_args(args)
    if settings.auth.lower() == "off" and not settings.loopback:
        print(f"error: --auth off is only allowed on a loopback host, not {settings.host}", file=sys.stderr)
        return 2
    import uvicorn

    from data import db as dbmod, users
    from data.errors import DataError
    from webapp import idle
    from webapp.app import build_app

    db = dbmod.connect(settings.db)
    if settings.auth_required and not users.list_users(db):
        print(
            "warning: no users yet: nobody can log in. Create the first admin with "
            "`python -m webapp.accounts add NAME --role admin`",
            file=sys.stderr,
        )
    db.close()
    try:
        app = build_app(settings)
    except DataError as e:  # e.g. a setting the library's recorded deployment contradicts (data.deployment)
        print(f"error: {e}", file=sys.stderr)
        return 2
    # uvicorn believes X-Forwarded-For/-Proto from 127.0.0.1 by default, which lets anyone on the machine (or a
    # local proxy passing the header through) pick the address the login limiter counts (S7): only from
    # --trusted-proxies.
    trusted = ",".join(settings.trusted_proxies)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        proxy_headers=bool(trusted),
        forwarded_allow_ips=trusted or "",
    )
    idle.Server(config).run()  # uvicorn's server, without its 10-a-second tick (webapp.idle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
