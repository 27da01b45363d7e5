// The review view's keyboard, player and URL glue (issue 10). Shortcuts click the buttons by elem_id, so a key
// does exactly what the button does (same handler, same role checks, same autosave). Keys typed into inputs,
// textareas, selects and editable elements are left alone, except ctrl+s (save) and Esc (leave the field).
// The URL carries the filter and the clip (?f=...&clip=ID): opening a clip pushes a history entry, so the
// browser's Back and Forward move between clips (through the server's goto, which saves an edit first) and a
// link opens the same view. Leaving the page with an unsaved edit asks first (beforeunload).
// The label fields are webapp/static/picker.js's (keys 1-7 open them). The blind second review's form (webapp/
// second_review/tab.py) is Review's without the model: on its tab 1-7 open its fields, a approves and r rejects
// (each then opens the next one), n opens the next one without answering.
// No timers: everything here runs on an event (a key, a click, a DOM change, a history step).
(() => {
  if (window.__cwShortcuts) return;
  window.__cwShortcuts = true;
  const $ = (sel) => document.querySelector(sel);
  const typing = (el) => {
    if (!el) return false;
    const tag = (el.tagName || "").toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || el.isContentEditable ||
      !!(el.closest && el.closest("[contenteditable=''], [contenteditable='true']"));
  };
  const visible = (el) => !!el && el.offsetParent !== null && !el.disabled;
  const click = (id) => {
    const el = document.getElementById(id);
    const btn = el && (el.tagName === "BUTTON" ? el : el.querySelector("button"));
    if (btn && !btn.disabled && (visible(btn) || id === "btn-nav")) { btn.click(); return true; }
    return false;
  };
  const toggleHelp = () => $("#shortcut-help")?.classList.toggle("open");
  const video = () => { const v = $("#cw-video"); return v && v.offsetParent !== null ? v : null; };
  const reviewShown = () => visible($("#btn-approve"));
  const secondShown = () => visible($("#btn-second-approve"));

  // ---- player: frame and second steps, click-to-seek on the model's frames -------------------------------
  const seek = (v, t) => {
    v.pause();
    v.currentTime = Math.max(0, Math.min(isFinite(v.duration) ? v.duration : t, t));
  };
  document.addEventListener("click", (ev) => {
    const f = ev.target.closest && ev.target.closest(".cw-frame");
    if (!f) return;
    const v = video();
    document.querySelectorAll(".cw-frame.cw-on").forEach((x) => x.classList.remove("cw-on"));
    f.classList.add("cw-on");
    if (v) seek(v, parseFloat(f.dataset.t) + 0.001);
  });

  // ---- one request at a time -------------------------------------------------------------------------------
  // Every request of the Review tab sends the form as the page shows it. Until its answer is on screen, a second
  // one acts on what the first is changing: n then a, typed fast, approved the clip being skipped, or, once n's
  // answer had set the server's state but not yet the page, saved the skipped clip's text onto the next clip (the
  // server refuses such a form now: webapp/form_echo.py); j or a right after ctrl+s sent the edit again on the
  // version the save had replaced (a conflict with oneself); j j moved once, not twice. So while one is on its
  // way, the keys and buttons that act on the clip are held here, with a note that says to press again. A save
  // after a save is not: Gradio sends it once the first is answered, on the version that made (webapp/review/tab.py).
  // The answer has arrived when the header or the message changes (each message carries its own data-at), an
  // error toast appears, or SENT_WAIT_MS pass with none.
  const SENDS = "#btn-save, #btn-approve, #btn-reject, #btn-next, #btn-prev, #btn-next-unreviewed, #btn-broken, " +
    "#btn-nav, #btn-keep-mine, #btn-edit-merged, #btn-take-theirs, #btn-adopt, #btn-reload, #btn-clear-broken, " +
    "#btn-draft-restore, #btn-draft-discard, #btn-second-approve, #btn-second-reject, #btn-second-next";
  const ACTS = {"btn-approve": ["Not approved", "a"], "btn-reject": ["Not rejected", "r"],
                "btn-save": ["Not saved", "ctrl+s"], "btn-broken": ["Not flagged as broken", "b"],
                "btn-next": ["Not moved", "j"], "btn-prev": ["Not moved", "k"],
                "btn-next-unreviewed": ["Not moved", "n"], "btn-second-approve": ["Not approved", "a"],
                "btn-second-reject": ["Not rejected", "r"], "btn-second-next": ["Not moved", "n"]};
  const SECOND = new Set(["btn-second-approve", "btn-second-reject", "btn-second-next"]);
  const SENT_WAIT_MS = 4000;
  const answerKey = () => {
    const h = $("#clip-header");
    return [h?.dataset.clip, h?.dataset.loaded, $("#review-msg .cw-msg")?.dataset.at,
            $("#second-clip")?.dataset.review, $("#second-review-msg .cw-msg")?.dataset.at,
            $("#second-count")?.dataset.n, document.querySelectorAll(".toast-body").length].join("|");
  };
  let sent = null;  // the request on its way: {id, at, key (the page's answer key then), clip}
  // window.cwHoldKeys = false lets them through (the browser tests: the server's own check, webapp/form_echo.py)
  const onItsWay = () => window.cwHoldKeys !== false && !!sent && performance.now() - sent.at < SENT_WAIT_MS &&
    answerKey() === sent.key;
  const note = (text, second = false) => {
    let el = document.getElementById(second ? "cw-wait-note-second" : "cw-wait-note");
    const msg = document.getElementById(second ? "second-review-msg" : "review-msg");
    if (!el && msg) {
      el = document.createElement("div");
      el.id = second ? "cw-wait-note-second" : "cw-wait-note";
      el.className = "cw-msg cw-msg-conflict";
      el.setAttribute("role", "status");
      msg.after(el);
    }
    if (el) { el.textContent = text; el.hidden = !text; }
  };
  window.cwOnItsWay = onItsWay;  // for the browser tests
  // the note goes with the next key or click (before a new one may be shown)
  for (const type of ["keydown", "pointerdown"]) {
    document.addEventListener(type, () => { note(""); note("", true); }, true);
  }
  const actsOn = Object.keys(ACTS).map((id) => "#" + id).join(", ");
  document.addEventListener("click", (ev) => {
    const btn = ev.target.closest && ev.target.closest(actsOn);
    if (!btn || !onItsWay() || (btn.id === "btn-save" && sent.id === "btn-save")) return;
    ev.preventDefault();
    ev.stopImmediatePropagation();
    const [what, key] = ACTS[btn.id];
    const which = sent.id === "btn-save" ? "your save" : "your last key";
    note(`${what}: you pressed ${key} before the answer to ${which} on clip ${sent.clip} was on screen. ` +
         `Nothing was done: press ${key} again for the clip shown.`, SECOND.has(btn.id));
  }, true);
  const went = (id) => {
    const clip = (SECOND.has(id) ? $("#second-clip") : $("#clip-header"))?.dataset.clip;
    sent = {id, at: performance.now(), key: answerKey(), clip};
  };
  // in the bubbling phase: only a click that went through (not one refused above or by an unsettled label field)
  document.addEventListener("click", (ev) => {
    const btn = ev.target.closest && ev.target.closest(SENDS);
    if (btn) went(btn.id);
  });
  document.addEventListener("keydown", (ev) => {
    const reason = ev.target.closest && ev.target.closest("#broken-reason");
    if (ev.key === "Enter" && !ev.shiftKey && reason) went("btn-broken");
  });

  // ---- unsaved edits ------------------------------------------------------------------------------------
  // `edits` counts changes to the form; `sentAt` is its value when the last request left (a button of the
  // Review tab, Enter in the broken reason). An answer that keeps the form (header data-form="kept": a save)
  // leaves it unsaved only if it changed after its request left: that edit is the person's, not the save's.
  let dirty = false;
  let loaded = null;
  let edits = 0;
  let sentAt = 0;
  const edited = () => { dirty = true; edits += 1; };
  document.addEventListener("input", (ev) => {
    if (ev.target.closest && ev.target.closest("#caption-text")) edited();
  }, true);
  // a label counts once a value is taken, not while text is typed into its field
  document.addEventListener("cw-label-change", (ev) => { if ((ev.detail?.scope ?? "review") === "review") edited(); });
  document.addEventListener("click", (ev) => {
    if (ev.target.closest && ev.target.closest("#tab-review button")) sentAt = edits;
  }, true);
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && ev.target.closest && ev.target.closest("#broken-reason")) sentAt = edits;
  }, true);
  window.cwUnsaved = () => dirty;  // for the browser tests and anyone curious
  window.addEventListener("beforeunload", (ev) => {
    // once the session has ended the edit is kept in the browser (webapp/static/drafts.js) and offered after login
    if (!dirty || window.cwSessionEnded) return undefined;
    ev.preventDefault();
    ev.returnValue = "You have an unsaved edit.";  // browsers show their own text; older ones need this
    return ev.returnValue;
  });

  // ---- URL <-> view ---------------------------------------------------------------------------------------
  const urlFor = (clip, filter, sort) => {
    const q = new URLSearchParams();
    if (filter && filter !== "{}") q.set("f", filter);
    if (sort) q.set("sort", sort);  // the page leaves the default order out (browse.py)
    if (clip) q.set("clip", clip);
    const s = q.toString();
    return location.pathname + (s ? "?" + s : "");
  };
  let seenClip = null;  // the clip the page last showed: a history entry is pushed when it changes
  let seenSecond = null;  // the second review the page last showed: its fields start empty
  // A new clip opens with its header and player in view, whatever was scrolled before (a long history read, a
  // small window); the page is only moved when one of them is out of view.
  const showClip = () => {
    const header = $("#clip-header");
    const player = $("#player");
    if (!header || !player || !reviewShown() || window.scrollY === 0) return;
    const h = header.getBoundingClientRect();
    const p = player.getBoundingClientRect();
    if (h.top < 0 || (p.bottom > window.innerHeight && p.bottom - h.top <= window.innerHeight))
      window.scrollTo({top: 0, behavior: "instant"});
  };
  const sync = () => {
    const second = $("#second-clip")?.dataset.review ?? null;
    if (second !== seenSecond) {  // another second review (or none): nothing typed for the last one stays
      seenSecond = second;
      window.cwPicker?.resetAll("second");
    }
    const header = $("#clip-header");
    const state = $("#browse-state");
    const q = new URLSearchParams(location.search);
    const filter = state ? state.dataset.filter : q.get("f");
    const sort = state ? state.dataset.sort : q.get("sort");
    // the form was just (re)filled by the server: from the stored version (clean), or with an edit that is not
    // saved (data-dirty: a restored draft, your text on top of theirs after a conflict)
    const key = header ? `${header.dataset.loaded}|${header.dataset.dirty || ""}` : null;
    if (header && key !== loaded) {
      const kept = header.dataset.form === "kept" && header.dataset.clip === seenClip;
      loaded = key;
      if (kept) {
        // the answer did not touch the form: what was typed since the request left stays, and stays unsaved
        dirty = header.dataset.dirty === "1" || (dirty && edits > sentAt);
      } else {
        dirty = header.dataset.dirty === "1";
        window.cwPicker?.resetAll("review");  // no list or typed text of the old form stays on show
      }
    }
    const clip = header ? header.dataset.clip : null;
    if (clip && clip !== seenClip) {
      seenClip = clip;
      showClip();
      requestAnimationFrame(showClip);  // again once the tab and the player are laid out
      // a new clip on screen (not one the URL already names, as after Back): a new history entry
      if (clip !== q.get("clip")) { history.pushState({clip}, "", urlFor(clip, filter, sort)); return; }
    }
    const want = urlFor(q.get("clip"), filter, sort);
    if (want !== location.pathname + location.search) history.replaceState(history.state, "", want);
  };
  // A caption conflict: each text's box opens at its first difference (a marker the server puts there), one line
  // of context above it; once per box drawn, so a box the person scrolled stays where they put it.
  let diffTries = 0;  // frames waited for a box to be laid out (then the next DOM change tries again)
  const toFirstDiff = (frame) => {
    diffTries = frame === undefined ? 0 : diffTries + 1;
    let waiting = false;
    for (const box of document.querySelectorAll("#conflict-view .cw-diff:not([data-opened])")) {
      const mark = box.querySelector(".cw-first-diff");
      if (!mark) { box.dataset.opened = "1"; continue; }
      if (!box.clientHeight) { waiting = true; continue; }  // not laid out yet (the box is being shown)
      box.dataset.opened = "1";
      const line = parseFloat(getComputedStyle(box).lineHeight) || 16;
      box.scrollTop = Math.max(0, mark.offsetTop - line);
    }
    if (waiting && diffTries < 60) requestAnimationFrame(toFirstDiff);
  };
  // In the observer itself (a microtask after the DOM change, before anything can read the page), not an
  // animation frame later: until that frame the address bar still named the previous clip, and a tab in the
  // background gets no frames at all.
  new MutationObserver(() => { sync(); toFirstDiff(); }).observe(document.documentElement, {
    childList: true, subtree: true, attributes: true, attributeFilter: ["data-clip", "data-loaded", "data-filter",
                                                                     "data-review"]});
  window.addEventListener("popstate", () => {
    const clip = new URLSearchParams(location.search).get("clip");
    if (!clip) { document.getElementById("tab-browse-button")?.click(); return; }
    if ($("#clip-header")?.dataset.clip === clip) {
      document.getElementById("tab-review-button")?.click();
      return;
    }
    const box = $("#nav-target textarea, #nav-target input");
    if (!box) return;
    box.value = clip;
    box.dispatchEvent(new Event("input", {bubbles: true}));
    document.getElementById("tab-review-button")?.click();
    // let Gradio take the new value before the click sends it
    requestAnimationFrame(() => requestAnimationFrame(() => click("btn-nav")));
  });

  // Every way of leaving the clip saves the form first; text typed into a label field and not yet taken is
  // settled before that (taken if it names one option; if not, the click is refused and the field says why).
  document.addEventListener("click", (ev) => {
    const leaving = ev.target.closest &&
      ev.target.closest("#btn-save, #btn-approve, #btn-reject, #btn-next, #btn-prev, #btn-next-unreviewed, " +
                        "#btn-broken, #btn-keep-mine, #btn-edit-merged, #btn-second-approve, #btn-second-reject");
    const scope = leaving && leaving.id.startsWith("btn-second-") ? "second" : "review";
    if (!leaving || !window.cwPicker || window.cwPicker.settleAll(scope)) return;
    ev.preventDefault();
    ev.stopImmediatePropagation();
  }, true);

  // ---- keys -------------------------------------------------------------------------------------------------
  document.addEventListener("keydown", (ev) => {
    if ((ev.ctrlKey || ev.metaKey) && !ev.altKey && (ev.key === "s" || ev.key === "S")) {
      if (click("btn-save")) ev.preventDefault();
      return;
    }
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (typing(ev.target)) {
      if (ev.key === "Escape" && ev.target.blur) {
        ev.target.blur();
        // focus goes back to the page, not to the top of a long tab order: the next key is a shortcut
        document.body.focus?.();
      }
      return;
    }
    let done = false;
    const v = video();
    switch (ev.key) {
      case "j": done = click("btn-next"); break;
      case "k": done = click("btn-prev"); break;
      case "a": done = click("btn-approve") || click("btn-second-approve"); break;
      case "r": done = click("btn-reject") || click("btn-second-reject"); break;
      case "n": done = click("btn-next-unreviewed") || click("btn-second-next"); break;
      case "c": {
        const box = $("#caption-text textarea");
        if (box && visible(box)) { box.focus(); done = true; }
        break;
      }
      case "b": {  // the video is broken: say why, Enter flags it and opens the next clip
        const box = $("#broken-reason textarea, #broken-reason input");
        if (box && visible(box) && reviewShown()) {
          box.scrollIntoView({block: "nearest", behavior: "instant"});
          box.focus({preventScroll: true});
          done = true;
        }
        break;
      }
      case " ":
        if (v && reviewShown() && !(ev.target.closest && ev.target.closest("button, a"))) {
          if (v.paused) v.play().catch(() => {}); else v.pause();
          done = true;
        }
        break;
      case "ArrowLeft": case "ArrowRight":
        if (v && reviewShown()) {
          const step = ev.shiftKey ? 1 : 1 / (parseFloat(v.dataset.fps) || 25);
          seek(v, v.currentTime + (ev.key === "ArrowRight" ? step : -step));
          done = true;
        }
        break;
      case "?": toggleHelp(); done = true; break;
      case "Escape": $("#shortcut-help")?.classList.remove("open"); break;
      case "/": {
        document.getElementById("tab-browse-button")?.click();
        // the Browse tab may only now be rendering: focus the box once it is visible
        let tries = 0;
        const focusSearch = () => {
          const box = document.querySelector("#search textarea, #search input");
          if (box && box.offsetParent !== null) { box.focus(); box.select?.(); }
          else if (tries++ < 20) setTimeout(focusSearch, 25);
        };
        focusSearch();
        done = true;
        break;
      }
      default:
        if (/^[1-9]$/.test(ev.key) && (reviewShown() || secondShown())) done = !!window.cwPicker?.openKey(ev.key);
    }
    if (done) ev.preventDefault();
  });
})();
