"""serving/gpu_bundle/, the offline GPU install, checked here where no GPU is: the pins file, the bundle builder
(its pip arguments, and its parts, with pip replaced by a stand-in that writes wheels), the dummy Qwen3-VL-8B model
folder against the shape serving/flops.py prices, and the project's wheel fetcher (its commands, and how a fetched
wheel's own ranges narrow the names after it)."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from serving import flops

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "serving" / "gpu_bundle"
# what the GPU image brings itself (serving/gpu_bundle/README.md): a bundle or a wheel folder carrying another
# version of one of these would shadow the image's CUDA build on PYTHONPATH
IMAGE = {"torch", "torchvision", "transformers", "tokenizers", "numpy", "httpx", "psutil", "pytest", "pillow"}
GPU_PYTHON = "3.12"


def _fetch_wheels():
    spec = importlib.util.spec_from_file_location("fetch_wheels", BUNDLE / "fetch_wheels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for n, line in enumerate((BUNDLE / "gpu-pins.txt").read_text().splitlines(), 1):
        req = Requirement(line)  # raises on a line that is not a requirement
        spec = list(req.specifier)
        assert len(spec) == 1 and spec[0].operator == "==", f"gpu-pins.txt:{n}: {line!r} is not an exact pin"
        name = canonicalize_name(req.name)
        assert name not in pins, f"gpu-pins.txt:{n}: {req.name} pinned twice"
        pins[name] = Version(spec[0].version)
    return pins


def _project_requirements() -> list[Requirement]:
    p = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in p["dependencies"]]


def test_the_pins_are_exact_leave_the_images_torch_alone_and_satisfy_the_project():
    pins = _pins()
    assert len(pins) > 50 and "xgrammar" in pins and "pynvvideocodec" in pins
    # vLLM 0.25.0 pins torch 2.11.0, the GPU image's own CUDA 13 build: the bundle must not bring another
    assert not IMAGE & set(pins), sorted(IMAGE & set(pins))
    builder = (BUNDLE / "build_bundle.sh").read_text()
    assert "pipdl vllm==0.25.0" in builder
    for doc in (BUNDLE / "README.md", ROOT / "docs" / "GPU.md"):
        text = doc.read_text()
        assert "0.25.0" in text and "torch 2.11.0" in text, doc
    # on the node the bundle comes first on PYTHONPATH: its versions are the ones the project runs with there
    mismatched = [
        f"{r.name}: pinned {pins[canonicalize_name(r.name)]}, the project asks {r.specifier}"
        for r in _project_requirements()
        if canonicalize_name(r.name) in pins and pins[canonicalize_name(r.name)] not in r.specifier
    ]
    assert not mismatched, mismatched


FAKE_PIP = """#!{python}
# stands in for `python3 -m pip download ... -d DIR REQUIREMENT` (or `-r FILE`): records its arguments and writes one
# wheel into DIR, holding a module named after the requirement and a header tree the builder must prune
import json, sys, zipfile
from pathlib import Path
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(json.dumps(args) + "\\n")
dest = Path(args[args.index("-d") + 1])
dest.mkdir(parents=True, exist_ok=True)
what = "pins" if "-r" in args else args[-1].split("==")[0]
with zipfile.ZipFile(dest / f"{{what}}-0-py3-none-any.whl", "w") as z:
    z.writestr(f"{{what}}_fake/__init__.py", f"WHAT = {{args[-1]!r}}\\n")
    z.writestr("vllm/third_party/deep_gemm/include/big.h", "/* headers nothing loads */\\n")
    z.writestr("vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so", "another Python's build")
    z.writestr("vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so", "the GPU machine's build")
"""


def test_the_builder_downloads_for_the_gpu_machine_and_its_parts_unpack_to_what_it_fetched(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "pip.jsonl"
    (fake / "python3").write_text(FAKE_PIP.format(python=sys.executable, log=str(log)))
    (fake / "python3").chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run(
        ["bash", str(BUNDLE / "build_bundle.sh"), str(out)], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c[-1] for c in calls] == ["vllm==0.25.0", str(BUNDLE / "gpu-pins.txt")]
    assert calls[1][-2] == "-r"
    platforms = _fetch_wheels().bundle_platforms()
    assert "manylinux2014_x86_64" in platforms and "manylinux_2_28_x86_64" in platforms
    for c in calls:
        assert c[:3] == ["-m", "pip", "download"]
        assert {"--no-deps", "--only-binary=:all:"} <= set(c)
        assert c[c.index("--python-version") + 1] == GPU_PYTHON and c[c.index("--implementation") + 1] == "cp"
        assert [c[i + 1] for i, a in enumerate(c) if a == "--platform"] == platforms
    parts = sorted(out.glob("p*/part*"))
    assert [p.parent.name for p in parts] == ["p0"]  # a few bytes: one part
    whole = b"".join(p.read_bytes() for p in parts)
    assert (out / "bundle.sha256").read_text().strip() == hashlib.sha256(whole).hexdigest()
    with tarfile.open(fileobj=io.BytesIO(whole), mode="r:xz") as tar:
        names = {n.removeprefix("./") for n in tar.getnames()}
        assert tar.extractfile("./vllm_fake/__init__.py").read() == b"WHAT = 'vllm==0.25.0'\n"
    assert "pins_fake/__init__.py" in names
    assert "vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so" in names
    pruned = {
        "vllm/third_party/deep_gemm/include/big.h",
        "vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so",
    }
    assert not pruned & names, pruned & names
    for f in ("gpu_setup.sh", "make_dummy_qwen3vl.py"):  # what the GPU machine runs beside the parts, unchanged
        assert (out / f).read_bytes() == (BUNDLE / f).read_bytes()


def test_the_dummy_model_has_the_shape_of_qwen3_vl_8b_that_flops_prices(tmp_path):
    import tokenizers  # the test extra's (pyproject.toml): the maker builds the tokenizer with it

    run = subprocess.run(
        [sys.executable, str(BUNDLE / "make_dummy_qwen3vl.py"), str(tmp_path / "model")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    model = tmp_path / "model"
    cfg = json.loads((model / "config.json").read_text())
    text, vision = cfg["text_config"], cfg["vision_config"]
    assert cfg["architectures"] == ["Qwen3VLForConditionalGeneration"] and cfg["model_type"] == "qwen3_vl"
    shape = flops.QWEN3_VL_8B
    assert shape == flops.ModelShape(
        name=shape.name,
        layers=text["num_hidden_layers"],
        hidden=text["hidden_size"],
        intermediate=text["intermediate_size"],
        heads=text["num_attention_heads"],
        kv_heads=text["num_key_value_heads"],
        head_dim=text["head_dim"],
        vocab=text["vocab_size"],
        vision_depth=vision["depth"],
        vision_hidden=vision["hidden_size"],
        vision_intermediate=vision["intermediate_size"],
        patch=vision["patch_size"],
        temporal_patch=vision["temporal_patch_size"],
        merge=vision["spatial_merge_size"],
        deepstack=len(vision["deepstack_visual_indexes"]),
        in_channels=vision["in_channels"],
    )
    assert vision["out_hidden_size"] == text["hidden_size"] and not text["tie_word_embeddings"]
    # the tokenizer: the special tokens where the config says they are, a vocabulary that fits the model's
    tok = tokenizers.Tokenizer.from_file(str(model / "tokenizer.json"))
    for key, token in (
        ("video_token_id", "<|video_pad|>"),
        ("image_token_id", "<|image_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"),
        ("vision_end_token_id", "<|vision_end|>"),
    ):
        assert tok.token_to_id(token) == cfg[key], token
    assert tok.token_to_id("<|im_end|>") == text["eos_token_id"]
    assert tok.get_vocab_size() <= text["vocab_size"]
    said = "A car waits at the light, then turns left."
    assert tok.decode(tok.encode(said).ids) == said
    video = json.loads((model / "video_preprocessor_config.json").read_text())
    assert video["video_processor_type"] == "Qwen3VLVideoProcessor" and video["patch_size"] == shape.patch
    assert "<|video_pad|>" in (model / "chat_template.jinja").read_text()


def _dry_run(out: Path, *extra: str) -> list[list[str]]:
    run = subprocess.run(
        [sys.executable, str(BUNDLE / "fetch_wheels.py"), "--dry-run", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return [shlex.split(line) for line in run.stdout.splitlines()]


def test_the_wheel_fetcher_asks_pip_for_each_wheel_for_the_gpu_machine_within_the_projects_ranges(tmp_path):
    fw = _fetch_wheels()
    cmds = _dry_run(tmp_path)
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing
    wanted = {
        ".whl": ["av", "sqlite-utils", "sqlite-fts4", "click-default-group", "tabulate", "pluggy"]
        + ["vllm-router", "orjson", "google-re2", "py-spy"],
        ".whl2": ["gradio", "gradio-client", "pandas", "python-dateutil", "typer", "rich", "pygments"],
    }
    got: dict[str, list[Requirement]] = {".whl": [], ".whl2": []}
    for c in cmds:
        assert c[:4] == ["python3", "-m", "pip", "download"] and {"--no-deps", "--only-binary=:all:"} <= set(c)
        assert c[c.index("--python-version") + 1] == GPU_PYTHON and c[c.index("--implementation") + 1] == "cp"
        assert [c[i + 1] for i, a in enumerate(c) if a == "--platform"] == fw.bundle_platforms()
        dest = Path(c[c.index("-d") + 1])
        assert dest.parent == tmp_path, dest
        got[dest.name].append(Requirement(c[-1]))
    names = {d: [canonicalize_name(r.name) for r in reqs] for d, reqs in got.items()}
    for d, must in wanted.items():
        assert set(must) <= set(names[d]), (d, set(must) - set(names[d]))
    assert names[".whl"][0] == "av" and names[".whl2"][0] == "gradio"
    # nothing the bundle pins or the image has: there, their versions must win
    carried = set(names[".whl"]) | set(names[".whl2"])
    assert not carried & (set(_pins()) | IMAGE), carried & (set(_pins()) | IMAGE)
    # a name the project constrains is asked for within the project's range
    ours = {canonicalize_name(r.name): r.specifier for r in _project_requirements()}
    for reqs in got.values():
        for r in reqs:
            if canonicalize_name(r.name) in ours:
                assert r.specifier == ours[canonicalize_name(r.name)], (r, ours[canonicalize_name(r.name)])
    assert str(next(r for r in got[".whl"] if r.name == "av").specifier) == str(ours["av"]) != ""
    assert [Requirement(c[-1]) for c in _dry_run(tmp_path, "--only", "whl2")] == got[".whl2"]


def _wheel(folder: Path, name: str, requires: list[str]) -> None:
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as z:
        z.writestr(f"{name}-1.0.dist-info/METADATA", meta)


def test_a_fetched_wheels_own_ranges_narrow_the_names_after_it_as_the_gpu_machine_reads_them(tmp_path):
    fw = _fetch_wheels()
    _wheel(
        tmp_path,
        "gradio",
        [
            "gradio-client==2.7.2",
            "audioop-lts<=0.2.2; python_version >= '3.13'",  # not on the GPU machine's 3.12
            "typer<1.0,>=0.12",
            "authlib>=1.3; extra == 'oauth'",  # an extra nobody asks for
            "tzdata>=2022.7; sys_platform == 'win32'",
        ],
    )
    _wheel(tmp_path, "typer", ["rich>=13.8.0", "Shellingham (>=1.3.0)"])
    ranges = fw.wheel_ranges(tmp_path)
    assert ranges == {"gradio-client": "==2.7.2", "typer": "<1.0,>=0.12", "rich": ">=13.8.0", "shellingham": ">=1.3.0"}
    assert fw.requirement("typer", {"typer": ">=0.12"}, ranges) == "typer>=0.12,<1.0"
    assert fw.requirement("pygments", {}, ranges) == "pygments"
