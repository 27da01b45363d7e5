// Drafts, the review lease and the session, for the review page (webapp/routes/activity.py says what the server does).
// - As the person edits the caption or a label, the form is copied into localStorage at once and written to the
//   server (PUT /drafts/CLIP) after a short pause: an edit survives a reload, a closed tab and an ended session,
//   and the server offers it back when the person returns to the clip (webapp/review/view.py, drafts.py).
//   Nothing here saves a caption version.
// - Keys, clicks and a playing video on an open clip tell the server the person is still on it (POST
//   /leases/CLIP, at most every LEASE_PING_MS): the others' "next" keeps skipping it.
// - A 401 from the server means the session ended (signed out in another tab, or expired). Gradio would paint
//   every field with a red "Error"; instead the page says so in plain words with a link to log in again, and the
//   edit stays in localStorage. After the next login the page pushes what localStorage kept, then asks the server
//   to offer the open clip's draft.
(() => {
  if (window.__cwDrafts) return;
  window.__cwDrafts = true;
  const PUSH_DELAY_MS = 800;
  const LEASE_PING_MS = 20_000;
  const PREFIX = "cw-draft:";
  const $ = (sel) => document.querySelector(sel);

  // ---- the session -------------------------------------------------------------------------------------------
  const ended = () => {
    if (window.cwSessionEnded) return;
    window.cwSessionEnded = true;
    stash();  // whatever the form holds now
    const next = location.pathname + location.search;
    const box = document.createElement("div");
    box.id = "session-ended";
    box.setAttribute("role", "alertdialog");
    box.setAttribute("aria-modal", "true");
    box.setAttribute("aria-labelledby", "session-ended-title");
    box.innerHTML = '<div class="cw-session-box"><h2 id="session-ended-title">Your session has ended</h2>' +
      "<p>You were signed out (in another tab, or after a long time without use), so this page cannot save " +
      "anything now. What you typed and did not save is kept in this browser, and offered back when you open " +
      'the clip after logging in.</p><p><a id="session-login" href="">Log in again</a></p></div>';
    box.querySelector("#session-login").href = "/login?next=" + encodeURIComponent(next);
    document.body.append(box);
    box.querySelector("#session-login").focus();
  };
  const sameSite = (url) => {
    try { return new URL(url, location.href).origin === location.origin; } catch { return false; }
  };
  const ours = (url) => /\/(gradio_api|drafts|leases)\//.test(new URL(url, location.href).pathname);
  const realFetch = window.fetch.bind(window);
  window.fetch = async (input, init) => {
    const url = typeof input === "string" ? input : input?.url || String(input);
    const resp = await realFetch(input, init);
    if (resp.status === 401 && sameSite(url) && ours(url)) {
      ended();
      // Gradio would show the 401 as an error on every output of the event: the dialog says it instead, and
      // the event stays pending behind it (the page is done once the session is)
      if (/\/gradio_api\//.test(url)) return new Promise(() => {});
    }
    return resp;
  };

  // ---- the form ---------------------------------------------------------------------------------------------
  const user = () => $("#whoami")?.textContent.trim() || null;
  const open = () => {  // the clip the form shows and the version it is based on (data-loaded: clip:caption:status)
    const h = $("#clip-header");
    if (!h || !h.dataset.clip) return null;
    const base = Number((h.dataset.loaded || "").split(":")[1]) || null;
    return {clip: h.dataset.clip, base};
  };
  const form = () => {
    const box = $("#caption-text textarea");
    return {text: box ? box.value : "", labels: window.cwPicker?.values?.() || {}};
  };
  // an offer of an older draft is on show: typing must not replace that draft before the person chose
  const offerShown = () => { const o = $("#draft-note"); return !!o && o.offsetParent !== null; };

  const key = (u, clip) => `${PREFIX}${u}:${clip}`;
  const stash = () => {
    const u = user();
    const at = open();
    if (!u || !at || offerShown() || !window.cwUnsaved?.()) return null;
    const entry = {clip: at.clip, base: at.base, ...form(), at: Date.now()};
    try { localStorage.setItem(key(u, at.clip), JSON.stringify(entry)); } catch { /* full or disabled */ }
    return entry;
  };
  const unstash = (u, clip, entry) => {
    try {
      const now = localStorage.getItem(key(u, clip));
      if (now !== null && (!entry || JSON.parse(now).at === entry.at)) localStorage.removeItem(key(u, clip));
    } catch { /* disabled */ }
  };

  const put = async (u, entry) => {
    const resp = await realFetch(`/drafts/${encodeURIComponent(entry.clip)}`, {
      method: "PUT", headers: {"Content-Type": "application/json"}, credentials: "same-origin",
      body: JSON.stringify({base: entry.base, text: entry.text, labels: entry.labels}),
    });
    if (resp.status === 401) { ended(); return false; }
    if (resp.ok) { unstash(u, entry.clip, entry); $("#draft-status")?.remove(); return true; }
    if (resp.status === 429) {
      // over the person's write budget (webapp/budget.py): the edit stays in this browser and is written after
      // the wait the server gave
      const wait = Math.max(1, Number(resp.headers.get("Retry-After")) || 5);
      say(`Your unsaved edit is kept in this browser and will be written as a draft in ${wait} s ` +
          "(too many changes in a short time).");
      if (!timer && open()?.clip === String(entry.clip)) timer = setTimeout(push, wait * 1000);
      return false;
    }
    // refused for good (over a bound, a clip gone): the text stays in the form, the page says why
    const why = (await resp.json().catch(() => ({}))).detail || `HTTP ${resp.status}`;
    say(`Your unsaved edit could not be kept as a draft: ${why}`);
    unstash(u, entry.clip, entry);
    return false;
  };
  const say = (text) => {
    const m = $("#review-msg");
    if (!m) return;
    let note = $("#draft-status");
    if (!note) {
      note = document.createElement("div");
      note.id = "draft-status";
      note.className = "cw-msg cw-msg-error";
      note.setAttribute("role", "status");
      m.after(note);
    }
    note.textContent = text;
  };

  let timer = null;
  const push = () => {
    clearTimeout(timer);
    timer = null;
    const u = user();
    const entry = stash();
    if (u && entry && !window.cwSessionEnded) put(u, entry).catch(() => {});  // offline: the stash stays
  };
  const edited = () => {
    if (!open() || window.cwSessionEnded) { stash(); return; }
    stash();
    clearTimeout(timer);
    timer = setTimeout(push, PUSH_DELAY_MS);
  };
  document.addEventListener("input", (ev) => {
    if (ev.target.closest && ev.target.closest("#caption-text")) edited();
  }, true);
  // Review's labels only: the blind second review's form is answered, never drafted
  document.addEventListener("cw-label-change", (ev) => { if ((ev.detail?.scope ?? "review") === "review") edited(); });
  // leaving the page or the tab: write now, and let the request outlive the page
  const flush = () => {
    if (!timer) return;
    clearTimeout(timer);
    timer = null;
    const u = user();
    const entry = stash();
    if (!u || !entry || window.cwSessionEnded) return;
    realFetch(`/drafts/${encodeURIComponent(entry.clip)}`, {
      method: "PUT", headers: {"Content-Type": "application/json"}, credentials: "same-origin", keepalive: true,
      body: JSON.stringify({base: entry.base, text: entry.text, labels: entry.labels}),
    }).then((r) => { if (r.ok) unstash(u, entry.clip, entry); }).catch(() => {});
  };
  window.addEventListener("pagehide", flush);
  document.addEventListener("visibilitychange", () => { if (document.visibilityState === "hidden") flush(); });

  // The form was refilled by the server (another clip, "take theirs"): a pending write is for a form that is
  // gone. A form filled with an edit (data-dirty), or kept by a save with an edit typed after it left (data-form
  // "kept", still unsaved: shortcuts.js), is written after the usual pause, with the base it has now.
  let shown = null;
  const watchHeader = () => {
    const h = $("#clip-header");
    const now = h ? `${h.dataset.loaded}|${h.dataset.dirty || ""}` : null;
    if (now === shown) return;
    shown = now;
    clearTimeout(timer);
    timer = null;
    const unsaved = h && (h.dataset.dirty === "1" || (h.dataset.form === "kept" && window.cwUnsaved?.()));
    if (unsaved) timer = setTimeout(push, PUSH_DELAY_MS);
  };
  // "discard" and "take theirs" drop the edit on purpose: the browser's copy goes too
  document.addEventListener("click", (ev) => {
    if (!(ev.target.closest && ev.target.closest("#btn-draft-discard, #btn-take-theirs"))) return;
    clearTimeout(timer);  // a write about to go would bring the edit back
    timer = null;
    const at = open();
    if (at && user()) unstash(user(), at.clip);
  }, true);

  // ---- after a login: push what the browser kept -------------------------------------------------------------
  let pushedFor = null;
  const pushKept = async () => {
    const u = user();
    if (!u || pushedFor === u) return;
    pushedFor = u;
    const kept = [];
    try {
      for (let i = 0; i < localStorage.length; i++) {
        const k = localStorage.key(i);
        if (k && k.startsWith(key(u, ""))) kept.push(JSON.parse(localStorage.getItem(k)));
      }
    } catch { return; }
    let any = false;
    for (const entry of kept) {
      if (entry && entry.clip && (await put(u, entry).catch(() => false))) any = true;
    }
    // the open clip was drawn before its draft arrived: ask for its offer again
    if (any && open()) document.querySelector("#btn-draft-check button, button#btn-draft-check")?.click();
  };

  // ---- the review lease: activity on the open clip -------------------------------------------------------------
  let lastPing = 0;
  const active = () => {
    const at = open();
    const review = $("#btn-approve");
    if (!at || window.cwSessionEnded || !review || review.offsetParent === null) return;
    const t = Date.now();
    if (t - lastPing < LEASE_PING_MS) return;
    lastPing = t;
    realFetch(`/leases/${encodeURIComponent(at.clip)}`, {method: "POST", credentials: "same-origin"})
      .then((r) => { if (r.status === 401) ended(); }).catch(() => {});
  };
  for (const type of ["keydown", "pointerdown", "wheel"]) document.addEventListener(type, active, {passive: true});
  document.addEventListener("timeupdate", (ev) => { if (ev.target.id === "cw-video") active(); }, true);

  // ---- times in the reader's own zone -------------------------------------------------------------------------
  const localTimes = () => {
    for (const t of document.querySelectorAll("time.cw-local-time:not([data-local])")) {
      const d = new Date(t.getAttribute("datetime"));
      if (isNaN(d)) continue;
      t.dataset.local = "1";
      t.textContent = d.toLocaleTimeString([], {hour: "2-digit", minute: "2-digit", hourCycle: "h23"});
    }
  };

  new MutationObserver(() => {
    watchHeader();
    localTimes();
    if (user()) pushKept();
  }).observe(document.documentElement, {childList: true, subtree: true, attributes: true,
                                         attributeFilter: ["data-loaded", "data-dirty", "data-clip"]});
})();
