"""Ingest: walk a clip root and keep the `clips` table in step with it.

    python -m data.ingest var/clips --db var/workbench.db --workers 2

For every video file under the root (by extension) it hashes (streamed sha256), probes (data.library.probe), writes
a thumbnail and a filmstrip of the model's frames (data.library.media) and merges a sidecar JSON (`clip.json` beside
`clip.mp4`) into clips.sidecar. That work runs in worker processes (data.library.worker_pool), one clip at a time
each, under a per-clip deadline: a crash or a repeated overrun is the clip's recorded reason, and a later run
tries a timed-out clip again. Nothing about one file stops the run.

A run is planned, then applied: `plan(known, entries)` compares the walk with the rows (pure: no I/O) and
says what is refused, skipped, revived or to be probed; applying it probes in the pool and writes.

The folder scanned is recorded as the library's clip root (data.library.clip_root); another folder is refused.

Re-running is cheap and safe:
- a file whose size and mtime match its row is skipped;
- a new path whose content hash matches a row whose file vanished is a *move*: that row's path is updated
  and its captions stay with it;
- rows whose file is gone are marked `missing = 1` (never deleted: they may hold human captions).
Files refused without opening them (data.library.walk): non-UTF-8 names, symlinks leaving the root, broken symlinks,
anything
that is not a regular file (a directory or FIFO named x.mp4). Hidden names (".x") are ignored.

All database writes happen in this (parent) process, in batches inside `immediate(db)`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import sqlite_utils

from data import events, settings as settings_mod
from data.db import connect, immediate, now, secure_dir
from data.errors import DataError
from data.library import clip_root

# the walk's and the pool's names that callers and tests reach through data.ingest
from data.library.walk import Entry, walk
from data.library.worker_pool import (
    OUT_OF_MEMORY,
    TIMED_OUT,
    TIMEOUT_ATTEMPTS,
    TIMEOUT_GROWTH,
    WORKER_MEMORY_MIB,
    WorkerPool,
)
from data.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 20.0
BATCH = 64
FIELDS = (
    "sha256",
    "size",
    "mtime",
    "duration",
    "fps",
    "frames",
    "width",
    "height",
    "codec",
    "probe_error",
    "thumbnail",
    "filmstrip",
    "filmstrip_indices",
    "media_decoder",
    "preview",
    "sidecar",
)


# -- worker side: the work on one clip ---------------------------------------------------------------------


def process_clip(task: dict, report=None) -> dict:
    """Hash, probe and make media for one file. Runs in a worker process; returns a row fragment.
    `report(row)` is told what the probe found before the media work starts (the deadline grows with it)."""
    from data.library import media, probe

    out: dict[str, Any] = {"rel": task["rel"]}
    out["sha256"] = probe.sha256_file(task["abs"])
    p = probe.probe(task["abs"], max_seconds=task.get("max_seconds", probe.MAX_SECONDS))
    out.update(p.as_row())
    if report is not None and p.error is None:
        report({k: out.get(k) for k in ("frames", "width", "height", "duration")})
    if p.error is None and task.get("media"):
        try:
            m = media.make_media(
                task["abs"],
                task["media_dir"],
                out["sha256"],
                p.frames,
                task["frames"],
                task["decoder"],
                size=(p.width, p.height) if p.width and p.height else None,
                threads=task.get("decode_threads", 0),
            )
        except media.DecodeError as e:
            out["probe_error"] = f"corrupt: {e}"
        else:
            out["thumbnail"], out["filmstrip"] = m["thumbnail"], m["filmstrip"]
            out["filmstrip_indices"] = json.dumps(m["filmstrip_indices"])
            out["media_decoder"] = m["decode_backend"]
            if (out.get("codec") or "").lower() in media.PREVIEW_CODECS:
                try:  # review-only: a clip without a preview still gets its notice and filmstrip
                    out["preview"] = media.make_preview(
                        task["abs"], task["media_dir"], out["sha256"], threads=task.get("decode_threads", 0)
                    )
                except media.DecodeError as e:
                    log.warning("%s: %s", task["rel"], e)
    return out


# -- parent side ---------------------------------------------------------------------------------------------


def _load_known(db: sqlite_utils.Database) -> dict[str, dict]:
    return {
        r["path"]: r for r in db.query("SELECT id, path, sha256, size, mtime, missing, probe_error, sidecar FROM clips")
    }


def _write(db: sqlite_utils.Database, rows: list[tuple[str, dict]]) -> None:
    """Apply ('insert'|'update'|'move', row) changes in one transaction.

    Safe against a second ingest of the same root running at once: an insert of a path the other one has
    just inserted becomes an update (upsert), and a move onto a path that now exists is left to the next run.
    An update whose content hash changed (other footage under the same name) makes the clip's caption stale:
    its review goes back to 'unreviewed' (an export of approved captions no longer includes it) and a
    `clip.content_changed` event records both hashes (R13)."""
    if not rows:
        return
    t = now()
    with immediate(db):
        for action, row in rows:
            values = {k: row.get(k) for k in FIELDS}
            values.update(missing=0, updated_at=t)
            if action == "insert":
                values.update(path=row["rel"], ingested_at=t)
                cols = ", ".join(values)
                updates = ", ".join(f"{k} = excluded.{k}" for k in values if k not in ("path", "ingested_at"))
                db.execute(
                    f"INSERT INTO clips ({cols}) VALUES ({', '.join('?' for _ in values)}) "
                    f"ON CONFLICT(path) DO UPDATE SET {updates}",
                    list(values.values()),
                )
            else:
                if action == "move":
                    values["path"] = row["rel"]
                sets = ", ".join(f"{k} = ?" for k in values)
                db.execute(f"UPDATE OR IGNORE clips SET {sets} WHERE id = ?", [*values.values(), row["id"]])
                if row.get("_old_sha256"):
                    _content_changed(db, row["id"], row["_old_sha256"], row.get("sha256"))


def _content_changed(db: sqlite_utils.Database, clip_id: int, old_sha: str, new_sha: str | None) -> None:
    clip = next(db.query("SELECT review_status, current_caption_id FROM clips WHERE id = ?", [clip_id]), None)
    if clip is None:
        return
    if clip["review_status"] != "unreviewed":
        db.execute(
            "UPDATE clips SET review_status = 'unreviewed', reviewed_by = NULL, reviewed_at = NULL, review_note = NULL "
            "WHERE id = ?",
            [clip_id],
        )
    events.record(
        db,
        "ingest",
        "clip.content_changed",
        clip_id=clip_id,
        caption_id=clip["current_caption_id"],
        old_sha256=old_sha,
        new_sha256=new_sha,
        previous_review=clip["review_status"],
        note="the file now holds other footage: its caption describes the old one and needs review",
    )


# -- plan: what the walk means for the rows (pure) --------------------------------------------------------------


@dataclass(frozen=True)
class IngestOptions:
    """What one run does. None takes the settings' value (clip_root, db, media_dir, workers, frames)."""

    root: str | Path | None = None
    db_path: str | Path | None = None
    media_dir: str | Path | None = None
    workers: int | None = None
    frames: int | None = None
    decoder: str = "auto"  # auto | pyav | nvdec (data.library.media.resolve_decoder)
    media: bool = True  # False: probe only, no thumbnails or filmstrips
    timeout: float = DEFAULT_TIMEOUT  # seconds one clip may take on its first attempt
    progress: bool = False  # a tqdm bar on stderr
    max_seconds: float | None = None  # longest clip accepted (default data.library.probe.MAX_SECONDS)
    memory_mib: int = WORKER_MEMORY_MIB  # address-space cap of one worker
    attempts: int = TIMEOUT_ATTEMPTS  # overruns before a clip is recorded as timed out

    def resolved(self, s: Settings) -> IngestOptions:
        """These options with every None filled from `s` and the folders made absolute."""
        return replace(
            self,
            root=Path(self.root or s.clip_root).resolve(),
            db_path=self.db_path or s.db,
            media_dir=Path(self.media_dir or s.media_dir).resolve(),
            frames=self.frames or s.frames,
            workers=self.workers or s.workers or os.cpu_count() or 1,
        )


def decide(old: dict | None, e: Entry) -> str:
    """What one walked file needs, given its row (None: a new path):
    'refuse' (record the walk's reason), 'skip', 'revive' (rewrite the row without probing: back from missing,
    or only its sidecar changed) or 'probe'."""
    unchanged = old is not None and old["size"] == e.size and old["mtime"] == e.mtime
    if e.error is not None:
        return "skip" if unchanged and old["probe_error"] == e.error and not old["missing"] else "refuse"
    if not unchanged or (old["probe_error"] or "").startswith((TIMED_OUT, OUT_OF_MEMORY)):
        return "probe"  # new or changed; or a timeout or a worker out of memory, the machine's fault, maybe: again
    if not old["missing"] and old["sidecar"] == e.sidecar:
        return "skip"
    return "revive"


@dataclass
class Plan:
    """The changes one run makes, decided from the rows (`known`, by path) and the walk (`entries`).

    `writes` are decided without probing, in walk order: ('insert'|'update', row) for refused files and
    ('revive', {id, rel, sidecar}); `probe` lists the files to probe; `gone` holds the rows whose path the walk did
    not find (by path, and by content hash for moves). `place` turns a probe result into its write."""

    known: dict[str, dict]
    entries: dict[str, Entry]
    writes: list[tuple[str, dict]] = field(default_factory=list)
    probe: list[Entry] = field(default_factory=list)
    gone: dict[str, dict] = field(default_factory=dict)
    gone_by_hash: dict[str, list[dict]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "failed": 0, "skipped": 0, "moved": 0})

    def place(self, result: dict) -> tuple[str, dict]:
        """The write for one probe result: a 'move' when a new path holds the content of a row whose file
        vanished (its captions follow it), else an 'update' (with the old hash when the content changed: R13)
        or an 'insert'. Counts it."""
        e = self.entries[result["rel"]]
        row = {**result, "size": e.size, "mtime": e.mtime, "sidecar": e.sidecar}
        old = self.known.get(e.rel)
        if old is None and self.gone_by_hash.get(row.get("sha256")):
            moved_from = self.gone_by_hash[row["sha256"]].pop(0)
            self.gone.pop(moved_from["path"], None)
            self.counts["moved"] += 1
            return "move", {**row, "id": moved_from["id"]}
        self.counts["failed" if row.get("probe_error") else "ok"] += 1
        if old is None:
            return "insert", row
        changed = bool(old["sha256"] and row.get("sha256") and old["sha256"] != row["sha256"])
        return "update", {**row, "id": old["id"], "_old_sha256": old["sha256"] if changed else None}

    def vanished(self) -> list[int]:
        """Ids of the rows to mark missing: gone, and not already marked."""
        return [r["id"] for r in self.gone.values() if not r["missing"]]


def plan(known: dict[str, dict], entries: list[Entry]) -> Plan:
    """Compare the walk with the rows: no I/O, nothing written."""
    p = Plan(known, {e.rel: e for e in entries})
    for e in entries:
        old = known.get(e.rel)
        action = decide(old, e)
        if action == "refuse":
            row = {"rel": e.rel, "size": e.size, "mtime": e.mtime, "probe_error": e.error}
            p.writes.append(("update", {**row, "id": old["id"]}) if old else ("insert", row))
            p.counts["failed"] += 1
        elif action == "revive":
            p.writes.append(("revive", {"id": old["id"], "rel": e.rel, "sidecar": e.sidecar}))
            p.counts["skipped"] += 1
        elif action == "skip":
            p.counts["skipped"] += 1
        else:
            p.probe.append(e)
    p.gone = {path: r for path, r in known.items() if path not in p.entries}
    for r in p.gone.values():
        if r["sha256"]:
            p.gone_by_hash.setdefault(r["sha256"], []).append(r)
    return p


# -- apply: probe and write -------------------------------------------------------------------------------------


class _Writer:
    """Writes in batches of BATCH rows, each batch one transaction (`_write`)."""

    def __init__(self, db: sqlite_utils.Database):
        self.db, self.pending = db, []

    def add(self, action: str, row: dict) -> None:
        if action == "revive":  # the stored row as it is, at its path, with the new sidecar
            stored = next(self.db.query("SELECT * FROM clips WHERE id = ?", [row["id"]]))
            action, row = "update", {**stored, **row}
        self.pending.append((action, row))
        if len(self.pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        _write(self.db, self.pending)
        self.pending = []


@contextlib.contextmanager
def _progress_bar(show: bool, total: int):
    if not (show and total):
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(total=total, unit="clip", desc="ingest", file=sys.stderr, smoothing=0.1)
    try:
        yield bar
    finally:
        bar.close()


def _probe_tasks(p: Plan, opts: IngestOptions, decoder: str) -> list[dict]:
    from data.library import probe

    threads = decode_threads(opts.workers)
    return [
        {
            "rel": e.rel,
            "abs": e.abs,
            "media": opts.media,
            "media_dir": str(opts.media_dir),
            "frames": opts.frames,
            "decoder": decoder,
            "max_seconds": opts.max_seconds or probe.MAX_SECONDS,
            "decode_threads": threads,
        }
        for e in p.probe
    ]


def decode_threads(workers: int | None) -> int:
    """Decoder threads per worker: the pool already decodes one clip per core, so FFmpeg's default of one
    thread per core in every worker would run cores x cores threads (and each one costs address space)."""
    return max(1, min(4, (os.cpu_count() or 1) // max(1, workers or 1)))


def apply(db: sqlite_utils.Database, p: Plan, opts: IngestOptions, decoder: str) -> dict[str, Any]:
    """Write the plan: its refused and revived rows, then each probe result as it comes, then the missing
    marks. Returns the pool's figures (retried, worker_peak_rss_mib, worker_peak_vm_mib) when it probed anything."""
    writer = _Writer(db)
    for action, row in p.writes:
        writer.add(action, row)
    writer.flush()
    figures: dict[str, Any] = {}
    tasks = _probe_tasks(p, opts, decoder)
    if tasks:
        # a CUDA context reserves tens of GiB of address space: RLIMIT_AS would stop NVDEC workers from starting
        cap = 0 if decoder == "nvdec" else opts.memory_mib
        pool = WorkerPool(min(opts.workers, len(tasks)), opts.timeout, cap, attempts=opts.attempts, target=process_clip)
        try:
            with _progress_bar(opts.progress, len(tasks)) as bar:
                for result in pool.run(iter(tasks)):
                    writer.add(*p.place(result))
                    if bar:
                        bar.update()
                        bar.set_postfix(failed=p.counts["failed"], refresh=False)
        finally:
            figures = {
                "retried": pool.retried,
                "worker_peak_rss_mib": pool.peak_rss_mib,
                "worker_peak_vm_mib": pool.peak_vm_mib,
            }
            pool.close()
    writer.flush()
    vanished = p.vanished()
    if vanished:
        with immediate(db):
            db.conn.executemany(
                "UPDATE clips SET missing = 1, updated_at = ? WHERE id = ?", [(now(), i) for i in vanished]
            )
    return figures


def ingest(settings: Settings | None = None, *, db: sqlite_utils.Database | None = None, **options) -> dict[str, Any]:
    """Bring `clips` in step with the clip root. Returns a summary:
    {ok, failed, skipped, moved, missing, seen, retried, seconds, decoder}.

    `options` are IngestOptions' fields (root, db_path, media_dir, workers, frames, decoder, media, timeout,
    progress, max_seconds, memory_mib, attempts); they override `settings`. `db` may be an open connection of
    this thread."""
    from data.library import media as media_mod

    settings = settings or Settings.load(environ={})
    opts = IngestOptions(**options).resolved(settings)
    if not opts.root.is_dir():
        raise FileNotFoundError(f"clip root {opts.root} is not a folder")
    secure_dir(settings.data_dir)  # S9: the thumbnails and filmstrips written below are the library's
    if settings.data_dir.resolve() not in Path(opts.media_dir).resolve().parents:
        secure_dir(opts.media_dir)
    own_db = db is None
    db = db if db is not None else connect(opts.db_path)
    started = time.monotonic()
    decoder = media_mod.resolve_decoder(opts.decoder) if opts.media else "none"
    try:
        clip_root.record_root(db, opts.root)
        entries = list(walk(opts.root))
        p = plan(_load_known(db), entries)
        figures = apply(db, p, opts, decoder)
    finally:
        if own_db:
            db.close()
    summary: dict[str, Any] = {**p.counts, "missing": len(p.vanished()), "seen": len(entries), "retried": 0}
    summary.update(figures)
    summary["seconds"] = round(time.monotonic() - started, 3)
    summary["decoder"] = decoder
    return summary


def summary_line(summary: dict) -> str:
    return (
        f"ingest: {summary['ok']} ok, {summary['failed']} failed, {summary['skipped']} skipped, "
        f"{summary['moved']} moved, {summary['missing']} missing, {summary.get('retried', 0)} timeouts "
        f"retried ({summary['seen']} files seen, "
        f"{summary['seconds']:.1f} s, media decoder {summary['decoder']}"
        + (
            f", worker peak {summary['worker_peak_vm_mib']:.0f} MiB of address space"
            if summary.get("worker_peak_vm_mib")
            else ""
        )
        + ")"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m data.ingest",
        description="Scan a clip root: hash, probe, thumbnail and filmstrip every clip in parallel worker "
        "processes, and record each in the database (bad files with a reason).",
        epilog="examples:\n"
        "  python -m data.ingest var/clips --db var/workbench.db\n"
        "  python -m data.ingest /data/clips --data-dir /srv/wb --workers 8 --decoder nvdec\n"
        "  CW_DATA_DIR=var python -m data.ingest   # the settings' clip root",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("root", nargs="?", help="clip root to scan (default: the CLIP_ROOT setting)")
    parser.add_argument(
        "--decoder",
        choices=("auto", "pyav", "nvdec"),
        default="auto",
        help="decoder for thumbnails and filmstrips (auto: PyAV, measured faster than NVDEC "
        "for 16-frame filmstrips on a GPU node; nvdec to force the GPU)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds one clip may take on its first attempt (default {DEFAULT_TIMEOUT:g}); a "
        f"clip that overruns is retried with x{TIMEOUT_GROWTH:g} the deadline, "
        f"{TIMEOUT_ATTEMPTS} attempts in all, and the deadline grows with the clip's size",
    )
    parser.add_argument("--no-media", action="store_true", help="probe only: no thumbnails or filmstrips")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    settings_mod.add_arguments(parser, ["data_dir", "db", "clip_root", "media_dir", "workers", "frames"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    s = settings_mod.from_args(args)
    try:
        summary = ingest(
            s,
            root=args.root,
            decoder=args.decoder,
            media=not args.no_media,
            timeout=args.timeout,
            progress=not args.quiet,
        )
    except (FileNotFoundError, RuntimeError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary_line(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
