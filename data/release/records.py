"""Step 3 of a release (data.release.make): data.export's record builder (`export.iter_rows`: the export's
records, lineage included) streams the clips in id order; each record is written to its split's files
(data.release.files), with the prompt version it is trained with (`Prompts`), and counted for the card.
Records stream and parquet is written in row groups: memory does not grow with the clips.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

import sqlite_utils

from data import export, prompts
from data.release import card, files as release_files, media as release_media
from data.release.options import Options


class Prompts:
    """The prompt version each record is trained with: its origin machine caption's (by id, else name and
    version), or the newest version of the default prompt for text written from scratch (counted in
    `fallback`)."""

    def __init__(self, db: sqlite_utils.Database):
        self.default = prompts.latest(db)  # may install a newer preset: read before the snapshot
        listed = prompts.list_prompts(db)
        self.by_id = {p["id"]: p for p in listed}
        self.by_name = {(p["name"], p["version"]): p for p in listed}
        self.fallback = 0
        self.cache: dict[tuple, tuple[str, str, str, str]] = {}
        self.placeholders: set[str] = set()  # prompt versions whose text holds a placeholder, neutralised

    def encoded(self, record: dict) -> tuple[str, str, str, str]:
        """The record's prompt parts as JSON text (release_files.encoded_prompt), rendered for its camera as the
        runner sends it (data.prompts.render_user), made once per prompt version and camera."""
        p = self.of(record)
        camera = prompts.camera_of(record["path"], record["sidecar"])
        key = (p["id"], camera)
        if key not in self.cache:
            user, system, name = prompts.render_user(p, camera), p.get("system") or "", f"{p['name']} v{p['version']}"
            if release_files.neutralise(user) != user or release_files.neutralise(system) != system:
                self.placeholders.add(name)
            self.cache[key] = release_files.encoded_prompt(name, system, user)
        return self.cache[key]

    def of(self, record: dict) -> dict:
        o = record["origin"] or {}
        p = self.by_id.get(o.get("prompt_id")) or self.by_name.get((o.get("prompt_name"), o.get("prompt_version")))
        if p is None:
            self.fallback += 1
            p = self.default
        return p


def write(
    db: sqlite_utils.Database,
    o: Options,
    root: Path,
    tally: card.Tally,
    chooser: Prompts,
    progress: Callable[[int], None] | None,
) -> tuple[str, dict[str, int]]:
    """Step 3: every record into its split's files and the manifest; returns the manifest's SHA-256 and the Arrow
    bytes written per split (release_files.SplitFiles.nbytes). With
    --media copy or link every path is the clip's under the release (release_media.FOLDER/...)."""
    (root / "sft").mkdir()
    (root / "messages").mkdir()
    prefix = f"{release_media.FOLDER}/" if o.media != "none" else ""
    schema, to_row = release_files.arrow_schema()
    files = {name: release_files.SplitFiles(root, name, schema, to_row) for name, _ in o.shares}
    digest = hashlib.sha256()
    dumps = json.dumps
    placed = db.execute(
        "SELECT r.clip_id, r.grp, g.split FROM temp.release_rows r "
        "JOIN temp.release_groups g ON g.grp = r.grp ORDER BY r.clip_id"
    )
    try:
        with open(root / "manifest.jsonl", "w", encoding="utf-8", newline="\n") as manifest:
            n = 0
            for record in export.iter_rows(db, o.filter):
                if record["simulated"] and not o.include_simulated:
                    continue
                row = placed.fetchone()
                if row is None or row[0] != record["clip_id"]:
                    raise RuntimeError(f"the release's two reads disagree at clip {record['clip_id']}")
                _, group, split = row
                if prefix:
                    record["path"] = prefix + record["path"]
                line = release_files.manifest_line(record, split, group)
                manifest.write(line)
                digest.update(line.encode("utf-8"))
                prompt = chooser.encoded(record)
                path = dumps(record["path"], ensure_ascii=False)
                said = dumps(release_files.answer(record), ensure_ascii=False)
                files[split].add(
                    record,
                    release_files.sft_json(record, prompt, path, said),
                    release_files.messages_json(record, prompt, path, said),
                )
                tally.add(split, record)
                n += 1
                if progress and n % 1000 == 0:
                    progress(n)
            if placed.fetchone() is not None:
                raise RuntimeError("the release's two reads disagree: a clip was selected but not written")
    finally:
        for f in files.values():
            f.close()
    return digest.hexdigest(), {name: f.nbytes for name, f in files.items()}
