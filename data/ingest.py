"""Ingest: walk a clip root and keep the `clips` table in step with it.

    python -m data.ingest var/clips --db var/workbench.db --workers 2

For every video file under the root (by extension) it hashes (streamed sha256), probes (data.probe), writes
a thumbnail and a filmstrip of the model's frames (data.media) and merges a sidecar JSON (`clip.json` beside
`clip.mp4`) into clips.sidecar. That work runs in worker processes, one clip at a time each, under a
per-clip deadline: PyAV can crash or hang on hostile input, so a crash or a timeout kills only that worker
(a fresh one replaces it). A crash is the clip's recorded reason ("probe crashed (SIGSEGV)"). A timeout is
more often the machine's fault (a loaded GPU node) than the clip's, so it is retried with a longer deadline,
and the deadline also grows with the clip once its probe knows its size (duration x resolution); only a clip
that overruns every attempt is recorded ("probe timed out after 20 s, 60 s, 180 s (3 attempts)"), and a
later run tries it again. Nothing about one file stops the run.

The folder scanned is recorded as the library's clip root (data.library); another folder is refused.

Re-running is cheap and safe:
- a file whose size and mtime match its row is skipped;
- a new path whose content hash matches a row whose file vanished is a *move*: that row's path is updated
  and its captions stay with it;
- rows whose file is gone are marked `missing = 1` (never deleted: they may hold human captions).
Files refused without opening them: non-UTF-8 names, symlinks leaving the root, broken symlinks, anything
that is not a regular file (a directory or FIFO named x.mp4). Hidden names (".x") are ignored.

All database writes happen in this (parent) process, in batches inside `immediate(db)`.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import signal
import stat
import sys
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Iterator

import sqlite_utils

from data import events, library, limits, settings as settings_mod
from data.db import DataError, connect, immediate, now
from data.settings import Settings

log = logging.getLogger(__name__)

VIDEO_EXTENSIONS = frozenset({".mp4", ".mov", ".m4v", ".mkv", ".webm", ".avi", ".ts", ".mts"})
DEFAULT_TIMEOUT = 20.0
TIMEOUT_ATTEMPTS = 3  # a clip is recorded as timed out only after this many overruns
TIMEOUT_GROWTH = 3.0  # each retry waits this many times longer
# extra deadline per gigapixel of video (frames x width x height) once the probe knows it: the HEVC preview
# decodes every frame (1.3 s for a 10 s 1080p clip on an idle core, ~0.6 Gpx); x10 for a loaded machine
SECONDS_PER_GIGAPIXEL = 20.0
MAX_EXTRA_SECONDS = 600.0
TIMED_OUT = "probe timed out"
START_ALLOWANCE = 60.0  # a worker process that has not even started its task after this is stuck, not slow
# Address-space cap of one ingest worker. Python + PyAV + NumPy map ~0.6 GiB before decoding anything and a
# 4K clip's frame threads need ~0.5 GiB more; a decoder that wants more than this is decoding something hostile.
WORKER_MEMORY_MIB = 2048
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


@dataclass
class Entry:
    """One file found by the walk."""

    rel: str  # path relative to the root, as stored (UTF-8 text)
    abs: str
    size: int | None
    mtime: float | None
    error: str | None = None  # a reason found without opening the file
    sidecar: str | None = None  # JSON text


def storable_name(name: str) -> tuple[str, bool]:
    """(text fit for the database, whether the name was valid UTF-8). Undecodable bytes become \\xNN."""
    raw = os.fsencode(name)
    try:
        return raw.decode("utf-8"), True
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace"), False


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


def _sidecar(abs_path: str) -> str | None:
    """The sidecar JSON beside a clip, normalised, or a `_sidecar_error` note; never an exception. Bounded
    (R10): at most MAX_SIDECAR_BYTES read, nesting checked by a linear scan before parsing (the stdlib parser
    recurses: a deeply nested file raised RecursionError and stopped the whole ingest), and NaN/Infinity
    refused (they would reach the JSONL export, which strict parsers then reject)."""
    side = os.path.splitext(abs_path)[0] + ".json"
    name = os.path.basename(side)

    def refused(why: str) -> str:
        return json.dumps({"_sidecar_error": f"sidecar {name} {why}"}, ensure_ascii=False)

    try:
        if os.path.islink(side) or not os.path.isfile(side):
            return None
        with open(side, "rb") as f:
            raw = f.read(limits.MAX_SIDECAR_BYTES + 1)
    except OSError:
        return refused("is unreadable")
    if len(raw) > limits.MAX_SIDECAR_BYTES:
        return refused(f"is larger than {limits.MAX_SIDECAR_BYTES:,} bytes (ignored)")
    if not limits.json_depth_ok(raw):
        return refused(f"nests deeper than {limits.MAX_SIDECAR_DEPTH} levels (ignored)")
    try:
        data = limits.strict_json_loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        return refused(f"is not valid JSON ({str(e)[:80]})")
    if not isinstance(data, dict):
        data = {"value": data}
    return json.dumps(data, sort_keys=True, ensure_ascii=False, allow_nan=False)


def walk(root: str | Path) -> Iterator[Entry]:
    """Every candidate clip under `root`, classified as far as possible without opening it."""
    root = os.path.realpath(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        names = [n for n in filenames if not n.startswith(".")]
        # a directory (or symlinked directory) named like a clip is reported, not silently skipped
        names += [d for d in dirnames if os.path.splitext(d)[1].lower() in VIDEO_EXTENSIONS]
        for name in sorted(names):
            if os.path.splitext(name)[1].lower() not in VIDEO_EXTENSIONS:
                continue
            full = os.path.join(dirpath, name)
            rel_raw = os.path.relpath(full, root)
            rel, utf8 = storable_name(rel_raw)
            if not utf8:
                yield _entry_lstat(rel, full, "file name is not valid UTF-8 (rename the file to ingest it)")
                continue
            if os.path.islink(full):
                target = os.path.realpath(full)
                if os.path.commonpath([root, target]) != root:
                    yield _entry_lstat(rel, full, "symlink points outside the clip root")
                    continue
                if not os.path.exists(target):
                    yield _entry_lstat(rel, full, "broken symlink (its target does not exist)")
                    continue
            try:
                st = os.stat(full)
            except OSError as e:
                yield Entry(rel, full, None, None, f"unreadable: {e.strerror}")
                continue
            if not stat.S_ISREG(st.st_mode):
                yield Entry(rel, full, None, st.st_mtime, f"not a regular file ({_kind(st.st_mode)})")
                continue
            yield Entry(rel, full, st.st_size, st.st_mtime, sidecar=_sidecar(full))


def _entry_lstat(rel: str, full: str, error: str) -> Entry:
    try:
        st = os.lstat(full)
        return Entry(rel, full, st.st_size, st.st_mtime, error)
    except OSError:
        return Entry(rel, full, None, None, error)


# -- worker side ---------------------------------------------------------------------------------------------


def extra_seconds(row: dict) -> float:
    """Deadline allowance for a probed clip's media work: SECONDS_PER_GIGAPIXEL x frames x width x height."""
    try:
        pixels = float(row.get("frames") or 0) * float(row.get("width") or 0) * float(row.get("height") or 0)
    except (TypeError, ValueError):
        return 0.0
    return min(MAX_EXTRA_SECONDS, SECONDS_PER_GIGAPIXEL * pixels / 1e9)


def process_clip(task: dict, report=None) -> dict:
    """Hash, probe and make media for one file. Runs in a worker process; returns a row fragment.
    `report(row)` is told what the probe found before the media work starts (the deadline grows with it)."""
    from data import media, probe

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
            )
        except media.DecodeError as e:
            out["probe_error"] = f"corrupt: {e}"
        else:
            out["thumbnail"], out["filmstrip"] = m["thumbnail"], m["filmstrip"]
            out["filmstrip_indices"] = json.dumps(m["filmstrip_indices"])
            out["media_decoder"] = m["decode_backend"]
            if (out.get("codec") or "").lower() in media.PREVIEW_CODECS:
                try:  # review-only: a clip without a preview still gets its notice and filmstrip
                    out["preview"] = media.make_preview(task["abs"], task["media_dir"], out["sha256"])
                except media.DecodeError as e:
                    log.warning("%s: %s", task["rel"], e)
    return out


def _cap_memory(mib: int) -> None:
    """Cap this process's address space (RLIMIT_AS): a hostile clip that makes the decoder allocate
    gigabytes gets a MemoryError (or an allocation failure FFmpeg reports) in this worker, recorded as the
    clip's reason, instead of pushing the machine into swap or the OOM killer (R10)."""
    import resource

    if mib > 0:
        limit = mib << 20
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _worker_main(conn, memory_mib: int = 0, target=None) -> None:  # pragma: no cover - runs in the child
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    _cap_memory(memory_mib)
    logging.basicConfig(level=logging.WARNING)
    try:
        import av

        # FFmpeg's chatter about hostile files off, *without* PyAV's Python log callback: with it installed, a
        # decoder thread logging while the main thread closes a frame-threaded decoder (an early break, e.g.
        # at a resolution change) deadlocks on the GIL and the worker hangs until its deadline.
        av.logging.set_level(None)
        av.logging.set_libav_level(av.logging.PANIC)
    except Exception:
        pass
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        conn.send({"started": True})  # the clip's deadline runs from here, not from the worker's start-up
        try:
            result = (target or process_clip)(task, lambda info: conn.send({"progress": info}))
        except MemoryError:
            result = {
                "rel": task["rel"],
                "probe_error": f"needs more than the {memory_mib} MiB an ingest worker "
                "may use (a hostile or absurdly large stream)",
            }
        except Exception as e:  # an unexpected failure is that clip's reason, not the run's end
            result = {"rel": task["rel"], "probe_error": f"probe failed: {type(e).__name__}: {e}"}
        if memory_mib and result.get("probe_error") and "annot allocate memory" in str(result["probe_error"]):
            result["probe_error"] += f" (ingest workers are capped at {memory_mib} MiB)"
        result["_peak_rss_mib"] = round(_peak_rss_mib(), 1)  # measured, not stored (R10's figure)
        conn.send(result)


class WorkerPool:
    """N worker processes, one task each at a time, with a per-task deadline. A worker that crashes or
    overruns is killed and replaced. The deadline runs from when the worker starts the task (it says so), so a fresh
    worker's start-up on a loaded machine is not charged to the clip. A crash gives its task a reason at once; an
    overrun is retried with a TIMEOUT_GROWTH times longer deadline, up to `attempts` times, before it gives a reason. A
    worker may send `{"progress": row}` before its result: the deadline then grows by `extra_seconds(row)`.
    `target(task, report)` is the work (default `process_clip`; tests pass their own)."""

    def __init__(
        self,
        workers: int,
        timeout: float,
        memory_mib: int = WORKER_MEMORY_MIB,
        *,
        attempts: int = TIMEOUT_ATTEMPTS,
        target=None,
    ):
        self.ctx = mp.get_context("spawn")  # never fork a parent that has threads (tqdm, sqlite)
        self.timeout = timeout
        self.memory_mib = memory_mib
        self.peak_rss_mib = 0.0
        self.attempts = max(1, attempts)
        self.target = target
        self.size = max(1, workers)
        self.idle: list[tuple[Any, Any]] = []
        self.busy: dict[Any, tuple[Any, dict, float]] = {}
        self.retried = 0
        for _ in range(self.size):
            self.idle.append(self._spawn())

    def _spawn(self):
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker_main, args=(child, self.memory_mib, self.target), daemon=True)
        proc.start()
        child.close()
        return proc, parent

    def _limit(self, task: dict) -> float:
        return self.timeout * TIMEOUT_GROWTH ** (task.get("_attempt", 1) - 1)

    def run(self, tasks: Iterator[dict]) -> Iterator[dict]:
        """Yield one result per task, in completion order."""
        queue = deque(tasks)
        while queue or self.busy:
            while queue and self.idle:
                proc, conn = self.idle.pop()
                task = queue.popleft()
                conn.send(task)
                # until the worker says it started (a fresh one is still importing PyAV), allow for start-up
                self.busy[conn] = (proc, task, time.monotonic() + self._limit(task) + START_ALLOWANCE)
            deadline = min(d for _, _, d in self.busy.values())
            ready = wait(list(self.busy), timeout=max(0.0, deadline - time.monotonic()))
            for conn in ready:
                proc, task, d = self.busy.pop(conn)
                try:
                    result = conn.recv()
                except (EOFError, OSError):
                    proc.join(1)
                    yield {"rel": task["rel"], "probe_error": f"probe crashed ({_exit_reason(proc.exitcode)})"}
                    conn.close()
                    self.idle.append(self._spawn())
                    continue
                if isinstance(result, dict) and "started" in result:
                    self.busy[conn] = (proc, task, time.monotonic() + self._limit(task))
                    continue
                if isinstance(result, dict) and "progress" in result:
                    self.busy[conn] = (proc, task, d + extra_seconds(result["progress"] or {}))
                    continue
                self.idle.append((proc, conn))
                self.peak_rss_mib = max(self.peak_rss_mib, result.pop("_peak_rss_mib", 0.0))
                yield result
            t = time.monotonic()
            for conn, (proc, task, d) in list(self.busy.items()):
                if d <= t:
                    del self.busy[conn]
                    proc.kill()
                    proc.join(5)
                    conn.close()
                    self.idle.append(self._spawn())
                    waited = [*task.get("_waited", []), self._limit(task)]
                    if len(waited) < self.attempts:
                        self.retried += 1
                        queue.append({**task, "_attempt": len(waited) + 1, "_waited": waited})
                        continue
                    yield {
                        "rel": task["rel"],
                        "probe_error": (
                            f"{TIMED_OUT} after {', '.join(f'{w:g} s' for w in waited)} ({len(waited)} attempts; "
                            "the machine may have been overloaded: the next ingest tries this clip again)"
                        ),
                    }

    def close(self) -> None:
        for _proc, conn in self.idle:
            try:
                conn.send(None)
            except OSError:
                pass
        for proc, _conn, *_ in [(p, c) for c, (p, _, _) in self.busy.items()]:
            proc.kill()
        for proc, conn in self.idle:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
            conn.close()
        self.idle, self.busy = [], {}


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


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
            "UPDATE clips SET review_status = 'unreviewed', reviewed_by = NULL, reviewed_at = NULL WHERE id = ?",
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


def ingest(
    settings: Settings | None = None,
    *,
    root: str | Path | None = None,
    db_path: str | Path | None = None,
    media_dir: str | Path | None = None,
    workers: int | None = None,
    frames: int | None = None,
    decoder: str = "auto",
    media: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    progress: bool = False,
    db: sqlite_utils.Database | None = None,
    max_seconds: float | None = None,
    memory_mib: int = WORKER_MEMORY_MIB,
    attempts: int = TIMEOUT_ATTEMPTS,
) -> dict[str, Any]:
    """Bring `clips` in step with the clip root. Returns a summary:
    {ok, failed, skipped, moved, missing, seen, seconds, decoder}.

    Arguments override `settings` (clip_root, db, media_dir, workers, frames); `db` may be an open
    connection of this thread."""
    from data import media as media_mod, probe as probe_mod

    s = settings or Settings.load(environ={})
    root = Path(root or s.clip_root).resolve()
    media_dir = Path(media_dir or s.media_dir).resolve()
    frames = frames or s.frames
    workers = workers or s.workers or os.cpu_count() or 1
    if not root.is_dir():
        raise FileNotFoundError(f"clip root {root} is not a folder")
    own_db = db is None
    db = db if db is not None else connect(db_path or s.db)
    started = time.monotonic()
    summary = {"ok": 0, "failed": 0, "skipped": 0, "moved": 0, "missing": 0, "seen": 0, "retried": 0}
    resolved = media_mod.resolve_decoder(decoder) if media else "none"
    try:
        library.record_root(db, root)
        known = _load_known(db)
        entries = list(walk(root))
        summary["seen"] = len(entries)
        seen = {e.rel for e in entries}
        gone = {p: r for p, r in known.items() if p not in seen}
        gone_by_hash: dict[str, list[dict]] = {}
        for r in gone.values():
            if r["sha256"]:
                gone_by_hash.setdefault(r["sha256"], []).append(r)
        pending: list[tuple[str, dict]] = []
        tasks: list[dict] = []
        by_rel = {e.rel: e for e in entries}

        def task(e: Entry) -> dict:
            return {
                "rel": e.rel,
                "abs": e.abs,
                "media": media,
                "media_dir": str(media_dir),
                "frames": frames,
                "decoder": resolved,
                "max_seconds": max_seconds or probe_mod.MAX_SECONDS,
            }

        def flush(force: bool = False) -> None:
            if pending and (force or len(pending) >= BATCH):
                _write(db, pending)
                pending.clear()

        for e in entries:
            old = known.get(e.rel)
            unchanged = old is not None and old["size"] == e.size and old["mtime"] == e.mtime
            if e.error is not None:
                if unchanged and old["probe_error"] == e.error and not old["missing"]:
                    summary["skipped"] += 1
                    continue
                row = {"rel": e.rel, "size": e.size, "mtime": e.mtime, "probe_error": e.error}
                pending.append(("update", {**row, "id": old["id"]}) if old else ("insert", row))
                summary["failed"] += 1
                flush()
            elif unchanged and (old["probe_error"] or "").startswith(TIMED_OUT):
                tasks.append(task(e))  # a timeout was the machine's fault, maybe: probe it again
            elif unchanged and not old["missing"] and old["sidecar"] == e.sidecar:
                summary["skipped"] += 1
            elif unchanged:  # back from missing, or only the sidecar changed: no need to re-probe
                db_row = next(db.query("SELECT * FROM clips WHERE id = ?", [old["id"]]))
                pending.append(("update", {**db_row, "rel": e.rel, "sidecar": e.sidecar}))
                summary["skipped"] += 1
                flush()
            else:
                tasks.append(task(e))
        flush(force=True)

        bar = None
        if progress and tasks:
            from tqdm import tqdm

            bar = tqdm(total=len(tasks), unit="clip", desc="ingest", file=sys.stderr, smoothing=0.1)
        # a CUDA context reserves tens of GiB of address space: RLIMIT_AS would stop NVDEC workers from starting
        cap = 0 if resolved == "nvdec" else memory_mib
        pool = WorkerPool(min(workers, len(tasks)), timeout, cap, attempts=attempts) if tasks else None
        try:
            for res in pool.run(iter(tasks)) if pool else ():
                e = by_rel[res["rel"]]
                row = {**res, "size": e.size, "mtime": e.mtime, "sidecar": e.sidecar}
                old = known.get(e.rel)
                moved_from = None
                if old is None and row.get("sha256") in gone_by_hash and gone_by_hash[row["sha256"]]:
                    moved_from = gone_by_hash[row["sha256"]].pop(0)
                    gone.pop(moved_from["path"], None)
                if moved_from is not None:
                    pending.append(("move", {**row, "id": moved_from["id"]}))
                    summary["moved"] += 1
                elif old is not None:
                    changed = bool(old["sha256"] and row.get("sha256") and old["sha256"] != row["sha256"])
                    pending.append(
                        ("update", {**row, "id": old["id"], "_old_sha256": old["sha256"] if changed else None})
                    )
                else:
                    pending.append(("insert", row))
                if moved_from is None:
                    summary["failed" if row.get("probe_error") else "ok"] += 1
                flush()
                if bar:
                    bar.update()
                    bar.set_postfix(failed=summary["failed"], refresh=False)
        finally:
            if pool:
                summary["retried"] = pool.retried
                summary["worker_peak_rss_mib"] = pool.peak_rss_mib
                pool.close()
            if bar:
                bar.close()
        flush(force=True)
        vanished = [r["id"] for r in gone.values() if not r["missing"]]
        if vanished:
            with immediate(db):
                db.conn.executemany(
                    "UPDATE clips SET missing = 1, updated_at = ? WHERE id = ?", [(now(), i) for i in vanished]
                )
        summary["missing"] = len(vanished)
    finally:
        if own_db:
            db.close()
    summary["seconds"] = round(time.monotonic() - started, 3)
    summary["decoder"] = resolved
    return summary


def summary_line(summary: dict) -> str:
    return (
        f"ingest: {summary['ok']} ok, {summary['failed']} failed, {summary['skipped']} skipped, "
        f"{summary['moved']} moved, {summary['missing']} missing, {summary.get('retried', 0)} timeouts "
        f"retried ({summary['seen']} files seen, "
        f"{summary['seconds']:.1f} s, media decoder {summary['decoder']})"
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
