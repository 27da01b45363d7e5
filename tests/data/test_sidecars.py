"""Issue 21, class 1: sidecar metadata that parses but cannot be stored never stops an ingest.

Every sidecar is stored as it reads back, or the clip is recorded with a `_sidecar_error` and still ingested.
The property test writes generated JSON-ish bytes beside a clip, reads them as the walk does, and sends the
result through the real INSERT of ingest (`data.library.ingest._write`), then reads the row back (`data.clips.get`).
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from data import clips
from data.library import ingest, walk
from data.library.walk import Entry

# tokens that a JSON parser accepts (or nearly) but that a naive store or read-back gets wrong
HOSTILE_SCALARS = [
    "1e400",
    "-1e400",
    "1E+999",
    "2e308",
    "1.7976931348623157e308",
    "1e-400",
    "-0.000e-999",
    "0e-400",
    "5e-324",
    "-0",
    "-0.0",
    "9" * 400,
    "-" + "9" * 4000,
    "9" * 4400,
    "NaN",
    "-Infinity",
    '"\\ud800"',
    '"x\\udfffy"',
    '"\\ud83d\\ude00"',
    '"\\u0000"',
    '"\\uffff"',
    '"ok"',
    "true",
    "null",
]
KEYS = ['"a"', '"\\ud800"', '"\\u0000"', '"camera"', '""']


def _json_text(scalar: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    plain = st.one_of(
        st.integers().map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(lambda f: json.dumps(f)),
        st.text(max_size=12).map(lambda t: json.dumps(t, ensure_ascii=False)),
    )
    leaf = st.one_of(scalar, plain)
    keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=6).map(json.dumps))
    return st.recursive(
        leaf,
        lambda kids: st.one_of(
            st.lists(kids, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
            st.lists(st.tuples(keys, kids), max_size=4).map(lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}"),
        ),
        max_leaves=12,
    )


def _to_bytes(text: str, garbage: bytes, cut: int | None) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")  # a raw lone surrogate: bytes that are not UTF-8
    if garbage:
        raw = raw[: len(raw) // 2] + garbage + raw[len(raw) // 2 :]
    return raw[:cut] if cut is not None else raw


JSONISH = st.builds(
    _to_bytes,
    _json_text(st.sampled_from(HOSTILE_SCALARS)),
    st.one_of(st.just(b""), st.binary(max_size=4)),
    st.one_of(st.none(), st.integers(0, 40)),
)


def _ingest_one(db, root, n: int, raw: bytes) -> dict:
    """The walk's reading of one sidecar, written through ingest's own INSERT, read back as the app reads it."""
    (root / f"c{n}.json").write_bytes(raw)
    clip = root / f"c{n}.mp4"
    clip.write_bytes(b"\0")
    side = walk.read_sidecar(str(clip))  # never raises
    entry = Entry(f"c{n}.mp4", str(clip), 1, 0.0, sidecar=side)
    p = ingest.plan({}, [entry])
    ingest._write(db, [p.place({"rel": entry.rel, "sha256": f"{n:064x}", "probe_error": "not a video"})])
    row = next(db.query("SELECT id FROM clips WHERE path = ?", [entry.rel]))
    return clips.get(db, row["id"])["sidecar"]


def _refuse(constant: str):
    raise ValueError(constant)


def _expected(raw: bytes):
    """What the file holds for a strict reader (no NaN or Infinity), or None if it refuses the file."""
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_refuse)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else {"value": value}


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=JSONISH)
def test_any_jsonish_sidecar_is_stored_as_it_reads_back_or_recorded_as_an_error(db, tmp_path, raw):
    n = next(_COUNTER)
    stored = _ingest_one(db, tmp_path, n, raw)
    assert isinstance(stored, dict)
    if "_sidecar_error" in stored and set(stored) == {"_sidecar_error"}:
        assert stored["_sidecar_error"].startswith(f"sidecar c{n}.json ")
        return
    want = _expected(raw)
    assert want is not None, "a sidecar a strict reader refuses was stored as data"
    assert stored == want  # the value read back is the value in the file
    text = json.dumps(stored, ensure_ascii=False, allow_nan=False)  # and it goes out again (export, the page)
    text.encode("utf-8")


_COUNTER = itertools.count()


@pytest.mark.parametrize(
    "raw, why",
    [
        (b'{"speed": 1e400}', "out of range"),
        (b'{"speed": -2e308, "ok": 1}', "out of range"),
        (b'{"tiny": 1e-400}', "out of range"),
        (b'{"note": "\\ud800"}', "not valid Unicode"),
        (b'{"\\udc00": 1}', "not valid Unicode"),
        (b'{"note": "\xff\xfe"}', "not valid JSON"),
    ],
)
def test_each_unstorable_kind_is_a_sidecar_error_naming_why(tmp_path, raw, why):
    (tmp_path / "a.json").write_bytes(raw)
    note = json.loads(walk.read_sidecar(str(tmp_path / "a.mp4")))
    assert why in note["_sidecar_error"]


def test_values_that_can_be_stored_are_kept_exactly(tmp_path):
    big = int("9" * 400)
    (tmp_path / "a.json").write_text(
        json.dumps({"big": big, "neg0": -0.0, "max": 1.7976931348623157e308, "emoji": "😀", "nul": "a\x00b"})
    )
    stored = json.loads(walk.read_sidecar(str(tmp_path / "a.mp4")))
    assert stored == {"big": big, "neg0": -0.0, "max": 1.7976931348623157e308, "emoji": "😀", "nul": "a\x00b"}


def test_an_ingest_with_unstorable_sidecars_finishes_and_ingests_every_clip(settings, capsys):
    root = settings.clip_root
    root.mkdir(parents=True)
    sidecars = {
        "overflow": b'{"speed": 1e400}',
        "surrogate": b'{"note": "\\ud800"}',
        "bytes": b'{"note": "\xed\xa0\x80"}',
        "bigint": b'{"n": ' + b"7" * 1000 + b"}",
        "fine": b'{"camera": "front"}',
    }
    for name, raw in sidecars.items():
        (root / f"{name}.mp4").write_bytes(b"\0" * 16)
        (root / f"{name}.json").write_bytes(raw)
    rc = ingest.main([str(root), "--data-dir", str(settings.data_dir), "--no-media", "--quiet", "--workers", "1"])
    assert rc == 0, capsys.readouterr().err
    from data import db as dbmod

    db = dbmod.connect(settings.db)
    try:
        rows = {r["path"]: json.loads(r["sidecar"]) for r in db.query("SELECT path, sidecar FROM clips")}
    finally:
        db.close()
    assert set(rows) == {f"{n}.mp4" for n in sidecars}
    assert rows["fine.mp4"] == {"camera": "front"}
    assert rows["bigint.mp4"] == {"n": int("7" * 1000)}
    for bad in ("overflow", "surrogate", "bytes"):
        assert set(rows[f"{bad}.mp4"]) == {"_sidecar_error"}, rows[f"{bad}.mp4"]
