"""Everything a request makes the server write is bounded, logs included (issue 46, point 1; R21 in
docs/RELIABILITY.md).

- serving.log_clip: a value in a log line is cut to a few hundred characters with its length; a traceback already
  written in full comes back as one line.
- serving.log_sink, as a process fed through a pipe (as launch.sh and serving.procs.start run it): lines cut with
  their length, the file opened to append and rotated at half the cap, nothing written below the free-space floor
  (and said once space is back).
- The web app as a process (`python -m webapp`, its output through the sink as `serving.procs.start` sends it) on a
  small real filesystem: an annotator's 1,000 malformed read events of 4 MiB grow the logs by at most 1 MB while
  another annotator's saves go on; below the floor the app logs nothing while saves still work.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from data import taxonomy
from data.settings import Settings
from serving import log_clip, log_sink
from tests.support.examples import examples
from tests.support.reliability_fixtures import (
    LABELS,
    AppProcess,
    GradioError,
    GradioSession,
    dependencies,
    login_cookie,
)
from tests.support.webapp_fixtures import add_users, build_library
from webapp import budget, guard

REPO = Path(__file__).resolve().parents[2]
MB = 1_000_000


# ---- values in log lines ----------------------------------------------------------------------------------------
def _record(msg, *args, exc_info=None) -> logging.LogRecord:
    return log_clip.bound(logging.LogRecord("t", logging.ERROR, __file__, 1, msg, args or None, exc_info))


def test_a_long_value_is_cut_with_its_length_and_numbers_keep_their_format():
    rec = _record("clip %d of %s: %r (%.1f s)", 7, "x" * 4_000_000, ["y" * 1000], 2.25)
    line = rec.getMessage()
    assert line.startswith("clip 7 of xxx")
    assert "[4,000,000 characters]" in line and "(2.2 s)" in line
    assert len(line) < 2 * (log_clip.VALUE_CHARS + 40) + 40, len(line)
    assert _record("short %s", "value").getMessage() == "short value"  # nothing cut that fits


@hsettings(max_examples=examples(60), deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=5000),
            st.binary(max_size=3000),
            st.integers(),
            st.floats(allow_nan=True),
            st.lists(st.text(max_size=400), max_size=20),
            st.dictionaries(st.text(max_size=50), st.text(max_size=500), max_size=10),
        ),
        max_size=6,
    )
)
def test_any_arguments_make_a_line_of_bounded_length(args):
    fmt = " ".join(["%s"] * len(args)) or "nothing"
    line = _record(fmt, *args).getMessage()
    numbers = sum(len(str(a)) for a in args if isinstance(a, (int, float)))
    assert len(line) <= len(fmt) + numbers + len(args) * (log_clip.VALUE_CHARS + 40)


def test_a_message_logged_as_one_string_is_cut_too():
    line = _record("a ready-made line: " + "z" * 100_000).getMessage()
    assert len(line) < log_clip.MESSAGE_CHARS + 40 and line.endswith("[100,019 characters]")


def test_a_traceback_comes_in_full_once_then_as_one_line_with_every_line_cut():
    def fail(value):
        raise ValueError(f"didn't receive enough input values.\nReceived inputs:\n    [{value!r}]")

    texts = []
    for _ in range(3):
        try:
            fail("x" * 1_000_000)
        except ValueError:
            texts.append(_record("an event failed", exc_info=sys.exc_info()).exc_text)
    full, again, third = texts
    assert full.startswith("Traceback") and "in fail" in full
    assert max(len(line) for line in full.splitlines()) < log_clip.VALUE_CHARS + 40
    assert "[1,000,008 characters]" in full  # the received value (its line: 4 spaces, [, quotes), with its length
    assert "\n" not in again and "again: 1 times since" in again and again.endswith("enough input values.")
    assert "again: 2 times since" in third
    try:  # another place, another traceback: in full
        raise KeyError("other")
    except KeyError:
        assert _record("other", exc_info=sys.exc_info()).exc_text.startswith("Traceback")


# ---- the sink ------------------------------------------------------------------------------------------------------
def _sink(log: Path, *flags: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "serving.log_sink", "--log", str(log), *flags],
        stdin=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


def _flags(pid: int, path: Path) -> int | None:
    """The open flags of `pid`'s descriptor of `path` (from /proc), None when it has none open."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    return int(next(line for line in f if line.startswith("flags:")).split()[1], 8)
        except OSError:
            continue
    return None


def test_the_sink_cuts_long_lines_appends_and_rotates_at_half_its_cap(tmp_path):
    log = tmp_path / "logs" / "app.log"
    cap = 256 << 10
    sink = _sink(log, "--log-cap", str(cap), "--log-free-floor", "0")
    try:
        sink.stdin.write(b"first line\n" + b"v" * (4 << 20) + b"\nafter the long one\n")
        sink.stdin.flush()
        deadline = time.monotonic() + 30
        while (flags := _flags(sink.pid, log)) is None:
            assert time.monotonic() < deadline, "the sink never opened its log"
            time.sleep(0.05)
        assert flags & os.O_APPEND, oct(flags)
        for i in range(20_000):
            sink.stdin.write(b"line %06d %s\n" % (i, b"w" * 80))
        sink.stdin.write(b"the last line, unfinished")
    finally:
        sink.stdin.close()
        sink.wait(30)
    older = log.with_name("app.log.1")
    sizes = [log.stat().st_size, older.stat().st_size]
    text = log.read_text()
    print(f"2.2 MB of lines and a 4 MiB line through a sink capped at {cap:,} bytes: files {sizes}")
    assert max(sizes) <= cap // 2 and sum(sizes) <= cap
    assert text.endswith("the last line, unfinished\n") and "line 019999" in text
    first = _sink(tmp_path / "again.log", "--log-cap", str(cap))  # the long line alone, to read it back
    first.stdin.write(b"v" * (4 << 20) + b"\n")
    first.stdin.close()
    first.wait(30)
    cut = (tmp_path / "again.log").read_bytes()
    assert len(cut) < log_sink.LINE_BYTES + 40 and cut.endswith(b"v\xe2\x80\xa6 [4,194,304 bytes]\n"), cut[-60:]


def test_a_log_truncated_by_hand_frees_its_space_and_goes_on_at_its_new_end(tmp_path):
    """Before, app.log was written without O_APPEND: after a truncation the app went on at its old offset."""
    log = tmp_path / "app.log"
    sink = _sink(log, "--log-free-floor", "0")
    try:
        for i in range(2000):
            sink.stdin.write(b"before %d %s\n" % (i, b"b" * 500))
        sink.stdin.flush()
        deadline = time.monotonic() + 30
        while not log.exists() or log.stat().st_size < 1_000_000:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.truncate(log, 0)
        sink.stdin.write(b"after the truncation\n")
    finally:
        sink.stdin.close()
        sink.wait(30)
    st_ = log.stat()
    assert log.read_bytes() == b"after the truncation\n", st_.st_size  # no hole of the old size before it
    assert st_.st_blocks * 512 <= 8192


def test_a_log_deleted_by_hand_is_let_go_and_started_again(tmp_path):
    """Before, a deleted app.log stayed open in the app: its space came back only at a restart."""
    log = tmp_path / "app.log"
    sink = _sink(log, "--log-free-floor", "0")
    try:
        sink.stdin.write(b"x" * 100 + b"\n")
        sink.stdin.flush()
        deadline = time.monotonic() + 30
        while _flags(sink.pid, log) is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        log.unlink()
        time.sleep(log_sink.SPACE_EVERY_S + 0.2)
        sink.stdin.write(b"after the deletion\n")
        sink.stdin.flush()
        deadline = time.monotonic() + 10
        while not log.exists():
            assert time.monotonic() < deadline, "no new log after the deletion"
            time.sleep(0.05)
        held = [os.readlink(f"/proc/{sink.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{sink.pid}/fd")]
    finally:
        sink.stdin.close()
        sink.wait(30)
    assert f"{log} (deleted)" not in held and str(log) in held, held  # the deleted file let go: its space is free
    assert log.read_bytes() == b"after the deletion\n"


def test_below_the_floor_the_sink_writes_nothing_and_says_how_much_when_space_is_back(small_filesystem):
    fs = small_filesystem(size_mb=32)
    log = fs.path / "logs" / "runner.log"
    sink = _sink(log, "--log-free-floor", "16M")
    filler = fs.path / "filler"
    try:
        sink.stdin.write(b"plenty of room\n")
        sink.stdin.flush()
        time.sleep(1.5)
        with open(filler, "wb") as f:  # leave 8 MiB: below the floor, far from full
            f.write(b"\0" * (fs.available() - (8 << 20)))
        time.sleep(log_sink.SPACE_EVERY_S + 0.5)
        for i in range(500):
            sink.stdin.write(b"while low %d\n" % i)
        sink.stdin.flush()
        time.sleep(1.5)
        low = log.read_text()
        filler.unlink()
        time.sleep(log_sink.SPACE_EVERY_S + 0.5)
        sink.stdin.write(b"space is back\n")
    finally:
        sink.stdin.close()
        sink.wait(30)
    text = log.read_text()
    print(text)
    assert "while low" not in text
    assert "no more lines until space is back" in low and "below the floor of 16.0 MiB" in low
    assert "500 lines" in text and text.endswith("space is back\n")


# ---- the app: a flood of malformed read events, and the floor -----------------------------------------------------
VALUE = "x" * (guard.MAX_BODY - 2048)  # the largest value a join may carry


def _logs_bytes(logs: Path) -> int:
    return sum(p.stat().st_size for p in logs.iterdir() if p.is_file())


def _flood(url: str, cookie: str, deps: dict, dep: dict, n: int, out: list) -> None:
    tab = GradioSession(url, cookie, deps, timeout=120)
    try:
        for _ in range(n):
            try:
                tab.call_raw(dep, [VALUE])  # one value for an event that takes several: Gradio refuses it
                out.append("answered")
            except GradioError as e:
                out.append(str(e)[:200])
    finally:
        tab.close()


def _saves(url: str, cookie: str, deps: dict, stop: threading.Event, out: list) -> None:
    tab = GradioSession(url, cookie, deps, timeout=120)
    n = 0
    try:
        while not stop.is_set():
            n += 1
            try:
                tab.call("open_clip", event_data={"clip": 1 + n % 4})
                got = tab.call("save_caption", [None, None, None, f"edit {n}", *[LABELS[k] for k in taxonomy.ENUMS]])
                out.append(any("Saved as version" in v for v in got if isinstance(v, str)))
            except GradioError as e:
                out.append(str(e)[:200])
            stop.wait(0.5)
    finally:
        tab.close()


def _app_on(fs, monkeypatch, floor: str) -> tuple[AppProcess, Settings]:
    monkeypatch.setenv("CW_LOG_FREE_FLOOR", floor)  # read by the app's log sink (serving.procs.start)
    s = Settings.load({"data_dir": str(fs.path / "var"), "fleet_mode": "sim"}, environ={})
    build_library(s, n=6)
    add_users(s)
    logs = s.data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    app = AppProcess(s, logs / "app.log")
    app.start(timeout=180)
    return app, s


def _read_event(deps: dict) -> dict:
    dep = next(d for name, d in sorted(deps.items()) if not budget.writes(name) and len(d["inputs"]) > 1)
    assert not budget.writes(dep["api_name"])  # a read: it costs the annotator no write budget
    return dep


@pytest.mark.load
@pytest.mark.timeout(1800)
def test_an_annotators_1000_malformed_read_events_of_4_mib_grow_the_logs_by_at_most_1_mb_and_saves_go_on(
    small_filesystem, monkeypatch
):
    """Issue 46's flood: Gradio refuses an event sent with too few inputs and quoted every value received in the
    error the app logged with its traceback: 4 MiB a request, from 3 connections, on a read that costs no write
    budget. Before: the 128 MiB filesystem was full after ~30 events and every save said "the server's disk is
    full"."""
    fs = small_filesystem(size_mb=128)
    app, s = _app_on(fs, monkeypatch, floor="16M")
    logs = s.data_dir / "logs"
    try:
        flooder = login_cookie(app.url, "ann")
        saver = login_cookie(app.url, "ann2")
        deps = dependencies(app.url, flooder)
        dep = _read_event(deps)
        before = _logs_bytes(logs)
        answers: list = []
        saves: list = []
        stop = threading.Event()
        saving = threading.Thread(target=_saves, args=(app.url, saver, deps, stop, saves))
        flooding = [
            threading.Thread(target=_flood, args=(app.url, flooder, deps, dep, n, answers)) for n in (334, 333, 333)
        ]
        t = time.monotonic()
        saving.start()
        for th in flooding:
            th.start()
        try:
            for th in flooding:
                th.join(1500)
        finally:
            stop.set()
            saving.join(120)
        took = time.monotonic() - t
        grew = _logs_bytes(logs) - before
        print(
            f"{len(answers)} malformed '{dep['api_name']}' events of {len(VALUE):,} characters from 3 connections in "
            f"{took:.0f} s: the logs grew {grew:,} bytes ({grew / len(answers):.0f} per event); "
            f"{sum(ok is True for ok in saves)} of {len(saves)} saves meanwhile; {fs.available() / 2**20:.0f} MiB free"
        )
        assert len(answers) == 1000 and all(a != "answered" for a in answers)
        assert grew <= MB, f"the logs grew {grew:,} bytes"
        assert saves and all(ok is True for ok in saves), [s_ for s_ in saves if s_ is not True][:3]
    finally:
        app.stop()


@pytest.mark.timeout(900)
def test_below_the_free_space_floor_the_app_logs_nothing_and_saves_go_on(small_filesystem, monkeypatch):
    """The app's log on the database's filesystem, which has less free than the floor (but room for saves): what it
    would log is counted, not written, and a save still works; once space is back the log says how much it missed.
    Before: the app wrote every line until the disk was full, and then the saves failed."""
    fs = small_filesystem(size_mb=96)
    app, s = _app_on(fs, monkeypatch, floor="48M")
    log = s.data_dir / "logs" / "app.log"
    filler = fs.path / "filler"
    try:
        cookie = login_cookie(app.url, "ann")
        deps = dependencies(app.url, cookie)
        dep = _read_event(deps)
        with open(filler, "wb") as f:  # leave 24 MiB: under the floor, room for saves
            f.write(b"\0" * (fs.available() - (24 << 20)))
        time.sleep(log_sink.SPACE_EVERY_S + 0.5)
        tab = GradioSession(app.url, cookie, deps, timeout=60)
        try:
            size = log.stat().st_size
            for _ in range(20):
                with pytest.raises(GradioError):
                    tab.call_raw(dep, ["y" * 100_000])
            time.sleep(1.0)
            low_size = log.stat().st_size
            tab.call("open_clip", event_data={"clip": 2})
            out = tab.call(
                "save_caption", [None, None, None, "saved below the floor", *[LABELS[k] for k in taxonomy.ENUMS]]
            )
            filler.unlink()
            time.sleep(log_sink.SPACE_EVERY_S + 0.5)
            with pytest.raises(GradioError):
                tab.call_raw(dep, ["y" * 100_000])
            time.sleep(1.0)
        finally:
            tab.close()
        text = log.read_text()
        print(f"app.log {size} -> {low_size} bytes over 20 failed events below the floor; after:\n{text[-600:]}")
        assert low_size - size < 400, text[size:]  # at most the line that says logging stops
        assert any("Saved as version" in v for v in out if isinstance(v, str))
        assert "were not written since" in text
    finally:
        app.stop()
