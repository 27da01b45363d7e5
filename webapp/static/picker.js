// The label picker (webapp/picker.py): a text field over the label's options, keyboard first.
// Enter takes an option only when the text names exactly one: its number (shown beside it), its name, or a
// start of its name that no other option shares (a start of a later word, `lit` for night_lit, counts only when
// no name starts with the text). Text that fits several options shows them and says so (a second Enter, or an
// arrow key then Enter, takes the highlighted one); text that fits none says so and the value stays.
// The value lives in the component's props (gr.HTML): setting props.value hands it to Gradio at once, so the
// next save or approve sends what the field shows. Each field belongs to a form (data-scope: "review" for Review's,
// "second" for the blind second review's): the same label has a field in each, told apart by its scope. The option list is a child of its field, drawn only while
// the field has focus, and placed inside the viewport: it never scrolls the page and never outlives the field.
(() => {
  if (window.cwPicker) return;
  const pickers = new Map();  // "scope:label name" -> picker

  const norm = (s) => String(s ?? "").trim().toLowerCase().replace(/[\s-]+/g, "_");

  // The options `typed` stands for, and why: {kind: empty|number|exact|prefix|word|none, options}.
  const candidates = (options, typed) => {
    const t = norm(typed);
    if (!t) return {kind: "empty", options: []};
    if (/^\d+$/.test(t)) {
      const n = Number(t);
      const ok = String(n) === t && n >= 1 && n <= options.length;
      return ok ? {kind: "number", options: [options[n - 1]]} : {kind: "none", options: []};
    }
    if (options.includes(t)) return {kind: "exact", options: [t]};
    const prefix = options.filter((o) => o.startsWith(t));
    if (prefix.length) return {kind: "prefix", options: prefix};
    const later = (o) => o.split("_").some((_, i, words) => i > 0 && words.slice(i).join("_").startsWith(t));
    const word = options.filter(later);
    return word.length ? {kind: "word", options: word} : {kind: "none", options: []};
  };
  // The shortest start of `option`'s name that takes it (underlined in the list).
  const shortest = (options, option) => {
    for (let k = 1; k < option.length; k++) {
      const c = candidates(options, option.slice(0, k));
      if (c.options.length === 1 && c.options[0] === option) return option.slice(0, k);
    }
    return option;
  };

  const el = (tag, attrs = {}, text = null) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== null) e.textContent = text;
    return e;
  };
  const list = (names) => (names.length > 6 ? names.slice(0, 6).join(", ") + ", …" : names.join(", "));
  const toPage = () => {
    // the next key is a shortcut again, and focus does not jump to the top of a long tab order
    if (document.activeElement && document.activeElement !== document.body) document.activeElement.blur();
    document.body.focus?.({preventScroll: true});
  };

  function mount(element, props, watch) {
    const root = element.querySelector(".cw-pick");
    if (!root) return;
    const {name, title, hotkey} = root.dataset;
    const scope = root.dataset.scope || "review";
    const options = root.dataset.options.split(" ");
    const multi = root.dataset.multi === "1";
    root.textContent = "";
    const id = (s) => (scope === "review" ? `pick-${name}-${s}` : `pick-${scope}-${name}-${s}`);

    const label = el("label", {class: "cw-pick-label", for: id("input")});
    label.append(el("kbd", {}, hotkey), " " + title);
    const field = el("div", {class: "cw-pick-field"});
    const chips = multi ? el("span", {class: "cw-pick-chips"}) : null;
    const input = el("input", {
      id: id("input"), type: "text", role: "combobox", "aria-autocomplete": "list", "aria-expanded": "false",
      "aria-controls": id("list"), "aria-describedby": id("msg"), autocomplete: "off", spellcheck: "false",
    });
    const box = el("ul", {id: id("list"), class: "cw-pick-list", role: "listbox", "aria-label": `${title} options`});
    box.hidden = true;
    if (multi) box.setAttribute("aria-multiselectable", "true");
    const items = options.map((o, i) => {
      const li = el("li", {id: id(`opt-${i}`), role: "option", "data-value": o, "aria-selected": "false"});
      const short = shortest(options, o);
      const text = el("span", {class: "cw-pick-name"});
      text.append(el("u", {}, short), o.slice(short.length));
      li.append(el("kbd", {class: "cw-pick-key", title: `type ${i + 1} and Enter`}, String(i + 1)), text);
      return li;
    });
    box.append(...items);
    const msg = el("div", {id: id("msg"), class: "cw-pick-msg", role: "status", "aria-live": "polite"});
    if (chips) field.append(chips);
    field.append(input);
    root.append(label, field, box, msg);

    // typed: the text typed since the field opened (not yet taken); pending: some is left; active: the index of
    // the highlighted option; byUser: an arrow key or the pointer put it there; asked: Enter already said
    // "fits several" for this text; scroll: where the page was before the field had to be scrolled into view
    const state = {typed: "", pending: false, active: -1, byUser: false, asked: false, scroll: null};
    const value = () => (multi ? (Array.isArray(props.value) ? props.value : []) : props.value || null);
    const shownValue = () => (multi ? value().join(", ") || "none" : value() || "empty");

    // A message under a field low on the page (ten road-user chips make it tall; a narrow window wraps them)
    // could fall below the window: the page moves just enough to show it, and goes back when the field is left
    // (as for a field below the fold, `focus`).
    const showMsg = () => {
      if (!msg.textContent || !root.contains(document.activeElement)) return;
      const below = msg.getBoundingClientRect().bottom + 4 - window.innerHeight;
      if (below <= 0) return;
      if (state.scroll === null) state.scroll = window.scrollY;
      window.scrollBy({top: below, behavior: "instant"});
    };
    const say = (text, kind = "info") => {
      msg.textContent = text;
      msg.dataset.kind = text ? kind : "";
      root.classList.toggle("cw-pick-error", !!text && kind === "error");
      showMsg();
      place();  // a list drawn below the field goes below the message, which stays readable
    };
    const render = () => {
      const v = value();
      if (multi) {
        chips.textContent = "";
        for (const o of v) {
          const chip = el("span", {class: "token cw-chip", "data-value": o});
          chip.append(el("span", {}, o), el("button", {type: "button", class: "cw-chip-x", tabindex: "-1",
                                                        "aria-label": `remove ${o}`}, "×"));
          chips.append(chip);
        }
        if (!state.pending) input.value = "";
        input.placeholder = v.length ? "" : "none";
      } else if (!state.pending) {
        input.value = v || "";
      }
      for (const li of items) {
        const on = multi ? v.includes(li.dataset.value) : li.dataset.value === v;
        li.setAttribute("aria-selected", String(on));
      }
      root.classList.toggle("cw-pick-pending", state.pending);
    };
    const changed = () => root.dispatchEvent(new CustomEvent("cw-label-change", {bubbles: true,
                                                                                  detail: {name, scope, value: value()}}));

    // ---- the list ----------------------------------------------------------------------------------------
    const place = () => {
      if (box.hidden) return;
      const r = field.getBoundingClientRect();
      const under = msg.textContent ? Math.max(r.bottom, msg.getBoundingClientRect().bottom) : r.bottom;
      const vw = document.documentElement.clientWidth;
      const vh = window.innerHeight;
      const width = Math.max(r.width, 200);
      box.style.left = `${Math.max(4, Math.min(r.left, vw - width - 4))}px`;
      box.style.width = `${width}px`;
      const natural = box.scrollHeight;  // the whole list's height, whatever its max-height now
      const below = vh - under - 8;
      const above = r.top - 8;
      const down = below >= Math.min(natural, 240) || below >= above;
      box.style.maxHeight = `${Math.max(48, Math.min(natural, down ? below : above))}px`;
      box.style.top = down ? `${under + 2}px` : "";
      box.style.bottom = down ? "" : `${vh - r.top + 2}px`;
      box.classList.toggle("cw-pick-up", !down);
      if (state.active >= 0) keepInList(items[state.active]);
    };
    const keepInList = (li) => {  // scroll the list, never the page (scrollIntoView would scroll both)
      const top = li.offsetTop;
      const bottom = top + li.offsetHeight;
      if (top < box.scrollTop) box.scrollTop = top;
      else if (bottom > box.scrollTop + box.clientHeight) box.scrollTop = bottom - box.clientHeight;
    };
    const highlight = (li, byUser) => {
      for (const x of items) x.classList.toggle("cw-active", x === li);
      state.active = li ? items.indexOf(li) : -1;
      state.byUser = !!li && byUser;
      if (li) {
        input.setAttribute("aria-activedescendant", li.id);
        keepInList(li);
      } else {
        input.removeAttribute("aria-activedescendant");
      }
    };
    const filter = () => {
      const c = candidates(options, state.typed);
      const keep = c.kind === "empty" ? null : new Set(c.options);
      for (const li of items) li.hidden = keep !== null && !keep.has(li.dataset.value);
      place();
      return c;
    };
    const openList = () => {
      box.hidden = false;
      input.setAttribute("aria-expanded", "true");
      root.classList.add("cw-pick-open");
      place();
    };
    const closeList = () => {
      box.hidden = true;
      input.setAttribute("aria-expanded", "false");
      root.classList.remove("cw-pick-open");
    };

    // ---- what the typed text says ------------------------------------------------------------------------
    const typedShown = () => state.typed.trim();
    const noneText = () => {
      const t = typedShown();
      const why = /^\d+$/.test(t)
        ? `No ${title} option has the number ${t} (they are 1-${options.length})`
        : `No ${title} option starts with “${t}”`;
      return `${why}: ${multi ? "nothing was added" : `it stays ${shownValue()}`}.`;
    };
    const severalText = (c) => {
      const act = state.active >= 0 ? options[state.active] : c.options[0];
      return `“${typedShown()}” fits ${c.options.length} ${title} options: ${list(c.options)}. ` +
        `Type more, or press Enter again for ${act} (↑/↓ choose another).`;
    };

    const leave = () => {
      closeList();
      if (root.contains(document.activeElement)) toPage();
      if (state.scroll !== null) {
        window.scrollTo({top: state.scroll, behavior: "instant"});
        state.scroll = null;
      }
    };
    const clearTyped = () => {
      state.typed = "";
      state.pending = false;
      state.asked = false;
    };
    const take = (o, stay) => {
      const before = value();
      clearTyped();
      if (multi && before.includes(o)) {
        // typing a chosen road user again keeps it: a removal is always explicit (Delete, or a click on ×)
        render();
        filter();
        say(`${o} is already chosen: press Delete to remove it.`);
        highlight(items[options.indexOf(o)], true);
        return;
      }
      if (multi) props.value = [...before, o];
      else props.value = o;
      say("");
      render();
      if (o !== before) changed();
      if (stay) {
        filter();
        highlight(items[options.indexOf(o)], false);
      } else {
        leave();
      }
    };
    const remove = (o) => {
      if (!multi || !value().includes(o)) return;
      props.value = value().filter((x) => x !== o);
      clearTyped();
      render();
      filter();
      changed();
      say(`${o} removed.`);
    };
    // Typed text that is left when focus goes elsewhere (a click, Tab, a button): taken if it names exactly one
    // option, else kept on show with the reason, and `false` (the page script then refuses to leave the clip).
    const settle = () => {
      if (!state.pending) return true;
      const c = candidates(options, state.typed);
      if (c.options.length === 1) {
        const o = c.options[0];
        const typed = typedShown();
        const was = multi && value().includes(o);
        take(o, true);
        if (!was) say(`Took ${o} for “${typed}”.`);
        return true;
      }
      render();
      say(c.kind === "none" ? noneText() : `${severalText(c)} Esc cancels.`, "error");
      return false;
    };

    const enter = (stay) => {
      const c = filter();
      if (c.kind === "empty") {
        if (state.byUser && state.active >= 0) return take(options[state.active], stay);
        return leave();  // nothing typed, nothing chosen: the field is done
      }
      if (c.options.length === 1) return take(c.options[0], stay);
      if (c.kind === "none") {
        say(noneText(), "error");
        return undefined;
      }
      const act = state.active >= 0 ? options[state.active] : null;
      if (act && c.options.includes(act) && (state.byUser || state.asked)) return take(act, stay);
      state.asked = true;
      say(severalText(c));
      return undefined;
    };
    const step = (down) => {
      if (box.hidden) openList();
      const shown = items.filter((li) => !li.hidden);
      if (!shown.length) return;
      let i = shown.indexOf(items[state.active]);
      if (down) i = i < 0 ? 0 : Math.min(shown.length - 1, i + 1);
      else i = i < 0 ? shown.length - 1 : Math.max(0, i - 1);
      highlight(shown[i], true);
    };

    const open = () => {
      if (!state.pending) {
        clearTyped();
        render();
      }
      const c = filter();
      openList();
      const current = state.pending ? items.find((li) => !li.hidden) : multi ? null : items[options.indexOf(value())];
      highlight(current || null, false);
      if (c.kind === "none") say(noneText(), "error");
      input.select();
    };
    const focus = () => {
      const r = field.getBoundingClientRect();
      const top = label.getBoundingClientRect().top;
      if (top < 0 || r.bottom > window.innerHeight) {
        // a field below the fold (a small window): show it, and put the page back when the field is left
        if (state.scroll === null) state.scroll = window.scrollY;
        root.scrollIntoView({block: "nearest", behavior: "instant"});
      }
      input.focus({preventScroll: true});
    };

    input.addEventListener("focus", open);
    input.addEventListener("input", () => {
      state.typed = input.value;
      state.pending = norm(input.value) !== "";
      state.asked = false;
      root.classList.toggle("cw-pick-pending", state.pending);
      openList();
      const c = filter();
      highlight(c.kind === "empty" ? null : items.find((li) => !li.hidden) || null, false);
      if (c.kind === "none") say(noneText(), "error");
      else say("");
    });
    input.addEventListener("keydown", (ev) => {
      if (ev.isComposing) return;
      switch (ev.key) {
        case "Enter":
          ev.preventDefault();
          ev.stopPropagation();
          enter(multi && ev.shiftKey);
          break;
        case "Escape":  // cancel: the typed text goes, the value stays
          ev.preventDefault();
          ev.stopPropagation();
          clearTyped();
          say("");
          render();
          leave();
          break;
        case "ArrowDown": case "ArrowUp":
          ev.preventDefault();
          step(ev.key === "ArrowDown");
          break;
        case "Delete": {
          if (!multi) break;
          const c = candidates(options, state.typed);
          const o = c.options.length === 1 ? c.options[0] : state.byUser && state.active >= 0 ? options[state.active] : null;
          if (o && value().includes(o)) {
            ev.preventDefault();
            remove(o);
          }
          break;
        }
        default:
      }
    });
    root.addEventListener("focusout", (ev) => {
      if (ev.relatedTarget && root.contains(ev.relatedTarget)) return;
      settle();
      closeList();
      if (state.scroll !== null) {
        window.scrollTo({top: state.scroll, behavior: "instant"});
        state.scroll = null;
      }
    });
    box.addEventListener("mousedown", (ev) => {
      ev.preventDefault();  // keep the focus in the field
      const li = ev.target.closest && ev.target.closest("li[role=option]");
      if (!li) return;
      const o = li.dataset.value;
      clearTyped();
      if (multi && value().includes(o)) remove(o);
      else take(o, multi);
    });
    box.addEventListener("mousemove", (ev) => {
      // the pointer shows where a click would go; it does not choose for Enter (a list can open under a pointer
      // at rest, and Enter on text several options share still asks first)
      const li = ev.target.closest && ev.target.closest("li[role=option]");
      if (li && items.indexOf(li) !== state.active) highlight(li, false);
    });
    field.addEventListener("mousedown", (ev) => {
      const x = ev.target.closest && ev.target.closest(".cw-chip-x");
      if (x) {
        ev.preventDefault();
        remove(x.parentElement.dataset.value);
        return;
      }
      if (ev.target !== input) {
        ev.preventDefault();
        focus();
      }
    });

    const picker = {
      name, scope, hotkey, root, input, focus, settle, place,
      open: () => !box.hidden,
      value,
      pending: () => state.pending,
      reset: () => {  // a new clip (or version) is shown: nothing typed for the old one is kept
        clearTyped();
        say("");
        render();
        leave();
      },
    };
    pickers.set(`${scope}:${name}`, picker);
    watch("value", () => {  // the server sent a value (a clip opened, a save): it replaces anything typed
      clearTyped();
      say("");
      render();
      if (!box.hidden) filter();
    });
    render();
  }

  const all = (scope = null) => [...pickers.values()].filter((p) => p.root.isConnected && (!scope || p.scope === scope));
  // the page (or a scrolling box around a field) moved: lists follow their fields; a list scrolling itself does not
  window.addEventListener("scroll", (ev) => {
    if (ev.target instanceof Element && ev.target.closest(".cw-pick-list")) return;
    all().forEach((p) => p.open() && p.place());
  }, {capture: true, passive: true});
  window.addEventListener("resize", () => all().forEach((p) => p.open() && p.place()), {passive: true});

  window.cwPicker = {
    mount,
    candidates,
    shortest,
    /** The value of label `name` in form `scope` (what a save sends), or undefined if its field is not on the page. */
    value(name, scope = "review") {
      return all(scope).find((p) => p.name === name)?.value();
    },
    /** Every label's value in form `scope`, by name (what a save would send): for the page's drafts (drafts.js). */
    values(scope = "review") {
      return Object.fromEntries(all(scope).map((p) => [p.name, p.value()]));
    },
    /** Open the picker whose shortcut is `key` ("1"-"7"); false if there is none on show. */
    openKey(key) {
      const p = all().find((x) => x.hotkey === key && x.input.offsetParent !== null);
      if (!p) return false;
      p.focus();
      return true;
    },
    /** Settle the typed text of every picker (of form `scope`; see settle); false, with that field focused, if one
     * names no option. */
    settleAll(scope = null) {
      for (const p of all(scope)) {
        if (!p.settle()) {
          p.focus();
          return false;
        }
      }
      return true;
    },
    /** A new clip (or second review) is shown: close every list (of form `scope`) and drop text typed for the old. */
    resetAll(scope = null) {
      all(scope).forEach((p) => p.reset());
    },
  };
})();
