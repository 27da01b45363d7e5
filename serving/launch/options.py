"""How one `up` / `down` of the fleet runs, beyond the installation's settings: `LaunchOptions`, whose fields are
the launch flags of `python -m serving.launcher` (a dry run, the vLLM version and extra arguments, the simulated
fleet's size, no router, no MPS, the start-up and stop deadlines), each declared once with its help."""

from __future__ import annotations

import argparse
import dataclasses


def _option(default, help: str, **argparse_kw):
    return dataclasses.field(default=default, metadata={"help": help, **argparse_kw})


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    """How one `up` / `down` runs, beyond the settings of the installation: each field is a flag of the same
    name (`vllm_args` is `--vllm-arg`, repeatable), declared here once with its help."""

    dry_run: bool = _option(False, "print every command (with its environment); start nothing")
    vllm_version: str | None = _option(None, "vLLM version to build flags for (default: the installed one)")
    vllm_args: tuple[str, ...] = _option(
        (),
        "extra argument for every vLLM replica, e.g. --vllm-arg=--load-format=dummy (repeatable)",
        flag="--vllm-arg",
        metavar="ARG",
    )
    sim_args: tuple[str, ...] = _option(
        (),
        "extra argument for the simulated fleet, e.g. --sim-arg='--speed 0.1' (repeatable)",
        flag="--sim-arg",
        metavar="ARG",
    )
    replicas: int = _option(4, "replicas of the simulated fleet (default 4)", type=int)
    no_router: bool = _option(False, "do not start vllm-router; the runner talks to replicas")
    no_mps: bool = _option(False, "do not start the CUDA MPS daemon")
    startup_timeout: float | None = _option(
        None, "seconds to wait for health (default 1800 for vLLM, 60 for the simulated fleet)", type=float
    )
    grace: float = _option(20.0, "seconds between SIGTERM and SIGKILL on down", type=float)

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """One flag per field, with the field's help and default (a bool is a switch, a tuple repeatable)."""
        for f in dataclasses.fields(cls):
            meta = dict(f.metadata)
            flag = meta.pop("flag", "--" + f.name.replace("_", "-"))
            if isinstance(f.default, bool):
                parser.add_argument(flag, dest=f.name, action="store_true", **meta)
            elif isinstance(f.default, tuple):
                parser.add_argument(flag, dest=f.name, action="append", default=[], **meta)
            else:
                parser.add_argument(flag, dest=f.name, default=f.default, **meta)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "LaunchOptions":
        """The options `add_arguments` parsed."""
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
