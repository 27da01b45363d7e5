#!/usr/bin/env python3
"""Download the project's own wheels for the offline GPU machine, beside the vLLM bundle (README.md, step 2).

The bundle (build_bundle.sh) carries vLLM and its pinned dependencies; the GPU image has torch, numpy, httpx,
psutil, pytest, tokenizers (README.md, "What the GPU machine has"). What the project needs besides, as wheels for
Python 3.12 on manylinux x86_64 (the platforms build_bundle.sh downloads for), each fetched with `--no-deps`:

  .whl   the GPU test, node_run and the runner: av, sqlite-utils and what only it needs (sqlite-fts4,
         click-default-group, tabulate, pluggy), vllm-router, orjson, google-re2 (the answer checks' patterns),
         py-spy (~62 MB)
  .whl2  the web app (`./launch.sh --fleet-mode gpu`, a head): gradio and what only it needs (~46 MB), a second
         carry, installed after the bundle on PYTHONPATH so that the bundle's pins (fastapi, starlette, pydantic) win

A name the project constrains takes the project's range (pyproject.toml: `av>=14`, `gradio>=6.31`, ...). A name a
wheel fetched before it asks for takes that wheel's range too (gradio pins its gradio-client), so each folder is
one consistent set. Neither folder holds a package of the bundle's pins: there the bundle's version must win.

usage: python3 serving/gpu_bundle/fetch_wheels.py [--out DIR] [--only whl|whl2] [--dry-run]
       (DIR: the repository root by default, where .whl/ and .whl2/ are ignored by git)
"""

from __future__ import annotations

import argparse
import email.parser
import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PYTHON = "3.12"  # the GPU image's /opt/torch/.venv
# in dependency order: a wheel's own ranges narrow those of the names after it
FOLDERS = {
    "whl": [
        "av",
        "sqlite-utils",
        "sqlite-fts4",
        "click-default-group",
        "tabulate",
        "pluggy",
        "vllm-router",
        "orjson",
        "google-re2",
        "py-spy",
    ],
    "whl2": [
        "gradio",
        "gradio-client",
        "groovy",
        "hf-gradio",
        "httpx2",
        "httpcore2",
        "pandas",
        "python-dateutil",
        "pytz",
        "tzdata",
        "pydub",
        "safehttpx",
        "semantic-version",
        "tomlkit",
        "typer",
        "shellingham",
        "brotli",
        "annotated-doc",
        "truststore",
        "rich",
        "markdown-it-py",
        "mdurl",
        "pygments",
    ],
}
# what a Requires-Dist marker is read against: the GPU machine
TARGET = {"python_version": PYTHON, "python_full_version": PYTHON + ".0", "sys_platform": "linux"}
TARGET |= {"platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix", "extra": ""}


def norm(name: str) -> str:
    """A distribution name as PyPI compares them (PEP 503): `Click_Default.Group` is `click-default-group`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _split(requirement: str) -> tuple[str, str, str]:
    """(name, version range, marker) of a PEP 508 line, without extras."""
    req, _, marker = requirement.partition(";")
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*\(?([^)]*)\)?", req)
    if not m:
        raise ValueError(f"not a requirement: {requirement!r}")
    return norm(m.group(1)), m.group(3).strip(), marker.strip()


def _applies(marker: str) -> bool:
    """Whether a Requires-Dist marker holds on the GPU machine (no marker: always)."""
    if not marker:
        return True
    from packaging.markers import Marker  # pip's own dependency, and gradio's

    return Marker(marker).evaluate(TARGET)


def project_ranges(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """{name: range} of every requirement of the project and its extras (pyproject.toml)."""
    p = tomllib.loads(pyproject.read_text())["project"]
    lines = list(p["dependencies"]) + [r for extra in p.get("optional-dependencies", {}).values() for r in extra]
    out: dict[str, str] = {}
    for line in lines:
        name, spec, _ = _split(line)
        out[name] = ",".join(filter(None, [out.get(name, ""), spec]))
    return out


def wheel_ranges(folder: Path) -> dict[str, str]:
    """{name: range} that the wheels in `folder` ask for (their Requires-Dist that hold on the GPU machine)."""
    out: dict[str, str] = {}
    for whl in sorted(folder.glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            headers = email.parser.Parser().parsestr(z.read(meta).decode("utf-8", "replace"), headersonly=True)
        for line in headers.get_all("Requires-Dist") or []:
            name, spec, marker = _split(line)
            if spec and _applies(marker):
                out[name] = ",".join(filter(None, [out.get(name, ""), spec]))
    return out


def bundle_platforms(builder: Path = HERE / "build_bundle.sh") -> list[str]:
    """The --platform values build_bundle.sh downloads for: the wheels here must run beside them."""
    return re.findall(r"--platform\s+(\S+)", builder.read_text())


def bundle_pins(pins: Path = HERE / "gpu-pins.txt") -> set[str]:
    return {norm(line.split("==")[0]) for line in pins.read_text().split() if line.strip()}


def pip_download(requirement: str, dest: Path) -> list[str]:
    """The command that downloads one wheel for the GPU machine into `dest`."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    cmd += ["--python-version", PYTHON, "--implementation", "cp"]
    for p in bundle_platforms():
        cmd += ["--platform", p]
    return cmd + ["-d", str(dest), requirement]


def requirement(name: str, *ranges: dict[str, str]) -> str:
    """`name` with every range that `ranges` give it, each once: `gradio-client==2.7.2`."""
    parts = [p.strip() for r in ranges for p in r.get(name, "").split(",") if p.strip()]
    return name + ",".join(dict.fromkeys(parts))


def fetch(folder: str, out: Path, *, dry_run: bool = False) -> list[list[str]]:
    """Download FOLDERS[folder] into out/.<folder>, one wheel at a time (or print the commands); the commands."""
    dest = out / f".{folder}"
    clash = sorted(set(FOLDERS[folder]) & bundle_pins())
    if clash:
        raise SystemExit(f"{', '.join(clash)}: in the bundle's pins (gpu-pins.txt), whose version must win")
    ours = project_ranges()
    done = []
    if not dry_run:  # made anew: a wheel of an earlier run would be installed beside its newer release
        dest.mkdir(parents=True, exist_ok=True)
        for old in dest.glob("*.whl"):
            old.unlink()
    for name in FOLDERS[folder]:
        cmd = pip_download(requirement(name, ours, {} if dry_run else wheel_ranges(dest)), dest)
        print(shlex.join(["python3", *cmd[1:]]), flush=True)
        if not dry_run:
            run = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
            # pip names each index location of this machine's configuration it skips: noise, as build_bundle.sh says
            said = [line for line in run.stderr.splitlines() if not line.startswith("WARNING: Location")]
            print("\n".join(said), file=sys.stderr, end="\n" if said else "")
            if run.returncode:
                raise SystemExit(f"pip could not download {cmd[-1]!r} for the GPU machine (exit {run.returncode})")
        done.append(cmd)
    if not dry_run:
        size = sum(f.stat().st_size for f in dest.glob("*.whl"))
        print(f"{dest}: {len(list(dest.glob('*.whl')))} wheels, {size / 2**20:.0f} MiB")
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT, help="where .whl/ and .whl2/ go (default: the repository)")
    ap.add_argument("--only", choices=sorted(FOLDERS), help="one folder (default: both)")
    ap.add_argument("--dry-run", action="store_true", help="print the pip commands, download nothing")
    args = ap.parse_args(argv)
    for folder in [args.only] if args.only else list(FOLDERS):
        fetch(folder, args.out, dry_run=args.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
