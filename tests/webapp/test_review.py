"""The Review tab's pieces, called in-process: the player and header it renders, the label pickers and the page's
scripts, a link to no clip, refusals shown once, a form sent before the last answer, the grid order, the history
and provenance it shows. In a real browser: tests/browser/test_browser_review_flow.py and the others there."""

from __future__ import annotations

import pytest

from tests.support.built_app import built_app
from webapp import render


@pytest.fixture
def built(settings):
    """The app built in-process (tests/support/built_app.py): its workbench and its Blocks."""
    with built_app(settings) as b:
        yield b


@pytest.fixture
def workbench(built):
    return built[0]


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
