"""Issue 31, point 4: a replica's error text was stored and shown verbatim, so a refusal that repeats the
`Authorization` header put the fleet key into `job_items.last_error`, the heartbeat, `serving.caption`'s output
and the Jobs tab, and an error that repeats the clip's signed URL its `sig=`. One redactor at the fleet client's
boundary (and the fleet reader's, and the runner's log) now removes them (serving.redact).

The fleet is tests/support/echo_fleet.py: every answer repeats our request (headers, clip URLs, the bare key),
as a refusal, a 500 with the key in its status line, a plain-text 502 cut 20 characters into the key, a bad
answer and a body that is no chat completion. The library is a head's (signed URLs). The README's terminal
command and the runner process each run a job on it; then nothing the workbench wrote -- the database file
(job items, raw answers, heartbeats, events), the command's output, the runner's log -- and nothing the fleet
reader returns holds the key, a piece of it, or a signature."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import unicodedata
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from data import db as dbmod, heartbeats, jobs, prompts
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection
from data.library import deployment
from data.library.clipgen import tiny_library
from data.settings import Settings
from serving import fleet_key
from serving.fleet.reader import FleetReader
from serving.redact import Redactor
from tests.support.echo_fleet import MODES, EchoFleet, mode_of
from tests.support.examples import examples

ROOT = Path(__file__).resolve().parents[2]
SIG = re.compile(r"(?i)sig(=|%3D|%253D)[0-9a-f]{8}")


def squeezed(text: str) -> str:
    """`text` as anyone reading for the key would: URL and JSON escapes decoded, NFKC, case and every character outside
    the key's alphabet (newlines, zero-width spaces, quotes) dropped."""
    text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), urllib.parse.unquote(text))
    return re.sub(r"[^0-9a-z_-]", "", unicodedata.normalize("NFKC", text).lower())


def leaks(text: str, key: str) -> list[str]:
    """What of the key or a signature `text` holds: a signature, or any 10 characters of the key in a row, in any
    shape (issue 46: split by a newline, a zero-width space, over two JSON fields)."""
    found = [m.group(0) for m in SIG.finditer(text)]
    flat, k = squeezed(text), key.lower()
    found += [key[i : i + 10] for i in range(len(key) - 9) if k[i : i + 10] in flat]
    return found


@pytest.fixture
def head_library(tmp_path):
    settings = Settings.load({"data_dir": str(tmp_path / "var"), "max_attempts": 1}, environ={})
    db = dbmod.connect(settings.db)
    try:
        ids = tiny_library(settings, db, 10)
        deployment.record_head(
            db, settings.replace(role="head", media_url_base="http://127.0.0.1:7999", media_url_ttl=120)
        )
    finally:
        db.close()
    return settings, ids, fleet_key.load(settings, create=True)


def test_the_redactor_removes_keys_tokens_and_signatures():
    key = "k3y-" + "A" * 40
    r = Redactor([key])
    text = (
        f"Authorization: Bearer {key}; authorization=Basic dXNlcjpwYXNz; x-api-key: abc123; "
        f'{{"authorization": "Bearer other-token"}} token {key} and bearer zzz; '
        "http://h/media/signed/3?exp=1&sig=deadbeefdeadbeef http://h/m?x=1%26sig%3Dfeedfacefeedface&y "
        f"cut off at {key[:10]}"
    )
    out = r(text)
    assert key[:10] not in out and "dXNlcjpwYXNz" not in out and "abc123" not in out
    assert "other-token" not in out and "zzz" not in out and not SIG.search(out), out
    assert "http://h/media/signed/3?exp=1&sig=[redacted]" in out  # the rest of what the fleet said stays
    assert Redactor()("HTTP 500: nothing secret here") == "HTTP 500: nothing secret here"


def test_no_secret_a_replica_repeats_is_stored_logged_or_shown(head_library, tmp_path):
    settings, ids, key = head_library
    # answers after 3 s: the runner's first look at /health (healthy) comes first, so that no failure is taken for
    # an outage (whose refunded retries wait out the replica's cool-down one at a time)
    with EchoFleet(delay=3.0) as echo:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CW_")}
        env["PYTHONPATH"] = str(ROOT)
        # the README's terminal command on a head: signed URLs, the data dir's key
        cli = subprocess.run(
            [sys.executable, "-m", "serving.caption", "--data-dir", str(settings.data_dir)]
            + ["--fleet-urls", echo.url, "--max-attempts", "1", "--no-progress"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=300,
        )
        assert cli.returncode in (0, 1), cli.stderr[-3000:]
        # the runner process, as launch.sh starts it (INFO: httpx logs each request's status line)
        d = dbmod.connect(settings.db)
        try:
            second = jobs.create(
                d,
                name="runner process",
                created_by="lead",
                selection=Selection.of_clips(ids),
                prompt_id=prompts.latest(d)["id"],
                params=JobParams(),
                fleet=jobs.fleet_of(echo.url),
            )
        finally:
            d.close()
        log = tmp_path / "runner.log"
        with open(log, "wb") as out:
            runner = subprocess.run(
                [sys.executable, "-m", "serving.runner", "--data-dir", str(settings.data_dir)]
                + ["--fleet-urls", echo.url, "--max-attempts", "1", "--until-idle"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=ROOT,
                timeout=300,
            )
        assert runner.returncode == 0, log.read_text()[-3000:]
        reader = FleetReader(settings)
        seen = json.dumps([reader.look([echo.url]), reader.watch([echo.url])])
        requests = echo.requests
    d = dbmod.connect(settings.db)
    try:
        first = next(d.query("SELECT id FROM jobs WHERE id != ? ORDER BY id", [second]))["id"]
        items = list(d.query("SELECT clip_id, state, error_kind, last_error, raw_answer FROM job_items"))
        beats = json.dumps(heartbeats.heartbeats(d, "runner"))
        done = [job_queries.counts(d, j) for j in (first, second)]
    finally:
        d.close()
    texts = {
        "serving.caption's output": cli.stdout + cli.stderr,
        "the runner's log": log.read_text(errors="replace"),
        "the fleet reader's look and watch": seen,
        "the heartbeats": beats,
        "the job items": json.dumps(items),
    }
    for name in ("workbench.db", "workbench.db-wal"):
        path = settings.data_dir / name
        if path.exists():
            texts[name] = path.read_bytes().decode("latin-1")
    print(f"{requests} requests to the echoing fleet; jobs {done}")
    # the fleet did repeat the key and the signed URLs, in every way it has, and each reached the workbench
    assert requests >= 2 * len(ids) and all(c["failed"] == len(ids) for c in done), done
    assert {mode_of(i["clip_id"]) for i in items} == set(MODES)
    assert all(i["state"] == "failed" and i["last_error"] for i in items), items
    assert any("[fleet key]" in (i["last_error"] or "") for i in items)
    assert any("sig=[redacted]" in (i["last_error"] or "") for i in items)
    assert any("[fleet key]" in (i["raw_answer"] or "") for i in items)  # the bad answer's raw text
    # the log that would hold the fleet's words: the runner says the fleet's state with its latest error (httpx's
    # per-request status line is off since issue 45: serving/runner/fleet_log.py). Which state its heartbeat saw
    # depends on the machine's pace: failing while the requests went out, or idle after them if the job was done
    # between two heartbeats (a loaded machine); either line carries the error. Which error is latest depends on
    # the order the answers came back in: an HTTP 400 or a 200 whose body is not JSON; both repeat the fleet's words
    said = texts["the runner's log"]
    assert (
        "fleet failing every request: each failure uses one of the clip's attempts (" in said
        or "fleet: nothing sent since its last requests failed (" in said
    ), said[-2000:]
    assert "you sent POST /v1/chat/completions" in said, said[-2000:]  # the echo's own words reached the log
    found = {where: leaks(text, key) for where, text in texts.items()}
    assert not any(found.values()), {k: v[:3] for k, v in found.items() if v}


SEPARATORS = ["\n", "\r\n", "\u200b", "\u2060", "\ufeff", " ", '", "', '","x":"', "\\n", "-\n", "\t"]


@hsettings(max_examples=examples(200), deadline=None)
@given(
    cuts=st.lists(st.integers(1, 42), max_size=4, unique=True),
    seps=st.lists(st.sampled_from(SEPARATORS), min_size=4, max_size=4),
    shape=st.sampled_from(["as is", "upper", "fullwidth", "json escapes", "percent"]),
    before=st.text(st.characters(codec="utf-8"), max_size=40),
    after=st.text(st.characters(codec="utf-8"), max_size=40),
)
def test_the_key_in_any_shape_leaves_no_ten_characters_in_a_row(cuts, seps, shape, before, after):
    """Issue 46, point 5: the fleet key echoed split by a newline, a zero-width space or across two JSON fields was
    stored and shown (25 of its 34 10-character windows). Normalised, then scrubbed window by window: no 10
    characters of it in a row are left, however it was cut, spaced, cased, widened or escaped, and the text
    around it stays."""
    key = "kZ3-" + "q8Rt_Lm2Vx9Bn4Hs7Wc1Jf6Dy0Ge5Pa3Ku8" + "T1"
    shaped = {
        "as is": key,
        "upper": key.upper(),
        "fullwidth": "".join(chr(ord(c) + 0xFEE0) if c.isalnum() else c for c in key),
        "json escapes": "".join(f"\\u{ord(c):04x}" if i % 2 else c for i, c in enumerate(key)),
        "percent": "".join(f"%{ord(c):02X}" if i % 3 == 0 else c for i, c in enumerate(key)),
    }[shape]
    pieces, last = [], 0
    for n, cut in enumerate(sorted(c for c in cuts if c < len(shaped))):
        pieces += [shaped[last:cut], seps[n]]
        last = cut
    text = "<" + before + "> " + "".join(pieces) + shaped[last:] + " <" + after + ">"
    out = Redactor([key])(text)
    assert not leaks(out, key), (text, out)
    assert out.startswith("<" + before[:5]) or not before[:5].strip()  # what the replica said around it stays
