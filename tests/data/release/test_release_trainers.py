"""A release the trainers' tools read as they are (issue 44): Hugging Face `datasets.load_dataset(DIR)` with the
real library (offline), and the readers of Qwen-VL, LLaMA-Factory and ms-swift as ported from their source
(tests/support/trainer_readers.py: the tools pin torch and versions of gradio and datasets this project cannot
take). The fleet's system prompt reaches each in the form it trains with; a placeholder typed in a caption or a
prompt never breaks an item; `--media copy|link` makes every path relative to the release."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never the Hub: before datasets reads its settings
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets  # in the test extra
import pyarrow.parquet as pq
import pytest
from huggingface_hub import DatasetCard
from hypothesis import HealthCheck, given, settings, strategies as st

from data import captions, clips as clipsmod, prompts, review_states
from data.clips import Filter
from data.db import immediate
from data.errors import DataError
from data.release import files as release_files, make as rel, stratify as splits
from data.release.options import Options
from tests.support import trainer_readers as readers
from tests.support.examples import examples
from tests.support.release_library import LABELS, ClipSpec, build, provenance

ROOT = Path(__file__).resolve().parents[3]


def drives(n_routes: int = 12, per: int = 4) -> list[ClipSpec]:
    return [
        ClipSpec(f"drive{r}", {"route": f"R{r:02d}", "camera": "front"}, ("none", "low", "high")[(r + k) % 3])
        for r in range(n_routes)
        for k in range(per)
    ]


def with_files(db, ids: list[int], root: Path) -> Path:
    """Real files for the clips `ids` under `root`, each clip's sha256 the bytes' own (as ingest records it)."""
    with immediate(db):
        for cid in ids:
            path = db.execute("SELECT path FROM clips WHERE id = ?", [cid]).fetchone()[0]
            data = f"clip {cid} ".encode() * (50 + cid % 7)
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)
            db.execute("UPDATE clips SET sha256 = ? WHERE id = ?", [hashlib.sha256(data).hexdigest(), cid])
    return root


def make(db, out: Path, shares: str = splits.DEFAULT, clip_root: Path | None = None, **extra) -> rel.Result:
    options = Options(Filter(), "route", tuple(splits.parse(shares).items()), 0, extra.pop("name", "av"), **extra)
    return rel.release(db, options, out, actor="lead", role="lead", clip_root=clip_root)


@pytest.mark.parametrize(
    "shares, n_routes",
    [
        ("train=0.7,calib=0.1,val=0.1,test=0.1", 30),  # a split the library's guess drops
        ("train=0.6,dev=0.2,holdout=0.2", 20),  # no split the guess names test; dev is not validation
        ("train=0.98,val=0.01,test=0.01", 3),  # too few groups: empty splits, which made the call raise
    ],
)
def test_load_dataset_returns_exactly_the_splits_of_the_manifest(db, tmp_path, shares, n_routes):
    build(db, drives(n_routes, 3))
    r = make(db, tmp_path / "r", shares)
    manifest = [json.loads(x) for x in (r.path / "manifest.jsonl").read_text().splitlines()]
    held = {s: [m["clip_id"] for m in manifest if m["split"] == s] for s in r.counts if r.counts[s]}
    if n_routes == 3:
        assert len(held) < len(r.counts)  # the case asked for: some split holds nothing
    ds = datasets.load_dataset(str(r.path), cache_dir=str(tmp_path / "hf"))
    assert list(ds) == list(held)  # exactly these splits, by these names, in this order
    for s, ids in held.items():
        assert ds[s].num_rows == r.counts[s] and ds[s]["clip_id"] == ids
        assert ds[s].features == datasets.Features.from_arrow_schema(pq.read_schema(r.path / f"{s}.parquet"))
    info = datasets.load_dataset_builder(str(r.path), cache_dir=str(tmp_path / "hf")).info
    assert {s: x.num_examples for s, x in info.splits.items()} == {s: len(ids) for s, ids in held.items()}
    card = DatasetCard.load(r.path / "README.md").data
    assert card.license == "other" and card.task_categories == ["video-text-to-text"]
    assert card.pretty_name == "av v1" and card.size_categories == ["n<1K"]
    assert card.configs == [
        {"config_name": "default", "data_files": [{"split": s, "path": f"{s}.parquet"} for s in held]}
    ]
    assert "Licence: none was given (`--license`), so the header says `other`" in r.card


def test_a_licence_given_is_the_headers(db, tmp_path):
    build(db, drives())
    r = make(db, tmp_path / "r", license="cc-by-4.0")
    assert DatasetCard.load(r.path / "README.md").data.license == "cc-by-4.0"
    assert "Licence: `cc-by-4.0`" in r.card
    with pytest.raises(DataError, match="--license: a licence identifier"):
        make(db, tmp_path / "bad", license="CC BY 4.0; rm -rf")


def test_each_tool_reads_every_item_with_the_fleets_system_prompt(db, tmp_path, monkeypatch):
    """With --media copy the release alone is enough: LLaMA-Factory finds every video under its dataset_dir,
    ms-swift run from the release opens them, Qwen's reader with data_path the release; each gets the prompt
    version's system text in the form it trains with (a system prompt; Qwen: the human turn, which it has)."""
    built = build(db, drives())
    root = with_files(db, built.ids, tmp_path / "clips")
    r = make(db, tmp_path / "r", media="copy", clip_root=root)
    system = prompts.HAZARD_SYSTEM
    for split, n in r.counts.items():
        if not n:
            continue
        lf = readers.llamafactory_examples(str(r.path), f"av_{split}", str(tmp_path / "hf"))
        assert len(lf) == n
        for ex in lf:
            assert ex["_system"] == system and len(ex["_videos"]) == 1 and os.path.isfile(ex["_videos"][0])
            assert ex["_prompt"][0]["content"].startswith("<video>\n") and ex["_response"][0]["role"] == "assistant"
        for line in (r.path / "messages" / f"{split}.jsonl").read_text().split("\n")[:-1]:
            row = json.loads(line)
            (video,) = readers.swift_check(row, cwd=str(r.path))
            assert os.path.isfile(video) and row["messages"][0] == {"role": "system", "content": system}
        for item in json.loads((r.path / "sft" / f"{split}.json").read_text()):
            user, answer = readers.qwen_messages(item, data_path=str(r.path))
            (video,) = [c for c in user["content"] if c["type"] == "video"]
            assert os.path.isfile(video["video"]) and user["content"][1]["text"].startswith(system + "\n\n")
            assert answer["role"] == "assistant"
    assert "`dataset: av_train`" in r.card and "media_dir" not in r.card.split("LLaMA-Factory")[1][:120]


TYPED = st.lists(
    st.one_of(
        st.sampled_from(["<video>", "<image>", "<audio>", "<|video_pad|>", "<", ">", "</video>", "<<video>>"]),
        st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=8),
    ),
    min_size=1,
    max_size=8,
).map("".join)


@settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(TYPED, min_size=3, max_size=6), TYPED, TYPED)
def test_a_placeholder_typed_in_a_caption_or_a_prompt_never_breaks_an_item(tmp_path_factory, texts, system, user):
    """Captions a person typed (placeholders, brackets, any text) and a prompt version whose system and user
    text hold placeholders: every item passes each tool's reader with exactly its one video, and the answer
    decodes to the caption exactly as approved."""
    from data import db as dbmod

    tmp = tmp_path_factory.mktemp("typed")
    db = dbmod.connect(tmp / "wb.db")
    try:
        p = prompts.create_version(
            db,
            name="typed",
            system=system + " sys",
            user="<video> " + user + " {camera}",
            schema=prompts.latest(db)["schema"],
        )
        built = build(db, [ClipSpec(f"d{i}", {"route": f"R{i}"}, captioned=False) for i in range(len(texts))])
        for cid, text in zip(built.ids, texts):
            machine, _ = captions.add_machine(
                db, cid, job_id=None, text="machine", labels=LABELS, provenance=provenance(prompt_id=p["id"])
            )
            saved = captions.save_human(
                db, cid, text=text + " caption", labels=LABELS, author="ann", base_caption_id=machine["id"]
            )
            review_states.set_review(db, cid, status="approved", user="lead", base_caption_id=saved["id"])
        r = rel.release(
            db,
            Options(Filter(), "route", (("train", 0.5), ("test", 0.5)), 0, "typed"),
            tmp / "r",
            actor="lead",
            role="lead",
        )
        approved = {cid: clipsmod.get(db, cid)["caption"]["text"] for cid in built.ids}
        for split, n in r.counts.items():
            if not n:
                continue
            for ex in readers.llamafactory_examples(str(r.path), f"typed_{split}", str(tmp / "hf"), media_dir=str(tmp)):
                assert len(ex["_videos"]) == 1
            for line in (r.path / "messages" / f"{split}.jsonl").read_text().split("\n")[:-1]:
                row = json.loads(line)
                assert len(readers.swift_check(row, cwd=str(tmp))) == 1
                assert json.loads(row["messages"][-1]["content"])["caption"] == approved[row["clip_id"]]
                assert sum(m["content"].count("<video>") for m in row["messages"]) == 1
            for item in json.loads((r.path / "sft" / f"{split}.json").read_text()):
                readers.qwen_messages(item, data_path=str(tmp))
                assert json.loads(item["conversations"][1]["value"])["caption"] == approved[item["clip_id"]]
        assert "The text of typed v1 holds a placeholder" in r.card
    finally:
        db.close()


def test_neutralised_text_keeps_what_it_said():
    assert release_files.neutralise("a <video> b <image><audio>") == "a ＜video＞ b ＜image＞＜audio＞"
    assert release_files.neutralise("<|video_pad|> x < y") == "<|video_pad|> x < y"


@pytest.mark.parametrize("media", ["copy", "link"])
def test_media_makes_every_path_relative_to_the_release(db, tmp_path, media):
    built = build(db, drives(6, 3))
    root = with_files(db, built.ids, tmp_path / "clips")
    r = make(db, tmp_path / "r", media=media, clip_root=root)
    manifest = [json.loads(x) for x in (r.path / "manifest.jsonl").read_text().splitlines()]
    for m in manifest:
        assert m["path"].startswith("media/")
        f = r.path / m["path"]
        assert f.is_file() and hashlib.sha256(f.read_bytes()).hexdigest() == m["sha256"]
        assert f.is_symlink() == (media == "link")
        if media == "link":
            assert os.readlink(f) == str(root.resolve() / m["path"].removeprefix("media/"))
    paths = {m["clip_id"]: m["path"] for m in manifest}
    for split in r.counts:
        for x in map(json.loads, (r.path / f"{split}.jsonl").read_text().splitlines()):
            assert x["path"] == paths[x["clip_id"]]
        assert list(pq.read_table(r.path / f"{split}.parquet").column("path").to_pylist()) == [
            paths[c] for c in pq.read_table(r.path / f"{split}.parquet").column("clip_id").to_pylist()
        ]
        for item in json.loads((r.path / "sft" / f"{split}.json").read_text()):
            assert item["video"] == paths[item["clip_id"]]
        for row in map(json.loads, (r.path / "messages" / f"{split}.jsonl").read_text().split("\n")[:-1]):
            assert row["videos"] == [paths[row["clip_id"]]]
    if media == "link":  # the clips themselves were not touched (modes) by sealing through the links
        assert all((root / p.removeprefix("media/")).stat().st_mode & 0o200 for p in paths.values())


def test_a_copied_clip_that_changed_since_ingest_is_refused_by_name(db, tmp_path):
    built = build(db, drives(4, 2))
    root = with_files(db, built.ids, tmp_path / "clips")
    changed = db.execute("SELECT path FROM clips WHERE id = ?", [built.ids[3]]).fetchone()[0]
    (root / changed).write_bytes(b"another video")
    with pytest.raises(DataError, match=f"Clip {built.ids[3]} .* is not the file that was ingested"):
        make(db, tmp_path / "r", media="copy", clip_root=root)
    assert not (tmp_path / "r").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".r.")]
    (root / changed).unlink()
    with pytest.raises(DataError, match="is not a file under the clip root"):
        make(db, tmp_path / "r", media="link", clip_root=root)


def test_the_command_line_takes_media_license_and_reshuffle(db, db_path, tmp_path):
    from data.library.clip_root import record_root

    built = build(db, drives(6, 2))
    root = with_files(db, built.ids, tmp_path / "clips")
    record_root(db, root)
    run = [sys.executable, "-m", "data.release", "--db", str(db_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [*run, "--out", str(tmp_path / "a"), "--media", "copy", "--license", "mit"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "a" / "media").is_dir() and 'license: "mit"' in (tmp_path / "a" / "README.md").read_text()
    again = subprocess.run(
        [*run, "--out", str(tmp_path / "b"), "--reshuffle", "--seed", "5"], capture_output=True, text=True, env=env
    )
    assert again.returncode == 0 and "earlier clips changed split (--reshuffle placed every group anew)" in again.stdout
    bad = subprocess.run([*run, "--out", str(tmp_path / "c"), "--media", "move"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'move'" in bad.stderr
