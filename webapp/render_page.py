"""The page around the tabs: its top bar, the keyboard-shortcut help, the page scripts in its head, each tab's
heading, and the sign-in and sign-out pages (webapp.login.auth). Values escaped as in webapp.render."""

from __future__ import annotations

from webapp.render import esc

SHORTCUT_HELP = """
<div id="shortcut-help" class="cw-help" role="dialog" aria-label="Keyboard shortcuts">
<b>Keyboard shortcuts</b> (not while typing in a field, except ctrl+s and Esc)
<table>
<tr><td><kbd>a</kbd> / <kbd>r</kbd></td><td>approve / reject, then the next unreviewed clip</td></tr>
<tr><td><kbd>n</kbd></td><td>next unreviewed clip of the Browse filter (those assigned to you first)</td></tr>
<tr><td><kbd>j</kbd> / <kbd>k</kbd></td><td>next / previous clip</td></tr>
<tr><td><kbd>Space</kbd></td><td>play / pause</td></tr>
<tr><td><kbd>←</kbd> / <kbd>→</kbd></td><td>one frame back / forward</td></tr>
<tr><td><kbd>shift</kbd>+<kbd>←</kbd> / <kbd>→</kbd></td><td>one second back / forward</td></tr>
<tr><td><kbd>c</kbd></td><td>edit the caption (<kbd>Esc</kbd> leaves it)</td></tr>
<tr><td><kbd>b</kbd></td><td>the video is broken: type why, <kbd>Enter</kbd> flags it and opens the next clip</td></tr>
<tr><td><kbd>1</kbd>…<kbd>7</kbd></td><td>fix a label: type its first letters or its number, <kbd>Enter</kbd>
(<kbd>Esc</kbd> cancels; road users: <kbd>shift</kbd>+<kbd>Enter</kbd> adds and stays open,
<kbd>Delete</kbd> removes)</td></tr>
<tr><td><kbd>ctrl</kbd>+<kbd>s</kbd></td><td>save the caption</td></tr>
<tr><td><kbd>/</kbd></td><td>search</td></tr>
<tr><td><kbd>?</kbd></td><td>show / hide this help</td></tr>
<tr><td colspan="2"><b>Second review tab</b> (blind): <kbd>1</kbd>…<kbd>7</kbd> set a label as above,
<kbd>a</kbd> / <kbd>r</kbd> approve / reject, then your next one; <kbd>n</kbd> your next one unanswered</td></tr>
</table>Edits are saved when you move to another clip. An edit not saved yet is kept as a draft (also if your
session ends) and offered back when you return to the clip. The clip you are on is yours: the others'
<kbd>n</kbd> skips it.</div>
"""

LOGOUT_FORM = (
    '<form method="post" action="/logout" class="cw-logout"><button type="submit" id="logout">Sign out</button></form>'
)
LOGOUT_PAGE = (
    '<!doctype html><html><head><meta charset="utf-8"><title>Sign out</title>'
    '<link rel="stylesheet" href="/cw-static/login.css"></head><body><main class="login">'
    f'<h1>Sign out?</h1>{LOGOUT_FORM}<p><a href="/">Back to the workbench</a></p></main></body></html>'
)


def tab_heading(text: str) -> str:
    """A tab's h2, for the page's heading structure: read by screen readers, not drawn (the tab button is)."""
    return f'<h2 class="cw-sr-only">{esc(text)}</h2>'


def scripts(sources: list[str]) -> str:
    """The page's own scripts (webapp/static/*.js, read by the app), each in a script element of the head."""
    return "".join(f"<script>\n{source}\n</script>" for source in sources)


def topbar(name: str, role: str, auth_required: bool) -> str:
    """The title and who is signed in, with the sign-out button (a POST form: a cross-site link cannot sign
    anyone out), or the word that login is off."""
    logout = f" · {LOGOUT_FORM}" if auth_required else " · login is off (local use only)"
    return (
        '<div class="cw-topbar"><h1 class="cw-title">Clip captioning workbench</h1>'
        f'<div class="cw-userline">Signed in as <b id="whoami">{esc(name)}</b> '
        f"({esc(role)}){logout} · press <kbd>?</kbd> for shortcuts</div></div>"
    )


def sign_in(template: str, message: str, next_url: str) -> str:
    """The sign-in page (webapp/static/login.html) with its message and the page to go back to filled in."""
    return template.replace("{{message}}", esc(message)).replace("{{next}}", esc(next_url))
