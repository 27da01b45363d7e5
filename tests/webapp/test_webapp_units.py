"""Fast checks of the web app's pieces: users and passwords, the users CLI, session cookies, the login
limiter, path confinement, escaping, and the refusal to run open on a network."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from data import team, users
from data.errors import DataError
from webapp import render
from webapp.login import auth
from webapp.routes.media import resolve_inside


def test_password_is_hashed_with_a_salt_and_verified(db):
    users.create(db, "alice", role="admin", password="s3cret-pass")
    users.create(db, "bob", role="annotator", password="s3cret-pass")
    hashes = [r["password_hash"] for r in db.query("SELECT password_hash FROM users")]
    assert len(set(hashes)) == 2 and all(h.startswith("scrypt$") and "s3cret" not in h for h in hashes)
    assert users.verify(db, "alice", "s3cret-pass")["role"] == "admin"
    assert users.verify(db, "alice", "wrong") is None
    assert users.verify(db, "nobody", "s3cret-pass") is None
    team.set_disabled(db, "bob", True)
    assert users.verify(db, "bob", "s3cret-pass") is None


def test_no_short_passwords_and_no_duplicate_users(db):
    with pytest.raises(DataError, match="at least"):
        users.create(db, "carol", role="lead", password="short")
    users.create(db, "carol", role="lead", password="long enough")
    with pytest.raises(DataError, match="exists"):
        users.create(db, "carol", role="lead", password="long enough")
    with pytest.raises(DataError, match="unknown role"):
        users.set_role(db, "carol", "root")


def test_roles_are_ordered():
    assert users.at_least("admin", "lead") and users.at_least("lead", "lead")
    assert not users.at_least("annotator", "lead") and not users.at_least(None, "annotator")


def test_users_cli_adds_and_lists(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("a fine password\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    base = [sys.executable, "-m", "webapp.accounts", "--data-dir", str(tmp_path / "var")]
    out = subprocess.run(
        base + ["add", "root", "--role", "admin", "--password-file", str(pw)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "added root (admin)" in out.stdout
    assert "root\tadmin" in subprocess.run(base + ["list"], env=env, capture_output=True, text=True).stdout
    again = subprocess.run(base + ["add", "root", "--password-file", str(pw)], env=env, capture_output=True, text=True)
    assert again.returncode == 2 and "already exists" in again.stderr  # refused, as every CLI of ours says it
    helptext = subprocess.run(base + ["--help"], env=env, capture_output=True, text=True).stdout
    assert "python -m webapp.accounts add" in helptext and "sign-in-link bob" in helptext
    # a one-time sign-in link (issue 46): printed with the app's address; refused for a name that is no user
    link = subprocess.run(base + ["sign-in-link", "root"], env=env, capture_output=True, text=True, check=True)
    assert re.fullmatch(r"http://127\.0\.0\.1:7860/login/link/[\w-]{40,}\n", link.stdout), link.stdout
    assert "works once" in link.stderr
    nobody = subprocess.run(base + ["sign-in-link", "nobody"], env=env, capture_output=True, text=True)
    assert nobody.returncode == 2 and "no active user named 'nobody'" in nobody.stderr


def test_setting_flags_work_after_the_subcommand_of_every_cli(tmp_path, capsys, monkeypatch):
    """`--data-dir D` after the subcommand (as the README writes it) reaches the same data dir as before it, for
    every command line with subcommands; before the fix `accounts add bob --data-dir D` was refused (exit 2)."""
    from data import db as dbmod
    from data.library import clip_root, deployment
    from webapp import accounts

    monkeypatch.chdir(tmp_path)  # the default data dir would be ./var: it must stay unmade
    for name in ("CW_DATA_DIR", "CW_DB"):
        monkeypatch.delenv(name, raising=False)
    pw = tmp_path / "pw"
    pw.write_text("a fine password\n")
    after, before = tmp_path / "after", tmp_path / "before"
    assert accounts.main(["add", "bob", "--role", "lead", "--password-file", str(pw), "--data-dir", str(after)]) == 0
    assert accounts.main(["--data-dir", str(before), "add", "ann", "--password-file", str(pw)]) == 0
    for d, name in ((after, "bob"), (before, "ann")):
        db = dbmod.connect(d / "workbench.db")
        assert [u["name"] for u in users.list_users(db)] == [name]
        db.close()
    capsys.readouterr()
    assert accounts.main(["list", "--data-dir", str(after)]) == 0
    assert capsys.readouterr().out == "bob\tlead\n"
    assert clip_root.main(["show", "--data-dir", str(after)]) == 0
    assert deployment.main(["show", "--data-dir", str(after)]) == 0
    assert not (tmp_path / "var").exists()  # nothing fell back to the default data dir
    # a flag before the subcommand is not overwritten by the subcommand's own (absent) copy
    assert accounts.main(["--data-dir", str(after), "list"]) == 0
    assert capsys.readouterr().out.endswith("bob\tlead\n")


def test_browse_says_what_to_do_while_no_clip_has_a_caption():
    """A first launch showed "0 captioned" and nothing said that a job had to be started."""
    empty = render.counts({"clips": 9, "captioned": 0, "failed": 3}, 9)
    assert 'id="no-captions"' in empty and "0 captioned" in empty and "Jobs tab" in empty
    assert "no-captions" not in render.counts({"clips": 9, "captioned": 1, "failed": 3}, 9)
    assert "no-captions" not in render.counts({"clips": 3, "captioned": 0, "failed": 3}, 3)  # nothing to caption


def test_sessions_are_server_side_and_end(db):
    from data import sessions

    token = sessions.create(db, "alice")
    assert sessions.lookup(db, token, idle=60, absolute=3600) == "alice"
    assert sessions.lookup(db, token + "x", idle=60, absolute=3600) is None
    assert sessions.lookup(db, None, idle=60, absolute=3600) is None
    assert token not in str(list(db.query("SELECT * FROM sessions")))  # only its hash is stored
    sessions.revoke(db, token)
    assert sessions.lookup(db, token, idle=60, absolute=3600) is None


def test_limiter_delays_per_account_and_per_address_and_trusted_keys_apart():
    from webapp.login.throttle import LoginThrottle

    lim = LoginThrottle()
    keys = lambda ip: lim.keys("bob", ip, set())  # noqa: E731 - untrusted: account + address
    for i in range(5):
        assert lim.attempt(keys(f"10.0.0.{i}"), now=i) == 0  # five addresses, one account
    assert lim.attempt(keys("10.0.0.99"), now=5) == pytest.approx(4.0)  # 5 s after the last failure
    assert lim.attempt(keys("10.0.0.99"), now=9.5) == 0  # ...then one more check
    assert lim.attempt(keys("10.0.0.99"), now=10) == pytest.approx(9.5)  # and the delay doubles
    # the browser bob signed in from before is held back by nothing of the above
    assert lim.attempt(lim.keys("bob", "10.0.0.99", {"device"}, "tok"), now=10) == 0
    for i in range(20):  # spraying one password over many accounts from one address
        assert lim.attempt(lim.keys(f"user{i}", "1.2.3.4", set()), now=100 + i * 0.01) == 0
    assert lim.attempt(lim.keys("user20", "1.2.3.4", set()), now=101) > 0
    # an account that signed in from that address before is counted apart from the spray
    assert lim.attempt(lim.keys("carol", "1.2.3.4", {"address"}), now=101) == 0
    lim2 = LoginThrottle()
    k = lim2.keys("eve", "a", set())
    assert lim2.attempt(k, now=0) == 0
    lim2.succeeded(k)  # a right password gives its place back
    assert all(lim2.attempt(k, now=t) == 0 for t in (1, 2, 3, 4, 5)) and lim2.attempt(k, now=6) > 0


def test_next_url_stays_on_site():
    assert auth._safe_next("/?clip=3") == "/?clip=3"
    for bad in ("//evil.example", "https://evil.example", "\\\\evil", "/\\evil", None, ""):
        assert auth._safe_next(bad) == "/"


def test_resolve_inside_refuses_escapes(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "ok.mp4").write_bytes(b"x")
    (tmp_path / "secret").write_text("s")
    (root / "a" / "out.mp4").symlink_to(tmp_path / "secret")
    assert resolve_inside(root, "a/ok.mp4") == (root / "a" / "ok.mp4").resolve()
    for bad in (
        "../secret",
        "a/../../secret",
        str(tmp_path / "secret"),
        "a/out.mp4",
        "a/ok.mp4\x00",
        "/etc/passwd",
        "",
        None,
        "a",
        ".",
        "a/missing.mp4",
    ):
        assert resolve_inside(root, bad) is None, bad


def test_render_escapes_everything():
    evil = "<script>alert(1)</script>\"'"
    row = {"id": 1, "path": evil, "review_status": "unreviewed", "caption_preview": evil, "hazard_level": None}
    for html_out in (
        render.tiles([row]),
        render.word_diff(evil, evil + " x"),
        render.message(evil),
        render.header(
            {
                "id": 1,
                "path": evil,
                "codec": evil,
                "reviewed_by": evil,
                "review_status": "approved",
                "reviewed_at": 1.0,
            },
            "u",
            "annotator",
        ),
        render.player({"id": 1, "path": evil, "codec": "h264"}),
        render.no_clip(evil),
    ):
        assert "<script>" not in html_out and "&lt;script&gt;" in html_out


def test_the_player_is_named_and_the_review_header_is_a_heading():
    clip = {"id": 7, "path": "drive/a.mp4", "codec": "h264", "review_status": "unreviewed"}
    assert 'aria-label="clip #7: drive/a.mp4"' in render.player(clip)
    assert 'aria-label="clip #7: drive/a.mp4"' in render.player({**clip, "codec": "hevc", "preview": "p.mp4"})
    head = render.header(clip, "u", "annotator")
    assert '<h2 class="cw-clip-title">' in head and "<b>#7</b> drive/a.mp4</h2>" in head
    assert "<h2" in render.no_clip() and 'id="review-empty"' in render.no_clip()


@pytest.mark.parametrize(
    "raw, says",
    [
        ("99999", "There is no clip 99999 in this library"),
        ("0", "There is no clip 0 in this library"),
        ("12a", "“12a” is not a clip id"),
        ("-1", "“-1” is not a clip id"),
        ("١٢", "“١٢” is not a clip id"),  # digits, but not an id a link of ours would carry
        ("x" * 100, "“" + "x" * 40 + "” is not a clip id"),
    ],
)
def test_a_link_to_no_clip_says_why(raw, says):
    out = render.no_clip(raw)
    assert 'id="clip-missing"' in out and says in out and 'role="alert"' in out


def test_a_label_picker_carries_its_options_in_its_template():
    from data import taxonomy
    from webapp.picker import label_picker, template

    for i, (name, options) in enumerate(taxonomy.ENUMS.items(), 1):
        out = template(name, i)
        assert f'data-name="{name}"' in out and f'data-hotkey="{i}"' in out
        assert f'data-options="{" ".join(options)}"' in out
        assert ('data-multi="1"' in out) == (name in taxonomy.MULTI)
        assert "${" not in out and "{{" not in out and "`" not in out  # Gradio evaluates it as a template
    picker = label_picker("road_users", 3)
    assert picker.elem_id == "label-road_users" and picker.value == []
    assert label_picker("weather", 5).value is None


def test_a_label_picker_refuses_an_option_it_cannot_carry(monkeypatch):
    from data import taxonomy
    from webapp.picker import template

    monkeypatch.setitem(taxonomy.ENUMS, "weather", (*taxonomy.WEATHER, "${alert(1)}"))
    with pytest.raises(ValueError, match="not a lowercase identifier"):
        template("weather", 5)


def test_the_page_scripts_are_the_picker_then_the_keys_then_the_drafts():
    from webapp.app import head_html

    out = head_html()
    assert out.count("<script>") == 3
    assert out.index("window.cwPicker") < out.index("window.__cwShortcuts") < out.index("window.__cwDrafts")


def test_word_diff_marks_changes():
    out = render.word_diff("a car turns left", "a bus turns left")
    assert "<del>car</del>" in out and "<ins>bus</ins>" in out


def test_build_app_refuses_auth_off_on_a_network(settings):
    from webapp.app import build_app

    with pytest.raises(ValueError, match="loopback"):
        build_app(settings.replace(auth="off", host="0.0.0.0"))
    assert settings.replace(auth="off", host="0.0.0.0").auth_required  # and Settings forces login anyway


def test_main_refuses_auth_off_on_a_network(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run(
        [sys.executable, "-m", "webapp", "--data-dir", str(tmp_path), "--host", "0.0.0.0", "--auth", "off"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "loopback" in r.stderr
    assert (
        "python -m webapp"
        in subprocess.run([sys.executable, "-m", "webapp", "--help"], env=env, capture_output=True, text=True).stdout
    )


def test_job_form_shows_what_the_job_will_cost_on_a_gpu_fleet(settings, tmp_path, monkeypatch):
    """The start form's preview names the wall time and GPU-hours on this fleet from the recorded GPU runs
    (serving.cost); a simulated fleet gets none (its speed says nothing about GPUs). The committed table with a
    point left unmeasured and one failed (tests/support/work_table.py), whatever today's table holds."""
    from serving import cost, cost_records
    from serving.launch import record as fleet_record
    from tests.support.work_table import table_with_gaps
    from webapp.context import AppContext
    from webapp.jobs import start as jobs_start
    from webapp.jobs.tab import JobsTab

    monkeypatch.setattr(cost_records, "WORK_TABLE", table_with_gaps(tmp_path))
    jobs_start._measurements.cache_clear()  # read once per process: this test's table, then the real one again
    monkeypatch.setattr(jobs_start, "_measurements", jobs_start._measurements.__wrapped__)

    urls = [f"http://10.9.9.{i}:8000" for i in range(8)]  # a list of replicas: counted, not asked
    form = JobsTab(AppContext(settings.replace(fleet_urls=tuple(urls)), fleet_urls=urls, simulated=False)).form
    html = form._cost_html(1_000_000)
    assert "on 8 GPU(s)" in html and "GPU-hours" in html and "measured" in html and " h " in html
    assert "at 16 frames, 9,437,184 pixels" in html and "efficiency measured at 2 GPUs" in html  # the defaults
    # the lead's choice of work per clip: a measured point gets its figure, one nobody measured says so, a
    # value the job would refuse says why
    assert form._cost_html(1_000_000, {"frames": "16", "max_pixels": 9_437_184}) == html
    none = form._cost_html(100_000, {"frames": 8, "max_pixels": "4718592"})
    assert "No cost estimate for 8 frames at 4,718,592 pixels" in none and "not yet measured" in none
    # a point whose clips failed on the GPU: no figure, and the lead reads why and what to choose instead
    failed = form._cost_html(100_000, {"frames": 32, "max_pixels": "9437184"})
    assert "No cost estimate for 32 frames at 9,437,184 pixels in bf16: it failed on the GPU" in failed
    assert "ran out of GPU memory" in failed and "fewer frames or pixels per clip" in failed
    assert "GPU-hours" not in none
    assert "Frames must be 1-128" in form._cost_html(100_000, {"frames": 500, "max_pixels": None})
    assert "Pixels per clip must be" in form._cost_html(100_000, {"frames": 16, "max_pixels": "99999999"})
    sim = JobsTab(AppContext(settings.replace(fleet_mode="sim"), fleet_urls=[], simulated=True)).form
    assert sim._cost_html(100_000) == ""
    # priced as this fleet's runner runs: the default 48 in flight gets a run at 48, never the GPU test at 96
    at48 = cost.estimate(8, 16, "bf16", cost_records.default_measurements())
    at96 = cost.estimate(8, 16, "bf16", cost_records.default_measurements(), in_flight=96)
    assert at48.per_replica < at96.per_replica
    assert f"({at48.clips_per_s:.1f} clips/s" in html
    deep = settings.replace(fleet_urls=tuple(urls), per_replica_inflight=96)
    html96 = JobsTab(AppContext(deep, fleet_urls=urls, simulated=False)).form._cost_html(1_000_000)
    assert f"({at96.clips_per_s:.1f} clips/s" in html96 and html96 != html
    # a window nobody measured: the best run's figure, and the lead reads that it was taken otherwise
    odd = settings.replace(fleet_urls=tuple(urls), per_replica_inflight=64)
    html64 = JobsTab(AppContext(odd, fleet_urls=urls, simulated=False)).form._cost_html(1_000_000)
    assert "this fleet runs 64 in flight per replica sent at once: its rate may differ" in html64
    # priced in what the replicas compute in, as the launcher of this data dir recorded it; with no record that
    # describes this fleet, the lead reads that bf16 was assumed
    assert jobs_start.ASSUMED_PRECISION in html and "pixels, bf16 (" in html
    at_fp8 = cost.estimate(8, 16, "fp8", cost_records.default_measurements())
    assert at_fp8.clips_per_s and at_fp8.clips_per_s != at48.clips_per_s
    s8 = settings.replace(fleet_urls=tuple(urls))
    fleet_record.save_record(s8, {"precision": "fp8", "router_url": None, "replica_urls": urls, "procs": []})
    fp8 = JobsTab(AppContext(s8, fleet_urls=urls, simulated=False)).form._cost_html(1_000_000)
    assert "pixels, fp8 (" in fp8 and f"({at_fp8.clips_per_s:.1f} clips/s" in fp8
    assert jobs_start.ASSUMED_PRECISION not in fp8
    other = [f"http://10.9.8.{i}:8000" for i in range(8)]  # the record is of another fleet than the app watches
    theirs = JobsTab(AppContext(s8.replace(fleet_urls=tuple(other)), fleet_urls=other, simulated=False)).form
    assert jobs_start.ASSUMED_PRECISION in theirs._cost_html(1_000_000)
    # priced on the GPU model the launcher recorded for each replica, never another model's rate (issue 48)
    assert jobs_start.ASSUMED_GPU in html
    ms = cost_records.default_measurements()
    for model in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        gpus = [{"url": u, "index": i, "name": model, "memory_mib": 1} for i, u in enumerate(urls)]
        fleet_record.save_record(s8, {"precision": "bf16", "replica_urls": urls, "procs": [], "gpus": gpus})
        on = JobsTab(AppContext(s8, fleet_urls=urls, simulated=False)).form._cost_html(1_000_000)
        want = cost.estimate(8, 16, "bf16", ms, gpu=model)
        assert f"on 8 x {model} at 16 frames" in on and f"({want.clips_per_s:.1f} clips/s" in on
        assert f"measured on {model}" in on and jobs_start.ASSUMED_GPU not in on
    gpus = [{"url": u, "index": i, "name": "NVIDIA A100-SXM4-80GB", "memory_mib": 1} for i, u in enumerate(urls)]
    fleet_record.save_record(s8, {"precision": "bf16", "replica_urls": urls, "procs": [], "gpus": gpus})
    a100 = JobsTab(AppContext(s8, fleet_urls=urls, simulated=False)).form._cost_html(1_000_000)
    assert "No cost estimate for 16 frames" in a100 and "on NVIDIA A100-SXM4-80GB" in a100
    assert "measured on other GPUs only" in a100 and "GPU-hours" not in a100


def test_the_browse_form_shows_every_filter_it_can_express_and_reads_it_back():
    """Filter dict -> form values -> Filter, for a value of every field the form has (generated from
    FORM_FIELDS and the Filter field types: a new input gets its cases without touching this test)."""
    from data import clips
    from webapp.browse import tab as browse_tab

    cases = [{}, {"unassigned": True}, {"assignee": "me-user"}]
    for name in browse_tab.FORM_FIELDS:
        kind = clips.FIELD_TYPES[name]
        if name in browse_tab.CHOICES:
            cases += [{name: v} for v in browse_tab.CHOICES[name]]
        elif kind is bool:
            cases += [{name: True}, {name: False}]
        elif kind is int:
            cases.append({name: 7})
        else:
            cases.append({name: "pedestrian night"} if name == "text" else {name: "ann"})
    for fdict in cases:
        form = browse_tab.form_from_filter(fdict)
        assert browse_tab.read_form(browse_tab.form_values({**form, browse_tab.SORT: "oldest"})) == {
            **form,
            "sort": "oldest",
        }
        assert browse_tab.filter_from_form(form, me="me-user").to_dict() == fdict, (fdict, form)
    # a script that sends fewer values than the form has: the rest are "not sent", not shifted
    assert browse_tab.read_form(["approved"]) == {
        **{n: None for n in browse_tab.FORM_FIELDS},
        "review_status": "approved",
    } | {"sort": None}
    assert browse_tab.filter_from_form(browse_tab.read_form(["approved"])).to_dict() == {"review_status": "approved"}
    with pytest.raises(DataError, match="job id must be a whole number"):
        browse_tab.filter_from_form({"job_id": "1.5"})


@pytest.fixture
def built(settings):
    """The app built in-process (login off), over 70 clips without captions: its workbench and its Blocks."""
    from data import db as dbmod
    from webapp.app import build_app

    db = dbmod.connect(settings.db)
    db["clips"].insert_all({"path": f"c{i:03d}.mp4"} for i in range(70))
    db.close()
    app = build_app(settings.replace(auth="off"))
    yield app.state.workbench, app.state.demo
    app.state.ctx.close()


@pytest.fixture
def workbench(built):
    return built[0]


def test_browse_pages_by_cursor_and_refuses_a_bad_order_or_cursor_with_a_message(workbench):
    import gradio as gr

    from webapp.browse import tab as browse_tab

    b = workbench.browse
    first = b.apply(None, *browse_tab.form_values({browse_tab.SORT: "oldest"}))
    assert first[b.anchors] == [None] and first[b.next_cursor] and 'data-sort="oldest"' in first[b.counts]
    second = b.page({}, [None, first[b.next_cursor]], "oldest", None)
    assert "Page 2 · clips #61–#70" in second[b.page_label] and second[b.next_cursor] is None
    newest = b.apply(None, *browse_tab.form_values({browse_tab.SORT: "newest"}))
    assert "clips #70–#11" in newest[b.page_label] and 'data-sort=""' in newest[b.counts]  # the default: no ?sort
    with pytest.raises(gr.Error, match="Unknown sort order"):
        b.apply(None, *browse_tab.form_values({browse_tab.SORT: "sideways"}))
    with pytest.raises(gr.Error, match="start again from the first page"):
        b.page({}, [None, "tampered"], "oldest", None)
    with pytest.raises(gr.Error, match="start again from the first page"):  # a cursor of another order
        b.page({}, [None, first[b.next_cursor]], "newest", None)


def test_review_shows_any_refusal_of_the_data_layer_once(workbench):
    """Labels outside the taxonomy (InvalidLabels), a missing label, a stale base (Conflict): each is a
    DataError, shown as a message by the one place Review catches them; a caption conflict shows theirs beside
    the edit and offers the three ways out (keep mine, take theirs, edit merged), with the edit still unsaved."""
    from data import captions, examples
    from webapp.review.form import LABELS, ReviewForm

    r, act = workbench.review.view, workbench.review.actions
    db = workbench.ctx.db()
    cap, _ = captions.add_machine(db, 1, job_id=None, text="A car.", labels=examples.LABELS, provenance={})
    good = [examples.LABELS[n] for n in LABELS]
    bad = [("sideways" if n == "weather" else v) for n, v in zip(LABELS, good)]
    out = act.save(None, *ReviewForm(1, cap["id"], None, "A car, edited.", tuple(bad)).values())
    assert set(out) == {r.msg} and "weather" in out[r.msg] and "cw-msg-error" in out[r.msg]
    missing = [None if n == "weather" else v for n, v in zip(LABELS, good)]
    out = act.decide("approved")(None, *ReviewForm(1, cap["id"], None, "x", tuple(missing)).values(), {}, "newest")
    assert "Choose a value for weather" in out[r.msg]
    captions.save_human(db, 1, text="Someone else's.", labels=examples.LABELS, author="bob", base_caption_id=cap["id"])
    out = act.save(None, *ReviewForm(1, cap["id"], None, "Mine.", tuple(good)).values())
    assert "changed by bob" in out[r.msg] and out[r.conflict_box]["visible"] is True
    assert "Someone" in out[r.conflict_view] and "<ins>Mine.</ins>" in out[r.conflict_view]
    assert out[r.theirs] == db["clips"].get(1)["current_caption_id"] and r.text not in out  # the edit stays
    assert captions.get(db, db["clips"].get(1)["current_caption_id"])["text"] == "Someone else's."


def test_a_form_sent_before_the_last_answer_showed_changes_no_clip(built):
    """An answer sets the form's state (which clip, which versions) on the server before the page shows the new
    clip's text. n then a, typed fast, sent clip 1's text with the state n had just set (clip 2): approve saved
    clip 1's caption onto clip 2 as the person's edit, and approved it. Every event that sets the state now sets
    the page's copy of it too, and a form whose copy is not the state is refused: nothing saved, nothing decided."""
    import gradio as gr

    from data import captions, examples
    from webapp import form_echo
    from webapp.form_echo import HALF_SENT
    from webapp.review.form import LABELS, ReviewForm

    bench, demo = built
    r = bench.review.view
    db = bench.ctx.db()
    for cid in (1, 2):
        captions.add_machine(db, cid, job_id=None, text=f"Clip {cid}.", labels=examples.LABELS, provenance={})
    fns = {f.api_name: f for f in demo.fns.values()}
    labels = [examples.LABELS[n] for n in LABELS]
    # the page's copy comes with every answer that sets the state: here, opening clip 1, then n's answer (clip 2)
    opened = fns["goto_clip"].fn(None, "1", *ReviewForm(None).values(), None, None, None)
    page = [opened[r.echo[s]] for s in (r.clip_id, r.base, r.review_base)]
    assert page[0] == "1" and page[1] == str(opened[r.base]) and page[2] == opened[r.review_base]
    state1 = [opened[s] for s in (r.clip_id, r.base, r.review_base)]
    went = fns["next_unreviewed"].fn(None, *state1, "Clip 1.", *labels, {}, "oldest", *page)
    state2 = [went[s] for s in (r.clip_id, r.base, r.review_base)]
    assert state2[0] == 2 and [went[r.echo[s]] for s in (r.clip_id, r.base, r.review_base)] == [
        "2",
        str(state2[1]),
        state2[2],
    ]
    # a sent before n's answer showed: clip 2's state (the server's), clip 1's text and copy (the page's)
    with pytest.raises(gr.Error, match="Nothing was saved or changed"):  # a toast (failures.handler)
        fns["approve"].fn(None, *state2, "Clip 1.", *labels, {}, "oldest", *page)
    assert db["clips"].get(2)["review_status"] == "unreviewed"
    assert captions.get(db, db["clips"].get(2)["current_caption_id"])["text"] == "Clip 2."
    assert db.execute("SELECT COUNT(*) FROM captions WHERE source = 'human'").fetchone()[0] == 0
    # the same with the page caught up: it acts, on the clip the page shows
    now = [went[r.echo[s]] for s in (r.clip_id, r.base, r.review_base)]
    out = fns["approve"].fn(None, *state2, "Clip 2.", *labels, {}, "oldest", *now)
    assert "marked clip 2 approved" in out[r.msg].lower() and db["clips"].get(2)["review_status"] == "approved"
    # scripts send no copy (None): nothing to compare
    form_echo.check([2, 5, "x"], [None, None, None])
    assert "press it again" in HALF_SENT
    # the Second review tab: its task is a state too; labels sent for the task the page showed before Next's
    # answer are refused before anything is recorded
    second = fns["second_approve"]
    assert second.inputs[-1] is bench.second.echo[bench.second.task]
    assert any(o is bench.second.echo[bench.second.task] for o in fns["second_next"].outputs)
    with pytest.raises(gr.Error, match="Nothing was saved or changed"):
        second.fn(None, 5, *labels, "4")
    # a handler that sets the state without the page's copy is a wiring error, found when the app is built
    with gr.Blocks() as other:
        gr.Button().click(lambda: 1, None, [r.clip_id])
    with pytest.raises(RuntimeError, match="without its copy form-clip"):
        form_echo.echo_events(other, r.echo)


def test_review_walks_the_grid_order_both_ways(workbench):
    from data import captions, examples
    from webapp.review.form import ReviewForm

    r, act = workbench.review.view, workbench.review.actions
    step = act.step(+1)
    assert step(None, *ReviewForm(5).values(), {}, "newest")[r.clip_id] == 4  # newest first: next is older
    assert step(None, *ReviewForm(5).values(), {}, "oldest")[r.clip_id] == 6
    assert act.step(-1)(None, *ReviewForm(5).values(), {}, "newest")[r.clip_id] == 6
    db = workbench.ctx.db()
    for cid in (4, 6, 7):  # the queue serves clips with a caption to check
        captions.add_machine(db, cid, job_id=None, text=f"c{cid}", labels=examples.LABELS, provenance={"model": "m"})
    assert act.queue_next(None, *ReviewForm(5).values(), {}, "oldest")[r.clip_id] == 6
    assert act.queue_next(None, *ReviewForm(5).values(), {}, "newest")[r.clip_id] == 4


def test_history_badges_the_candidates_data_marks(db):
    """render keeps the HTML only: which version is a candidate is data.captions' rule."""
    from data import captions, examples

    cid = db["clips"].insert({"path": "x.mp4"}).last_pk
    first, _ = captions.add_machine(db, cid, job_id=None, text="v1", labels=examples.LABELS, provenance={})
    captions.save_human(
        db, cid, text="v2 by a human", labels=examples.LABELS, author="ann", base_caption_id=first["id"]
    )
    late, replaced = captions.add_machine(db, cid, job_id=None, text="v3", labels=examples.LABELS, provenance={})
    versions = captions.history(db, cid)
    assert not replaced and [v["id"] for v in versions if v["candidate"]] == [late["id"]]
    html = render.history(versions)
    assert html.count(">candidate<") == 1 and html.index(">candidate<") < html.index("v2 by a human")


def _browse(session, text: str) -> str:
    """The Browse search event as the page sends it; returns the grid and counts HTML it answered with."""
    out = session.call("browse_search", ["any"] * 7 + [None, text, "any", "newest"])
    return " ".join(v for v in out if isinstance(v, str))


def test_browse_search_unions_or_and_hints_when_it_cannot_or_does_not_find(server, library):
    """Issue 18: `a OR b` found 0 (OR was searched as a word) and a broken query was a silent 0."""
    import re

    from tests.support.reliability_fixtures import GradioSession, dependencies, login_cookie

    cookie = login_cookie(server.url, "ann")
    s = GradioSession(server.url, cookie, dependencies(server.url, cookie))
    try:

        def matches(html: str) -> set[int]:
            return {int(x) for x in re.findall(r'data-clip="(\d+)"', html)}

        cyclist, bus = _browse(s, "cyclist"), _browse(s, "bus")
        either = _browse(s, "cyclist OR bus")
        assert matches(cyclist) and matches(bus) and matches(either) == matches(cyclist) | matches(bus)
        assert f"<b>{len(matches(either))}</b> match" in either
        assert matches(_browse(s, '"while a cyclist passes"')) == matches(cyclist)
        assert matches(_browse(s, "cycl*")) == matches(cyclist)
        none = _browse(s, "cyclist bus")  # no clip has both: the grid says why, and what to write
        assert not matches(none) and 'id="search-hint"' in none and "cyclist OR bus" in none
        broken = _browse(s, '"cyclist OR')
        assert 'id="search-hint"' in broken and "The search was not run" in broken and "quote" in broken
        assert not matches(broken)
        dangling = _browse(s, "cyclist OR")
        assert "OR needs a word on each side" in dangling
    finally:
        s.close()


def test_provenance_says_where_the_text_came_from_and_who_changed_it(db):
    from data import caption_history, captions
    from tests.support.webapp_fixtures import LABELS, machine_provenance

    cid = db.execute("INSERT INTO clips (path) VALUES ('p.mp4')").lastrowid
    db.conn.commit()
    m, _ = captions.add_machine(
        db,
        cid,
        job_id=None,
        text="[SIMULATED] a bus",
        labels=LABELS,
        provenance=machine_provenance(model="Qwen3-VL-8B", prompt_name="av-caption", prompt_version=2),
    )
    own = render.provenance(m, caption_history.lineage(db, m))
    assert "Machine caption by Qwen3-VL-8B, prompt av-caption v2, 16 frames, 150 tokens" in own
    assert "SIMULATED" in own and "{" not in own  # parameters in words, not JSON
    assert "frames 16" in own and "max tokens 320" in own
    fixed = captions.save_human(
        db, cid, text=m["text"], labels={**LABELS, "weather": "snow"}, author="anna", base_caption_id=m["id"]
    )
    html_out = render.provenance(fixed, caption_history.lineage(db, fixed))
    summary = html_out[html_out.index('id="prov-summary"') : html_out.index("</p>")]
    assert "Machine caption v1 by Qwen3-VL-8B, prompt av-caption v2" in summary
    assert f"edited by anna {render.when(fixed['created_at'])} (labels)" in summary
    assert "derived from a caption written by the simulated fleet" in html_out
    assert "<th>derived from</th><td>v1 (model, model)</td>" in html_out
    assert "<th>changed since</th><td>labels (weather)</td>" in html_out
    assert "source" not in html_out  # no more "source: human by anna"
    back = captions.adopt(db, cid, caption_id=m["id"], author="lee", base_caption_id=fixed["id"])
    html_out = render.provenance(back, caption_history.lineage(db, back))
    assert "<th>adopted from</th><td>v1 (model, model)</td>" in html_out and "(no change)" in html_out
    other = db.execute("INSERT INTO clips (path) VALUES ('q.mp4')").lastrowid
    db.conn.commit()
    typed = captions.save_human(db, other, text="by hand", labels=LABELS, author="bo", base_caption_id=None)
    html_out = render.provenance(typed, caption_history.lineage(db, typed))
    assert f"Written by bo {render.when(typed['created_at'])}" in html_out and "SIMULATED" not in html_out


def test_provenance_shows_the_model_s_least_sure_labels_and_where_text_and_labels_disagree(db):
    from data import caption_history, captions, taxonomy
    from tests.support.webapp_fixtures import LABELS, machine_provenance
    from webapp import render

    cid = db.execute("INSERT INTO clips (path) VALUES ('c.mp4')").lastrowid
    db.conn.commit()
    conf = {"labels": {**dict.fromkeys(taxonomy.ENUMS, 0.97), "weather": 0.42, "lighting": 0.71}, "items": {}}
    m, _ = captions.add_machine(
        db,
        cid,
        job_id=None,
        text="A pedestrian waits.",
        labels={**LABELS, "road_users": ["car"]},
        provenance=machine_provenance(confidence=conf | {"end": {}}),
    )
    html_out = render.provenance(m, caption_history.lineage(db, m))
    least = "weather 0.42, lighting 0.71, ego maneuver 0.97 (least sure first; 4 more above)"
    assert f"<th>model confidence</th><td>{least}</td>" in html_out
    assert "<th>text vs labels</th><td>the text names a pedestrian but road users lacks pedestrian</td>" in html_out
    fixed = captions.save_human(
        db, cid, text="A car waits.", labels={**LABELS, "road_users": ["car"]}, author="ann", base_caption_id=m["id"]
    )
    html_out = render.provenance(fixed, caption_history.lineage(db, fixed))
    assert f"<th>model confidence</th><td>{least}</td>" in html_out  # the origin's, kept through the edit
    assert "text vs labels" not in html_out
    unread = {"labels": dict.fromkeys(taxonomy.ENUMS), "items": {}, "end": {}, "note": "the tokens do not spell it"}
    assert render.confidence_summary(unread) == "the tokens do not spell it"
    assert render.confidence_summary(None) is None


def test_conflict_and_draft_views_escape_every_piece_of_text():
    """S3 for the views added with the shared queue: their text, a name and labels are never markup."""
    evil = '<img src=x onerror="alert(1)">'
    theirs = {"id": 1, "version": 2, "author": evil, "created_at": 0, "text": f"a {evil} b", "labels": {}}
    out = render.conflict(theirs, f"a b {evil}", {"weather": evil})
    assert "<img" not in out and "&lt;img" in out
    draft = {"clip_id": 1, "saved_at": 1.0, "text": evil, "labels": {"weather": "fog"}}
    out = render.draft_offer(draft, {**theirs, "labels": {"weather": "rain"}}, stale=True)
    assert "<img" not in out and "(caption, weather)" in out and "saved version 2 since" in out
    header = render.header(
        {"id": 1, "path": evil, "review_status": "broken", "review_note": evil}, "u", "lead", holder=evil
    )
    assert "<img" not in header and header.count("&lt;img") == 3
