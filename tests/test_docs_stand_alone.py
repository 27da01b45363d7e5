"""The repository's docs stand alone and are true where a machine can tell: no tracked file cites a path outside
the repository (a clone has none of them), and the README's Documentation table lists every page in docs/ and
nothing that is not there."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# paths of the machine the project was first built on: the folder beside the checkout, the sandbox's root
OUTSIDE = re.compile(r"(?<![\w-])(?:" + "shared" + r"/|/" + "work" + r"/)")
# the run reports of 2026-11-30 to 2026-12-04 keep their wording; docs/GPU.md says once where those files live now
HISTORIC = "docs/gpu-runs/"
SAID_ONCE = {"docs/GPU.md": 1}


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def test_no_tracked_file_cites_a_path_outside_the_repository():
    files = _tracked()
    assert "serving/gpu_bundle/build_bundle.sh" in files  # the subject is there: what the docs used to cite
    found: dict[str, list[str]] = {}
    for path in files:
        if path.startswith(HISTORIC) or not (ROOT / path).is_file():
            continue
        data = (ROOT / path).read_bytes()
        if b"\0" in data:
            continue  # binary: a screenshot, a plot
        text = data.decode("utf-8", "replace")
        hits = [f"{path}:{text.count(chr(10), 0, m.start()) + 1}" for m in OUTSIDE.finditer(text)]
        if len(hits) > SAID_ONCE.get(path, 0):
            found[path] = hits
    assert not found, f"paths outside the repository cited (copy what is needed into it): {found}"


def test_the_pattern_finds_what_a_clone_lacks():
    """The check above would see each way such a path was written before (serving/flops.py, bench_grammar.py)."""
    folder = "sha" + "red/"  # spelt in two: this file must pass its own check
    for cited in (f"({folder}gpu/README.md)", f"../{folder}gpu/make_dummy_qwen3vl.py", "/" + "work/main/x"):
        assert OUTSIDE.search(cited), cited
    for ours in ("tests/support/", "a shared-nothing/design", "the shared text", "serving/gpu_bundle/"):
        assert not OUTSIDE.search(ours), ours


def _documentation_rows() -> list[str]:
    """The paths the README's Documentation table lists: each backticked path of a row's first cell."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Documentation\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [path for line in rows for path in re.findall(r"`([^`]+)`", line.split("|")[1])]


def test_the_readme_documentation_table_lists_every_page_in_docs_and_only_what_is_there():
    listed = _documentation_rows()
    assert len(listed) >= 10, listed
    missing = [p for p in listed if not (ROOT / p.rstrip("/")).exists()]
    assert not missing, f"the README's Documentation table lists what is not there: {missing}"
    pages = sorted({p.split("/")[1] for p in _tracked() if p.startswith("docs/")})
    named = {p.removeprefix("docs/").rstrip("/") for p in listed if p.startswith("docs/")}
    unlisted = [f"docs/{p}" for p in pages if p not in named]
    assert not unlisted, f"in docs/ but not in the README's Documentation table: {unlisted}"
