"""docs/ARCHITECTURE.md against the code: every module, name and file the page names exists, and the invariants
that a test can check hold (the rest are proven where docs/RELIABILITY.md says). Invariant 3 is read from the
page itself: the modules of webapp/ it names as the app's only fleet readers are the ones the code has."""

from __future__ import annotations

import ast
import glob
import importlib
import re
import sqlite3
from pathlib import Path

import pytest

from data import captions, jobs
from data.job_params import JobParams
from data.jobs import queries as job_queries
from data.jobs.selection import Selection

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = ("data", "serving", "webapp")
# the public reads of serving.fleet.reader.FleetReader (`get` is left out of the name check: dicts have one too)
READS = ("watch", "look", "scrape", "fleet_status", "router_status", "router_workers", "discover")
# libraries that make HTTP requests: the app's fleet reads go through serving.fleet.reader, never one of these
HTTP_CLIENTS = ("httpx", "requests", "urllib.request", "http.client", "aiohttp", "urllib3")
# the runner's side of the fleet: sending work and reading answers
SENDERS = (
    "serving.client",
    "serving.bounded",
    "serving.answer_check",
    "serving.runner.loop",
    "serving.runner.start",
    "serving.runner.store",
)


def _page() -> str:
    return PAGE.read_text()


def _invariant(n: int) -> str:
    """The text of invariant `n` of the page's numbered list."""
    section = _page().split("\n## Invariants\n", 1)[1].split("\n## ", 1)[0]
    m = re.search(rf"^{n}\. (.*?)(?=^\d+\. |\Z)", section, re.S | re.M)
    assert m, f"docs/ARCHITECTURE.md has no invariant {n}"
    return m.group(1)


def _resolves(dotted: str) -> bool:
    """A module, or a name inside one (a class, a function, a method), importable from the tree."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_every_module_name_and_file_the_page_names_exists():
    cited = set(re.findall(r"`([^`\s]+)`", _page()))
    dotted = sorted(c for c in cited if re.fullmatch(r"(data|serving|webapp)(\.\w+)+", c))
    paths = sorted(c for c in cited if "/" in c and re.fullmatch(r"[\w./*-]+", c) and not c.startswith("/"))
    assert len(dotted) > 20 and len(paths) > 5, (dotted, paths)  # the page is read, not skipped
    missing = [c for c in dotted if not _resolves(c)]
    missing += [c for c in paths if not glob.glob(str(ROOT / c.rstrip("/")))]
    assert not missing, f"docs/ARCHITECTURE.md names what the code does not have: {missing}"


def _webapp() -> dict[str, ast.Module]:
    return {
        ".".join(p.relative_to(ROOT).with_suffix("").parts): ast.parse(p.read_text())
        for p in sorted((ROOT / "webapp").rglob("*.py"))
    }


def _imports(tree: ast.Module) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def _touches_reader(tree: ast.Module) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == "FleetReader")
        or (isinstance(n, ast.Attribute) and n.attr == "fleet_reader")
        for n in ast.walk(tree)
    )


def _read_calls(tree: ast.Module) -> list[int]:
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in READS
    ]


def test_invariant_3_the_app_reads_the_fleet_only_where_the_page_says_and_never_sends_it_work():
    text = _invariant(3)
    named = set(re.findall(r"`(webapp(?:\.\w+)+)`", text))
    modules = _webapp()
    touching = {m for m, tree in modules.items() if _touches_reader(tree)}
    assert touching, "no module of webapp/ holds the fleet reader: the check reads nothing"
    assert touching == named, (
        f"modules of webapp/ that hold or use the fleet reader: {sorted(touching)}; invariant 3 of "
        f"docs/ARCHITECTURE.md names {sorted(named)}: say there what the app reads and why, or read through one of them"
    )
    stray = {m: lines for m, tree in modules.items() if (lines := _read_calls(tree)) and m not in named}
    assert not stray, f"fleet reads outside the modules invariant 3 names: {stray}"
    for m, tree in modules.items():
        bad = sorted(i for i in _imports(tree) if i.startswith(HTTP_CLIENTS) or i.startswith(SENDERS))
        assert not bad, f"{m} imports {bad}: the app never talks to the fleet but through serving.fleet.reader"
    assert "`serving.fleet.reader.FleetReader`" in text


def test_the_invariant_3_check_sees_a_read_made_elsewhere():
    """A Review handler asking the fleet would be caught (the check above, on a tree made for it)."""
    tree = ast.parse("def save(self):\n    return self.ctx.fleet_reader.look(self.ctx.fleet_urls)\n")
    assert _touches_reader(tree) and _read_calls(tree) == [2]
    assert not _touches_reader(ast.parse("def f(d):\n    return d.get('fleet')\n"))
    assert "httpx" in _imports(ast.parse("def f():\n    import httpx\n"))


def test_invariant_1_a_caption_version_is_never_changed_or_deleted(db):
    assert "trigger" in _invariant(1)
    cid = db.execute("INSERT INTO clips (path) VALUES ('x.mp4')").lastrowid
    db.conn.commit()
    m, _ = captions.add_machine(db, cid, job_id=None, text="machine", labels=None, provenance={"model": "m"})
    for sql in ("UPDATE captions SET text = 'changed' WHERE id = ?", "DELETE FROM captions WHERE id = ?"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute(sql, [m["id"]])
    assert captions.get(db, m["id"])["text"] == "machine"


def test_invariant_2_every_transaction_the_product_opens_itself_is_immediate():
    """`BEGIN` alone (deferred) takes the write lock only at the first write, and a read-modify-write that waits
    for it then fails instead of queueing; the one exception is a read-only snapshot that always rolls back."""
    assert "BEGIN IMMEDIATE" in _invariant(2)
    readonly = {("data/release/make.py", "_snapshot")}  # a read snapshot: BEGIN ... ROLLBACK, writes nothing
    found = set()
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
                for s in ast.walk(fn):
                    if isinstance(s, ast.Constant) and isinstance(s.value, str):
                        begin = re.fullmatch(r"\s*BEGIN(?:\s+(\w+))?(?:\s+TRANSACTION)?\s*;?\s*", s.value, re.I)
                        if begin and (begin.group(1) or "").upper() != "IMMEDIATE":
                            found.add((str(path.relative_to(ROOT)), fn.name))
    assert found == readonly, found - readonly


def test_invariant_5_a_runner_takes_only_its_fleets_jobs(db):
    assert "jobs.fleet" in _invariant(5)
    ids = [db.execute("INSERT INTO clips (path) VALUES (?)", [f"c{i}.mp4"]).lastrowid for i in range(3)]
    db.conn.commit()
    mine, theirs = jobs.fleet_of("http://127.0.0.1:30000"), jobs.fleet_of("http://127.0.0.2:30000")
    made = {
        fleet: jobs.create(
            db,
            name=str(fleet),
            created_by="lead",
            selection=Selection.of_clips(ids),
            prompt_id=None,
            params=JobParams(),
            fleet=fleet,
        )
        for fleet in (mine, theirs, None)
    }
    taken = {j["id"] for j in job_queries.runnable(db, mine)}
    assert taken == {made[mine], made[None]}  # a job made before jobs recorded a fleet is anyone's
    assert {j["id"] for j in job_queries.runnable(db, theirs)} == {made[theirs], made[None]}
