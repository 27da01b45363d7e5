"""Sections of a release's dataset card (data.release.card) about how the release was made and how it is read: how
clips were grouped (each case counted), whether earlier placements were kept, the batches it draws from with
their Quality decisions, its licence, and its files with how each trainer's tool loads them. Every figure is
counted by the release; text from users and the fleet goes through `md`.
"""

from __future__ import annotations

from data.release import batches as release_batches
from data.release.card_text import md, table
from data.release.options import DEFAULT_LICENSE
from data.release.placement import FOLDER


def grouping(field: str, cases: list[tuple[int, int]], seed: int) -> list[str]:
    """How the clips were grouped: the cases of data.release.placement.HOW, clips and groups each."""
    (by_field, fg), (joined, jg), (several, sg), (none, ng) = cases
    if field == FOLDER:
        return [
            f"Grouped by the clip's folder (`--group-by {FOLDER}`): {none:,} clips in {ng:,} folders. **No group is "
            f"in two splits**, so clips of one folder never sit in both train and test. Seed {seed}.",
            "",
        ]
    f = md(field)
    rows = [
        [f"the sidecar's `{f}`", f"{by_field:,}", f"{fg:,}"],
        [f"no `{f}`: joined the value its folder's clips agree on", f"{joined:,}", f"{jg:,} values"],
        [f"no `{f}`, in a folder whose clips name several values: grouped by folder", f"{several:,}", f"{sg:,}"],
        [f"no `{f}`, in a folder where no clip names one: grouped by folder", f"{none:,}", f"{ng:,}"],
    ]
    out = [
        f"One group per drive, by the sidecar's `{f}`. A clip without it joins the value the other clips of its "
        "folder agree on (a clip that lost its route rides with its route); a folder whose clips name several "
        "values, or none, is a group of its own. **No group is in two splits**: no value and no such folder sits "
        f"in both train and test. Seed {seed}.",
        "",
        *table(["how a clip got its group", "clips", "groups"], rows),
        "",
    ]
    if several:
        it, they = ("it", "it") if several == 1 else ("they", "them")
        out += [
            f"{'The one clip' if several == 1 else f'The {several:,} clips'} without `{f}` in "
            f"{'a folder' if sg == 1 else 'folders'} whose clips name several values "
            f"{'belongs' if several == 1 else 'belong'} to a drive that is not known: if {it} "
            f"{'belongs' if several == 1 else 'belong'} with one of those values, {it} may sit in another split "
            f"than that value. Give {they} the field to place {they} for sure.",
            "",
        ]
    return out


def placement(changes: dict | None, name: str) -> list[str]:
    """Whether the groups stayed where the release before placed them: "0 of N earlier clips changed split"."""
    if changes is None:
        return [f"This is the first release named {md(name)}: every group was placed here.", ""]
    prev = f"v{int(changes['previous_version'])}"
    if changes.get("unreadable"):
        return [
            f"Every group was placed anew (`--reshuffle`): the release before ({prev}) could not be read, so which "
            "clips changed split is not known.",
            "",
        ]
    moved, kept = changes["moved"], changes["kept_clips"]
    said = f"**{moved:,} of {kept:,} earlier clips changed split.**"
    if changes.get("reshuffled"):
        return [
            f"{said} Every group was placed anew (`--reshuffle`), not where {prev} placed it"
            + (": a model trained on an earlier train split must not be scored on this test split." if moved else "."),
            "",
        ]
    why = (
        " A group whose earlier clips sat in several splits (the grouping joined them) went where most of them were; "
        "a split no longer asked for keeps nothing."
        if moved
        else ""
    )
    return [
        f"{said} Each group stays in the split {prev} placed it in (its manifest is the record, checked by its "
        "SHA-256); only groups new to this release were placed, toward the asked shares, making up the drift. A "
        f"model trained on {prev}'s train split can be scored on this test split.{why} `--reshuffle` places every "
        "group anew.",
        "",
    ]


def batches(b: release_batches.Batches) -> list[str]:
    """The batches the clips come from, each with its Quality decision."""
    out = ["## The batches it draws from", ""]
    if not b.batches:
        return out + ["No released clip comes from a captioning job, so no Quality decision applies.", ""]
    rows = [
        [
            f"job {x.job_id}",
            f"{x.clips:,}",
            "-" if x.sample_id is None else f"sample {x.sample_id}",
            release_batches.verdict_words(x),
        ]
        for x in b.batches
    ]
    if b.others:
        rows.append([f"{b.others:,} more jobs", f"{b.other_clips:,}", "", "see the Quality tab"])
    if b.no_job:
        rows.append(["no job (written by a person)", f"{b.no_job:,}", "-", "-"])
    out += [
        "The machine captions these clips were made from came from these captioning jobs. The Quality tab decides "
        "each batch from a random sample of it (accept, fix, review more); its decision, as it stood at release:",
        "",
        *table(["batch", "clips released", "random sample", "decision"], rows),
        "",
    ]
    out += [f"- job {x.job_id}: {md(x.text, 600)}" for x in b.batches if x.text]
    out.append("")
    if any(x.verdict == "fix" for x in b.batches):
        out += [
            "**A batch to fix:** the Quality tab says its machine captions miss their target. "
            + (
                "The clips released here were each approved by a reviewer; the batch's unreviewed captions are not "
                "fit to train on."
                if b.approved
                else "The clips released here were not reviewed: do not train on them before the batch is fixed."
            ),
            "",
        ]
    return out


def licence(license: str | None) -> list[str]:
    if license:
        return [f"Licence: `{md(license)}` (`--license`), as the header above says.", ""]
    return [
        f"Licence: none was given (`--license`), so the header says `{DEFAULT_LICENSE}`: the terms are the team's "
        "own, and nothing here is licensed for use outside it. Give one before publishing.",
        "",
    ]


def loading(splits: list[str], held: list[str], name: str, media: str) -> list[str]:
    """The files, and how each tool loads them."""
    first = held[0] if held else splits[0]
    where = (
        "relative to this release: the clips are in `media/` (`--media copy`, each checked against its sha256)"
        if media == "copy"
        else "relative to this release: `media/` holds symbolic links to the clips (`--media link`; `cp -rL` or "
        "`rsync -L` copies the clips when the release moves)"
        if media == "link"
        else "relative to the library's clip root (`python -m data.library show --data-dir D` prints it; "
        "`--media copy` puts the clips in the release)"
    )
    root = "<this release>" if media != "none" else "<the clip root>"
    return [
        "## Files, and how to load them",
        "",
        f"Paths in every file are {where}.",
        "",
        *table(
            ["file", "what it holds"],
            [
                ["`README.md`", "this card; its YAML header tells Hugging Face `datasets` the splits and features"],
                ["`manifest.jsonl`", "one line per clip: split, clip_id, path, sha256, caption_id, group, simulated"],
                *[[f"`{s}.jsonl`", f"the {s} split's records, lineage included"] for s in splits],
                *[[f"`{s}.parquet`", "the same records; labels, origin and edits as structs"] for s in splits],
                *[[f"`sft/{s}.json`", "one conversation per clip, Qwen-VL fine-tuning's format"] for s in splits],
                *[
                    [f"`messages/{s}.jsonl`", "the same, in the messages format (ms-swift, LLaMA-Factory)"]
                    for s in splits
                ],
                ["`dataset_info.json`", "LLaMA-Factory's registry of these files"],
                *([["`media/`", "the clips"]] if media != "none" else []),
            ],
        ),
        "",
        "```python",
        "from datasets import load_dataset",
        'ds = load_dataset("path/to/this/release")           # exactly these splits, by these names',
        "import pandas as pd",
        f'train = pd.read_parquet("{first}.parquet")',
        "```",
        "",
        f'- **Qwen-VL** (QwenLM/Qwen3-VL, qwen-vl-finetune): `{{"annotation_path": ".../sft/{first}.json", '
        f'"data_path": "{root}"}}`. Its reader has no system message, so the system text the fleet sent opens '
        "the human turn, after `<video>` and before the user text.",
        f"- **LLaMA-Factory**: `dataset_dir: <this release>`, `dataset: {md(name)}_{first}`"
        + ("" if media != "none" else ", `media_dir: <the clip root>`")
        + " (sharegpt formatting of `messages/`, with the system message as its system prompt).",
        f"- **ms-swift**: `--dataset <this release>/messages/{first}.jsonl`, run from `{root}` (it opens `videos` "
        "paths as written).",
        "",
        "The user turn is what the model was asked (for the clip's camera); the answer is the released caption as "
        "the model answers, one JSON object of caption and every label, with each `<` written `\\u003c` (the same "
        "JSON), so no placeholder typed in a caption can break an item.",
        "",
    ]
