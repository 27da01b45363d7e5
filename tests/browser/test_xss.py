"""S3: no script runs from model or user text. 50+ payloads in human and model captions, provenance fields,
file names, ingest errors, job names, user names and failure reasons, rendered in headless Chromium on every
page that shows them: 0 executions (a global counter the payloads bump, window.alert hooked, dialogs and page
errors collected)."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from data import captions, db as dbmod, jobs, users
from data.job_params import JobParams
from data.jobs import items as job_items
from data.jobs.selection import Selection
from tests.support.browser_fixtures import login
from tests.support.webapp_fixtures import LABELS, PASSWORD, machine_provenance

pytestmark = pytest.mark.browser

HIT = "window.__xss=(window.__xss||0)+1"
TEMPLATES = [
    "<script>{js}</script>",
    '<img src=x onerror="{js}">',
    '<svg onload="{js}">',
    "<svg><script>{js}</script></svg>",
    '"><script>{js}</script>',
    "'><img src=x onerror={js}>",
    '<body onload="{js}">',
    '<iframe srcdoc="<script>parent.{js}</script>">',
    '<iframe src="javascript:parent.{js}">',
    '<a href="javascript:{js}" id=xlink>x</a>',
    '<details open ontoggle="{js}">',
    '<video><source onerror="{js}"></video>',
    '<audio src=x onerror="{js}">',
    '<input autofocus onfocus="{js}">',
    '<select autofocus onfocus="{js}">',
    '<textarea autofocus onfocus="{js}">',
    '<marquee onstart="{js}">',
    '<object data="javascript:{js}">',
    '<embed src="javascript:{js}">',
    '<math><mtext><img src=x onerror="{js}">',
    "<style>@import 'javascript:{js}'</style>",
    '<div style="background:url(javascript:{js})">',
    '<img src="x" onerror="&#x77;indow.__xss=(window.__xss||0)+1">',
    "<img src=x:alert(1) onerror=eval(src)>",
    '<svg><animate onbegin="{js}" attributeName=x dur=1s>',
    '<form><button formaction="javascript:{js}">x</button></form>',
    "<isindex action=javascript:{js} type=image>",
    '<meta http-equiv="refresh" content="0;javascript:{js}">',
    "{{{{constructor.constructor('{js}')()}}}}",
    "${{{js}}}",
    "<scr<script>ipt>{js}</scr</script>ipt>",
    "<IMG SRC=JaVaScRiPt:{js}>",
    "<img src=`x` onerror=`{js}`>",
    "</textarea><script>{js}</script>",
    "</title><script>{js}</script>",
    "</style><script>{js}</script>",
    "<!--<script>{js}</script>-->",
    "<![CDATA[<script>{js}</script>]]>",
    '<base href="javascript:{js}//">',
    '<link rel=import href="data:text/html,<script>{js}</script>">',
    '<svg><use href="data:image/svg+xml,<svg id=x xmlns=http://www.w3.org/2000/svg><image href=1 onerror={js} /></svg>#x"/>',  # noqa: E501 (one payload)
    "<img src=x onerror=alert(1)>",
    "<script>alert(document.domain)</script>",
    "javascript:alert(1)",
    "<svg/onload=alert(1)>",
    '<img srcset=x onerror="{js}">',
    '<picture><source srcset=x><img onerror="{js}"></picture>',
    '<table background="javascript:{js}">',
    '<x contenteditable onfocus="{js}" autofocus>',
    '<div onmouseover="{js}" style="position:fixed;inset:0">hover</div>',
    '<a id=tile-1 href=# onclick="{js}">click</a>',
    '<button id=btn-save onclick="{js}">save</button>',
]
PAYLOADS = [t.replace("{js}", HIT) for t in TEMPLATES]


@pytest.fixture(scope="module")
def hostile(web_settings, library):
    db = dbmod.connect(web_settings.db)
    rows = [
        {
            "path": f"xss/{i:02d}/{p}.mp4",
            "probe_error": (p if i % 5 == 0 else None),
            "codec": "h264",
            "sidecar": json.dumps({"note": p}),
        }
        for i, p in enumerate(PAYLOADS)
    ]
    db["clips"].insert_all(rows)
    ids = [r["id"] for r in db.query("SELECT id FROM clips WHERE path LIKE 'xss/%' ORDER BY id")]
    for i, (cid, p) in enumerate(zip(ids, PAYLOADS)):
        prov = machine_provenance(model=p, replica=p, decode_backend=p, prompt_name=p)
        cap, _ = captions.add_machine(db, cid, job_id=None, text=f"model says {p}", labels=LABELS, provenance=prov)
        if i % 2:
            author = f"evil{i}{p}"[:64]
            captions.save_human(
                db, cid, text=f"human says {p}", labels=LABELS, author=author, base_caption_id=cap["id"]
            )
    users.create(db, '<img src=x onerror="' + HIT + '">', role="lead", password=PASSWORD)
    for p in PAYLOADS[:10]:
        job_id = jobs.create(
            db, name=p, created_by=p[:60], selection=Selection.of_clips(ids[:3]), prompt_id=None, params=JobParams()
        )
        job_items.claim(db, job_id, "r", 3, lease_seconds=60, max_attempts=1)
        for cid in ids[:3]:
            job_items.fail(db, job_id, cid, error=p, kind=p, retryable=False, max_attempts=1)
    db.close()
    return ids


def hits(page) -> int:
    return page.evaluate("window.__xss || 0") + page.evaluate("window.__alerts || 0")


def test_no_payload_executes(browser, server, hostile):
    assert len(hostile) == len(PAYLOADS)  # every payload (50+) is a clip in the library, with its captions
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    ctx.add_init_script(
        "window.__xss = 0; window.__alerts = 0; window.alert = window.confirm = window.prompt = "
        "() => { window.__alerts++; };"
    )
    try:
        page, watch = login(ctx, server.url, '<img src=x onerror="' + HIT + '">')
        page.wait_for_selector(".cw-tile")
        assert page.locator(".cw-tile").count() >= 50  # the hostile clips are the newest: all on page 1
        page.mouse.move(700, 500)
        for cid in hostile[::3]:
            page.locator(f"a.cw-tile[data-clip='{cid}']").click()
            page.wait_for_function(f"document.querySelector('#review-header')?.innerText.includes('#{cid} ')")
            assert page.locator("#history .cw-version").count() >= 1
            page.click("#tab-browse-button")
        page.goto(f"{server.url}/?clip={hostile[1]}")
        page.wait_for_selector("#provenance .cw-prov")
        page.click("#tab-browse-button")
        page.fill("#search textarea, #search input", "onerror")
        page.press("#search textarea, #search input", "Enter")
        page.wait_for_timeout(800)
        page.click("#tab-jobs-button")
        page.wait_for_selector("#jobs-table")
        page.fill("#job-id input", str(1))
        page.wait_for_timeout(3000)
        assert "onerror" in page.inner_text("body")  # the payloads are shown, as text
        assert hits(page) == 0
        # a link whose ?clip= is a payload: Review says it is not a clip id, quoting it as text
        for p in PAYLOADS[::7]:
            page.goto(f"{server.url}/?clip={quote(p)}")
            page.wait_for_selector("#clip-missing")
            assert "is not a clip id" in page.inner_text("#clip-missing")
            assert hits(page) == 0  # each page load starts its counters again (the init script)
        assert watch.dialogs == [] and watch.errors == []
    finally:
        ctx.close()
