"""Each setting declared once (data/settings.py): for every field of `Settings`, its flag, its environment variable
and its default are the same setting, generated from the dataclass, and its text is read the same way by each."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from data import settings as settings_mod, users
from data.settings import Settings, env_name, flag

FIELDS = dataclasses.fields(Settings)
DERIVED = {"db": "workbench.db", "clip_root": "clips", "media_dir": "media"}  # empty: under the data dir
ROOT = Path(__file__).resolve().parents[2]


def example(f: dataclasses.Field, tmp_path: Path) -> str:
    """A text for setting `f` that is not its default, as a flag or a variable would carry it."""
    parse, choices = f.metadata["parse"], f.metadata["choices"]
    if choices:
        return next(c for c in choices if c != f.default)
    texts = {
        settings_mod.url_list: "127.0.0.1:8000, http://h:9/",
        settings_mod.replica_urls: "http://n1:8000,http://n2:8001",
        settings_mod.gpu_list: "0, 2",
        settings_mod.name_list: "Proxy.Example,10.0.0.1",
        settings_mod._memory_share: "0.7",  # a share of the GPU's memory, 0.5-0.95
    }
    if parse in texts:
        return texts[parse]
    if isinstance(f.default, bool):
        raise AssertionError(f"no example for the switch {f.name}")
    if isinstance(f.default, (int, float)):
        return str(f.default + 7)
    if f.name in DERIVED or isinstance(f.default, Path):
        return str(tmp_path / f.name)
    return f"{f.name}-example"


def parsed(f: dataclasses.Field, text: str):
    value = f.metadata["parse"](text)
    return value.resolve() if isinstance(value, Path) else value


@pytest.mark.parametrize("f", FIELDS, ids=[f.name for f in FIELDS])
def test_flag_variable_and_default_are_one_setting(f, tmp_path):
    text = example(f, tmp_path)
    want = parsed(f, text)
    assert want != getattr(Settings.load({}, environ={}), f.name)
    # the flag, as every command adds it
    p = argparse.ArgumentParser()
    settings_mod.add_arguments(p, [f.name])
    from_flag = settings_mod.from_args(p.parse_args([flag(f.name), text]))
    # the environment variable
    from_env = Settings.load({}, environ={env_name(f.name): text})
    assert getattr(from_flag, f.name) == getattr(from_env, f.name) == want
    # the flag wins over the variable
    other = Settings.load({f.name: text}, environ={env_name(f.name): _other(f, text, tmp_path)})
    assert getattr(other, f.name) == want
    # the default, with neither; an empty path follows the data dir
    default = getattr(Settings.load({}, environ={}), f.name)
    if f.name in DERIVED:
        assert default == Settings.load({}, environ={}).data_dir / DERIVED[f.name]
    elif f.name == "data_dir":
        assert default == Path(f.default).resolve()
    else:
        assert default == f.default
    # the help every command shows names the variable and the default
    helptext = p.format_help().replace("\n", " ")
    assert env_name(f.name) in " ".join(helptext.split())
    if settings_mod._text(f.default):
        assert f"default {settings_mod._text(f.default)}" in " ".join(helptext.split())


def _other(f, text, tmp_path):
    choices = f.metadata["choices"]
    if choices:  # another word than `text`; for a two-word setting (off/on) that is the default
        others = [c for c in choices if c != text]
        return next((c for c in others if c != f.default), others[0])
    if f.metadata["parse"] is settings_mod._memory_share:
        return "0.6"
    if isinstance(f.default, (int, float)) and not isinstance(f.default, bool):
        return str(f.default + 11)
    return example(f, tmp_path / "other")


def test_every_setting_written_as_its_variable_reads_back_the_same(tmp_path):
    s = Settings.load({f.name: example(f, tmp_path) for f in FIELDS}, environ={})
    assert Settings.load({}, environ=s.as_env()) == s
    d = Settings.load({}, environ={})
    assert Settings.load({}, environ=d.as_env()) == d


def test_list_settings_are_tuples_parsed_once_with_a_message_for_a_bad_item():
    s = Settings.load({"worker_urls": "http://n1:8000, http://n1:8000/", "gpus": "1 3", "allowed_hosts": "A,b"}, {})
    assert (s.worker_urls, s.gpus, s.allowed_hosts) == (("http://n1:8000",), (1, 3), ("a", "b"))
    with pytest.raises(ValueError, match=r"--worker-urls \(CW_WORKER_URLS\): not a replica URL: http://n1:8000/v1"):
        Settings.load({"worker_urls": "http://n1:8000/v1"}, environ={})
    with pytest.raises(ValueError, match="--gpus .*not a GPU index: 'x'"):
        Settings.load({}, environ={"CW_GPUS": "0,x"})
    with pytest.raises(ValueError, match=r"--port \(CW_PORT\): not a whole number: 'eighty'"):
        Settings.load({"port": "eighty"}, environ={})
    # replace reads its values as the flags would: no string where a tuple belongs
    assert s.replace(allowed_media_domains="X.example, y").allowed_media_domains == ("x.example", "y")
    with pytest.raises(ValueError, match="--role must be all, node or head, not 'nodes'"):
        s.replace(role="nodes")


def test_removed_settings_are_unknown():
    for name in ("fleet", "extra"):
        with pytest.raises(ValueError, match=f"unknown settings: {name}"):
            Settings.load({name: "x"}, environ={})


def test_the_settings_command_writes_what_a_shell_evals(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "data.settings", "env", "--data-dir", str(tmp_path), "--port", "7870"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "CW_ROLE": "head"},
    )
    assert r.returncode == 0, r.stderr
    env = dict(shlex.split(line)[1].split("=", 1) for line in r.stdout.splitlines())
    assert set(env) == {env_name(f.name) for f in FIELDS}
    s = Settings.load({}, environ=env)
    assert (s.data_dir, s.port, s.role, s.db) == (tmp_path.resolve(), 7870, "head", tmp_path.resolve() / "workbench.db")
    r = subprocess.run(
        [sys.executable, "-m", "data.settings", "env", "--prog", "./launch.sh", "--fleet-mode", "http://h:1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 2 and r.stderr.startswith("./launch.sh: --fleet-mode must be") and "--fleet-urls" in r.stderr


def test_setting_flags_work_after_the_subcommand_of_every_cli(tmp_path, capsys, monkeypatch):
    """`--data-dir D` after the subcommand (as the README writes it) reaches the same data dir as before it, for
    every command line with subcommands; before the fix `accounts add bob --data-dir D` was refused (exit 2)."""
    from data import db as dbmod
    from data.library import clip_root, deployment
    from webapp import accounts

    monkeypatch.chdir(tmp_path)  # the default data dir would be ./var: it must stay unmade
    for name in ("CW_DATA_DIR", "CW_DB"):
        monkeypatch.delenv(name, raising=False)
    pw = tmp_path / "pw"
    pw.write_text("a fine password\n")
    after, before = tmp_path / "after", tmp_path / "before"
    assert accounts.main(["add", "bob", "--role", "lead", "--password-file", str(pw), "--data-dir", str(after)]) == 0
    assert accounts.main(["--data-dir", str(before), "add", "ann", "--password-file", str(pw)]) == 0
    for d, name in ((after, "bob"), (before, "ann")):
        db = dbmod.connect(d / "workbench.db")
        assert [u["name"] for u in users.list_users(db)] == [name]
        db.close()
    capsys.readouterr()
    assert accounts.main(["list", "--data-dir", str(after)]) == 0
    assert capsys.readouterr().out == "bob\tlead\n"
    assert clip_root.main(["show", "--data-dir", str(after)]) == 0
    assert deployment.main(["show", "--data-dir", str(after)]) == 0
    assert not (tmp_path / "var").exists()  # nothing fell back to the default data dir
    # a flag before the subcommand is not overwritten by the subcommand's own (absent) copy
    assert accounts.main(["--data-dir", str(after), "list"]) == 0
    assert capsys.readouterr().out.endswith("bob\tlead\n")
