"""What `serving.launcher up` started, in DATA_DIR/run/fleet.json: the processes (pid, pgid, log), the replica
and router URLs. Written as soon as each process starts, so `down` and `status` work from another shell and a
failed start can be cleaned up; read by whatever needs the fleet's URL (the runner, `launcher url`)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from data.settings import Settings


# ---- records --------------------------------------------------------------------------------------------------
def record_path(settings: Settings) -> Path:
    return settings.data_dir / "run" / "fleet.json"


def load_record(settings: Settings) -> dict | None:
    try:
        return json.loads(record_path(settings).read_text())
    except (OSError, ValueError):
        return None


def save_record(settings: Settings, rec: dict) -> None:
    path = record_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1))
    os.replace(tmp, path)


def fleet_precision(settings: Settings, urls, rec: dict | None = None) -> str | None:
    """What the fleet at `urls` computes in (bf16, fp8, ...) as this data dir's launcher started it, or None when
    no record here describes it: no fleet launched from here, another fleet's record, a head (its replicas were
    started on the nodes), a simulated fleet, or a record older than this field."""
    rec = rec if rec is not None else load_record(settings)
    if not rec or not rec.get("precision"):
        return None
    ours = {rec.get("router_url"), *(rec.get("replica_urls") or [])} - {None}
    return str(rec["precision"]) if ours & {u.rstrip("/") for u in urls} else None


def router_metrics_url(settings: Settings, urls, rec: dict | None = None) -> str | None:
    """Where the router among `urls` serves its Prometheus metrics, when this data dir's launcher started it (its
    record says where), else None: a fleet started elsewhere does not say."""
    rec = rec if rec is not None else load_record(settings)
    if not rec or not rec.get("router_url") or not rec.get("router_metrics_url"):
        return None
    return str(rec["router_metrics_url"]) if rec["router_url"] in {u.rstrip("/") for u in urls} else None


def fleet_url(settings: Settings, rec: dict | None = None) -> str:
    """The URL(s) the runner should use: the router if there is one, else the replicas, comma-separated."""
    rec = rec if rec is not None else load_record(settings)
    if rec:
        return rec.get("router_url") or ",".join(rec.get("replica_urls") or [])
    if settings.role == "head" and not shutil.which("vllm-router"):
        return ",".join(settings.worker_urls)
    return f"http://127.0.0.1:{settings.router_port}"


def fleet_gpus(settings: Settings, urls, rec: dict | None = None) -> list[str] | None:
    """The GPU model of each replica of the fleet at `urls` as this data dir's launcher recorded it (nvidia-smi's
    names), or None when no record here names them all: no fleet launched from here, another fleet's record, a
    head (its replicas run on the nodes), a simulated fleet, a record older than this field, or a GPU nvidia-smi
    did not name."""
    rec = rec if rec is not None else load_record(settings)
    gpus = (rec or {}).get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return None
    ours = {rec.get("router_url"), *(rec.get("replica_urls") or [])} - {None}
    if not ours & {u.rstrip("/") for u in urls}:
        return None
    names = [g.get("name") if isinstance(g, dict) else None for g in gpus]
    return [str(n) for n in names] if all(isinstance(n, str) and n for n in names) else None
