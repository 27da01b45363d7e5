// The review view's keyboard, player and URL glue (issue 10). Shortcuts click the buttons by elem_id, so a key
// does exactly what the button does (same handler, same role checks, same autosave). Keys typed into inputs,
// textareas, selects and editable elements are left alone, except ctrl+s (save) and Esc (leave the field).
// The URL carries the filter and the clip (?f=...&clip=ID): opening a clip pushes a history entry, so the
// browser's Back and Forward move between clips (through the server's goto, which saves an edit first) and a
// link opens the same view. Leaving the page with an unsaved edit asks first (beforeunload).
// No timers: everything here runs on an event (a key, a click, a DOM change, a history step).
(() => {
  if (window.__cwShortcuts) return;
  window.__cwShortcuts = true;
  const LABELS = ["scenario_category", "hazard_level", "road_users", "ego_maneuver", "weather", "lighting",
                  "road_type"];
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

  // ---- unsaved edits ------------------------------------------------------------------------------------
  let dirty = false;
  let loaded = null;
  const markDirty = (ev) => {
    if (ev.target.closest && ev.target.closest("#caption-text, .cw-labels")) dirty = true;
  };
  document.addEventListener("input", markDirty, true);
  document.addEventListener("mousedown", (ev) => {
    if (ev.target.closest && ev.target.closest(".cw-labels li, .cw-labels .token-remove, .cw-labels .remove-all"))
      dirty = true;
  }, true);
  window.cwUnsaved = () => dirty;  // for the browser tests and anyone curious
  window.addEventListener("beforeunload", (ev) => {
    if (!dirty) return undefined;
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
  const sync = () => {
    const header = $("#clip-header");
    const state = $("#browse-state");
    const q = new URLSearchParams(location.search);
    const filter = state ? state.dataset.filter : q.get("f");
    const sort = state ? state.dataset.sort : q.get("sort");
    if (header && header.dataset.loaded !== loaded) {
      loaded = header.dataset.loaded;
      dirty = false;  // the form was just (re)filled from, or saved to, the server
    }
    const clip = header ? header.dataset.clip : null;
    if (clip && clip !== seenClip) {
      seenClip = clip;
      // a new clip on screen (not one the URL already names, as after Back): a new history entry
      if (clip !== q.get("clip")) { history.pushState({clip}, "", urlFor(clip, filter, sort)); return; }
    }
    const want = urlFor(q.get("clip"), filter, sort);
    if (want !== location.pathname + location.search) history.replaceState(history.state, "", want);
  };
  let pending = false;
  new MutationObserver(() => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; sync(); });
  }).observe(document.documentElement, {childList: true, subtree: true, attributes: true,
                                         attributeFilter: ["data-clip", "data-loaded", "data-filter"]});
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

  // Gradio's multiselect removes a value when its name is typed again and Enter pressed (issue 10: a label
  // silently vanished). Typing a value already chosen keeps it: the typed text is just cleared.
  document.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter" || !ev.target || ev.target.tagName !== "INPUT") return;
    const field = ev.target.closest(".cw-labels [id^='label-']");
    const typed = ev.target.value.trim().toLowerCase();
    if (!field || !typed) return;
    const chosen = [...field.querySelectorAll(".token")].map((t) => t.textContent.trim().toLowerCase());
    if (!chosen.includes(typed)) return;
    ev.preventDefault();
    ev.stopImmediatePropagation();
    ev.target.value = "";
    ev.target.dispatchEvent(new Event("input", {bubbles: true}));
  }, true);

  // Enter in a single-choice label picks the highlighted option the way a click does, at once. Gradio's own
  // Enter commits later, and an Esc pressed right after it (the 5-key "fix a label" sequence) reverted the
  // pick: the label looked changed but the old value was saved.
  // The highlighted option is taken only if it matches what was typed (Gradio keeps the highlight as an index into
  // the unfiltered choices, so it can name an option that is filtered out or another one). Otherwise Enter picks
  // the best match in the list shown: the same text, then the first starting with it, then one containing it.
  const optionFor = (input) => {
    const typed = input.value.trim().toLowerCase();
    const text = (o) => (o.getAttribute("aria-label") || o.textContent.replace("✓", "")).trim().toLowerCase();
    const id = input.getAttribute("aria-activedescendant");
    const active = id && document.getElementById(id);
    if (active && (!typed || text(active).includes(typed))) return active;
    const list = document.getElementById(input.getAttribute("aria-controls") || "");
    const options = list ? [...list.querySelectorAll("li[role=option]")] : [];
    return options.find((o) => text(o) === typed) || options.find((o) => text(o).startsWith(typed))
      || options.find((o) => text(o).includes(typed)) || null;
  };
  document.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter" || !ev.target || ev.target.tagName !== "INPUT") return;
    const field = ev.target.closest(".cw-labels [id^='label-']");
    if (!field || field.id === "label-road_users") return;
    const option = optionFor(ev.target);
    if (!option) return;
    ev.preventDefault();
    ev.stopImmediatePropagation();
    option.dispatchEvent(new MouseEvent("mousedown", {bubbles: true, cancelable: true}));
  }, true);

  // ---- keys -------------------------------------------------------------------------------------------------
  const focusLabel = (n) => {
    const box = document.querySelector(`#label-${LABELS[n]} input`);
    if (!box || !visible(box)) return false;
    box.focus();
    box.click();
    box.select();  // typing replaces the shown value and filters the list; Enter picks the first match
    return true;
  };
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
      case "a": done = click("btn-approve"); break;
      case "r": done = click("btn-reject"); break;
      case "n": done = click("btn-next-unreviewed"); break;
      case "c": {
        const box = $("#caption-text textarea");
        if (box && visible(box)) { box.focus(); done = true; }
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
        if (/^[1-7]$/.test(ev.key) && reviewShown()) done = focusLabel(parseInt(ev.key, 10) - 1);
    }
    if (done) ev.preventDefault();
  });
})();
