"""The fleet a data dir's record names (serving.launch.record), from any shell: `down` stops its process groups and
the CUDA MPS daemon, never by name; `status` says whether each process lives and what its health URL answers."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

from data.settings import Settings
from serving import procs
from serving.fleet.reader import FleetReader
from serving.launch.record import fleet_url, load_record, record_path


def down(settings: Settings, *, grace: float = 20.0, quiet: bool = False) -> int:
    """Stop every process group the record of `settings`' data dir names (SIGTERM, SIGKILL after `grace`
    seconds) and the MPS daemon, then remove the record."""
    rec = load_record(settings)
    if not rec:
        if not quiet:
            print("[launcher] nothing recorded: no fleet to stop")
        return 0
    for c in reversed(rec.get("procs", [])):
        was = procs.stop_group(c["pgid"], c["pid"], grace=grace)
        if not quiet:
            print(f"[launcher] {'stopped' if was else 'already gone:'} {c['name']} (pgid {c['pgid']})")
    if rec.get("mps"):
        try:
            subprocess.run(
                ["nvidia-cuda-mps-control"],
                input="quit\n",
                text=True,
                env={**os.environ, **rec["mps"]},
                capture_output=True,
                timeout=30,
            )
            if not quiet:
                print("[launcher] CUDA MPS daemon told to quit")
        except (OSError, subprocess.SubprocessError) as e:
            print(f"launcher: could not stop the MPS daemon: {e}", file=sys.stderr)
    try:
        record_path(settings).unlink()
    except OSError:
        pass
    return 0


def status(settings: Settings) -> int:
    """Print each recorded process, whether it lives and what its health URL answers. 0: all healthy;
    1: something is down; 3: nothing recorded."""
    rec = load_record(settings)
    if not rec:
        print("[launcher] no fleet recorded (python -m serving.launcher up)")
        return 3
    bad = 0
    reader = FleetReader(settings)  # with the fleet key: the router gate answers nothing without it
    for c in rec.get("procs", []):
        alive = procs.pid_alive(c["pid"])
        urls = [u for u in (c.get("url") or "").split(",") if u]
        health = []
        for u in urls:
            path = "/liveness" if c["name"].startswith("router") else "/health"
            r = reader.get(u + path, max_bytes=procs.HEALTH_BYTES, timeout=2.0)
            health.append(f"{u} {r.status_code if isinstance(r, httpx.Response) else type(r).__name__}")
        ok = alive and all(h.endswith(" 200") for h in health)
        bad += not ok
        print(f"{c['name']:<12} {'up' if alive else 'DOWN':<5} pgid {c['pgid']:<8} {'; '.join(health)}")
    print(f"fleet: {fleet_url(settings, rec)} ({rec.get('fleet')}{', MPS' if rec.get('mps') else ''})")
    return 0 if bad == 0 else 1
