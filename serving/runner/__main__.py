"""`python -m serving.runner`: run captioning jobs from the database against a vLLM fleet (or the simulated
one), as a process (launch.sh runs it under serving.supervisor; how the runner works: the package docstring).

examples:
    python -m serving.runner --db var/workbench.db --fleet-urls http://127.0.0.1:30000 --replicas 8
    python -m serving.runner --data-dir var --until-idle     # the fleet the launcher of var/ started
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys

from data.errors import DataError
from data.settings import add_arguments, from_args
from serving import console
from serving.fleet_key import auth
from serving.runner.loop import Runner
from serving.runner.start import serve

# options of this command that are Runner arguments of the same name
RUNNER_OPTIONS = ("replicas", "exit_when_idle", "drain_seconds", "backoff_base", "name")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m serving.runner", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(p)
    p.add_argument("--replicas", type=int, help="replicas behind a single router URL (default: ask its /workers)")
    p.add_argument("--until-idle", dest="exit_when_idle", action="store_true", help="exit when no runnable job is left")
    p.add_argument("--drain-seconds", type=float, default=30.0, help="on SIGTERM: seconds in-flight requests may take")
    p.add_argument("--backoff-base", type=float, default=0.5, help="first retry backoff in seconds (jittered)")
    p.add_argument("--name", default="runner", help="heartbeat name of this runner")
    p.add_argument("--log-level", default="INFO")
    return p


def main(argv: list[str] | None = None) -> int:
    console.install()  # its log may sit on a full disk: a line that cannot be written never stops the runner
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # httpx says every request at INFO: 7 lines a look at the fleet's health, one per caption. What the fleet does
    # is said by the runner instead, when it changes and in a summary (serving.runner.fleet_log)
    if logging.getLogger().level >= logging.INFO:  # --log-level DEBUG shows them
        logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = from_args(args)
    # every line it logs is redacted: the status line httpx logs per request, an exception's text, are the fleet's
    auth(settings).redact.install()
    try:
        runner = Runner(settings, **{k: getattr(args, k) for k in RUNNER_OPTIONS})
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    info = asyncio.run(serve(runner))
    print(json.dumps({k: v for k, v in info.items() if k != "replicas"}, default=str), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
