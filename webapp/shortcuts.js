// Keyboard shortcuts of the review view. Clicks the buttons by elem_id, so a shortcut does exactly what the
// button does (same handler, same role checks). Keys typed into inputs, textareas, selects and editable
// elements are left alone, except ctrl+s (save), which is what you want while editing the caption.
(() => {
  if (window.__cwShortcuts) return;
  window.__cwShortcuts = true;
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
    if (visible(btn)) { btn.click(); return true; }
    return false;
  };
  const toggleHelp = () => {
    const help = document.getElementById("shortcut-help");
    if (help) help.classList.toggle("open");
  };
  document.addEventListener("keydown", (ev) => {
    if ((ev.ctrlKey || ev.metaKey) && !ev.altKey && (ev.key === "s" || ev.key === "S")) {
      if (click("btn-save")) ev.preventDefault();
      return;
    }
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (typing(ev.target)) {
      if (ev.key === "Escape" && ev.target.blur) ev.target.blur();
      return;
    }
    let done = false;
    switch (ev.key) {
      case "j": case "ArrowRight": done = click("btn-next"); break;
      case "k": case "ArrowLeft": done = click("btn-prev"); break;
      case "a": done = click("btn-approve"); break;
      case "r": done = click("btn-reject"); break;
      case "?": toggleHelp(); done = true; break;
      case "Escape": document.getElementById("shortcut-help")?.classList.remove("open"); break;
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
    }
    if (done) ev.preventDefault();
  });
})();
