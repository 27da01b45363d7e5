"""launch.sh roles, through --dry-run (nothing started): a GPU node runs only replicas, bound where the head
reaches them, fetching clips only over http(s) from the allowed domain; a head runs the router over the worker
list, the runner under its supervisor, and the app, and refuses a loopback-only app (the nodes could not fetch)."""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
from pathlib import Path

from data.settings import Settings, env_name, flag

ROOT = Path(__file__).resolve().parents[1]


def launch(tmp_path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = env if env is not None else {k: v for k, v in os.environ.items() if not k.startswith("CW_")}
    return subprocess.run(
        [str(ROOT / "launch.sh"), *args, "--dry-run", "--no-install", "--data-dir", str(tmp_path / "var")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


def commands(out: str) -> list[list[str]]:
    return [shlex.split(ln[2:].split(" > ")[0]) for ln in out.splitlines() if ln.startswith("+ ")]


def test_node_role_runs_only_replicas_fetching_over_http(tmp_path):
    r = launch(
        tmp_path,
        "--role",
        "node",
        "--fleet-mode",
        "sim",
        "--replica-host",
        "127.0.0.2",
        "--media-url-base",
        "http://10.9.8.7:7860",
    )
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    assert len(cmds) == 1 and cmds[0][cmds[0].index("-m") + 1] == "serving.simfleet", r.stdout
    c = cmds[0]
    assert c[c.index("--host") + 1] == "127.0.0.2"
    assert c[c.index("--allowed-media-domains") + 1] == "10.9.8.7"
    local = Path(c[c.index("--allowed-local-media-path") + 1])
    assert local.name == "no-local-media" and not any(local.iterdir())  # file:// reaches nothing
    assert "worker URLs for the head (--worker-urls): http://127.0.0.2:8000," in r.stdout
    for absent in ("serving.runner", "webapp", "vllm-router", "data.ingest"):
        assert absent not in r.stdout


def test_head_role_runs_router_over_workers_supervised_runner_and_app(tmp_path):
    workers = "http://10.0.0.5:8000,http://10.0.0.6:8000"
    r = launch(tmp_path, "--role", "head", "--host", "10.0.0.1", "--port", "7870", "--worker-urls", workers)
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    router = [c for c in cmds if "--worker-urls" in c][0]
    assert router[router.index("--worker-urls") + 1 : router.index("--policy")] == workers.split(",")
    runner = [c for c in cmds if "serving.runner" in c][0]
    assert runner[runner.index("-m") + 1] == "serving.supervisor"  # restarted if it dies
    assert "serving.simfleet" not in r.stdout and " serve " not in r.stdout  # no replicas on the head
    app = [c for c in cmds if "webapp" in c][0]
    assert app[app.index("--host") + 1] == "10.0.0.1"


def test_head_refuses_an_app_the_nodes_cannot_reach(tmp_path):
    r = launch(tmp_path, "--role", "head", "--worker-urls", "http://10.0.0.5:8000")
    assert r.returncode != 0 and "GPU nodes cannot reach" in r.stderr + r.stdout
    r = launch(tmp_path, "--role", "head")
    assert r.returncode != 0 and "--worker-urls" in r.stderr + r.stdout
    r = launch(tmp_path, "--role", "bogus")
    assert r.returncode == 2 and "--role must be all, node or head" in r.stderr


def _args_after(cmd: list[str], flag: str) -> str | None:
    return cmd[cmd.index(flag) + 1] if flag in cmd else None


def test_fleet_mode_and_fleet_urls_reach_the_runner_and_the_app_each_with_one_meaning(tmp_path):
    r = launch(tmp_path, "--fleet-mode", "sim", "--replicas", "2")
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    assert any("serving.simfleet" in c for c in cmds)
    runner = [c for c in cmds if "serving.runner" in c][0]
    app = [c for c in cmds if "webapp" in c][0]
    url = _args_after(runner, "--fleet-urls")
    assert url and url.startswith("http://127.0.0.1:") and "--fleet" not in runner  # URLs only, no mode word
    assert _args_after(app, "--fleet-urls") == url and _args_after(app, "--fleet-mode") == "sim"  # banner at once
    # a fleet that is already running: nothing is started for it, both get its URL, the app no mode
    r = launch(tmp_path, "--fleet-urls", "http://10.0.0.9:30000")
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    assert not any("serving.simfleet" in c or "vllm-router" in c for c in cmds)
    app = [c for c in cmds if "webapp" in c][0]
    runner = [c for c in cmds if "serving.runner" in c][0]
    assert _args_after(runner, "--fleet-urls") == _args_after(app, "--fleet-urls") == "http://10.0.0.9:30000"
    assert "--fleet-mode" not in app
    r = launch(tmp_path, "--fleet-mode", "http://10.0.0.9:30000")
    assert r.returncode == 2 and "--fleet-urls" in r.stderr


def test_the_old_fleet_flag_is_refused(tmp_path):
    r = launch(tmp_path, "--fleet", "sim")
    assert r.returncode == 2 and "unrecognized arguments: --fleet sim" in r.stderr and not commands(r.stdout)


def test_help_lists_every_setting_with_its_variable_and_default():
    r = subprocess.run([str(ROOT / "launch.sh"), "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    for f in dataclasses.fields(Settings):
        assert flag(f.name) in r.stdout and env_name(f.name) in r.stdout, f.name
    for port in ("--fleet-port", "--router-port", "--router-prometheus-port", "--port"):
        assert port in r.stdout


def test_the_fleet_router_and_metrics_ports_reach_the_commands(tmp_path):
    r = launch(tmp_path, "--fleet-mode", "sim", "--replicas", "2", "--fleet-port", "9100", "--router-port=31234")
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    sim = [c for c in cmds if "serving.simfleet" in c][0]
    router = [c for c in cmds if "--worker-urls" in c][0]
    gate = [c for c in cmds if "serving.router_gate" in c][0]
    assert _args_after(sim, "--port") == "9100"
    assert _args_after(gate, "--port") == "31234" and _args_after(router, "--prometheus-port") == "29000"
    assert _args_after(gate, "--upstream") == f"http://{_args_after(router, '--host')}:{_args_after(router, '--port')}"
    assert router[router.index("--worker-urls") + 1 : router.index("--policy")] == [
        "http://127.0.0.1:9100",
        "http://127.0.0.1:9101",
    ]
    runner = [c for c in cmds if "serving.runner" in c][0]
    assert _args_after(runner, "--fleet-urls") == "http://127.0.0.1:31234"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CW_")}
    r = launch(tmp_path, "--fleet-mode", "sim", env={**env, "CW_ROUTER_PROMETHEUS_PORT": "29123"})
    router = [c for c in commands(r.stdout) if "--prometheus-port" in c][0]
    assert _args_after(router, "--prometheus-port") == "29123"  # the variable, as for every setting


def test_the_scripts_own_options_take_both_spellings(tmp_path):
    for args in (("--vllm-arg", "--load-format=dummy"), ("--vllm-arg=--load-format=dummy",)):
        r = launch(tmp_path, "--fleet-mode", "gpu", "--gpus", "0", *args)
        assert r.returncode == 0, r.stderr
        replica = [c for c in commands(r.stdout) if "serve" in c][0]
        assert "--load-format=dummy" in replica


def test_a_node_takes_every_replica_option_the_single_machine_takes(tmp_path):
    """Issue 23: `./launch.sh --role node` dropped --vllm-arg. Both spellings reach the replica's command, as do
    --gpus, and --replicas for a simulated node; the key comes from the node's key file, never a flag."""
    node = ("--role", "node", "--replica-host", "127.0.0.2", "--media-url-base", "http://10.9.8.7:7860")
    for args in (("--vllm-arg", "--load-format=dummy"), ("--vllm-arg=--load-format=dummy",)):
        r = launch(tmp_path, *node, "--fleet-mode", "gpu", "--gpus", "0,1", *args, "--vllm-arg=--quantization=fp8")
        assert r.returncode == 0, r.stderr
        replicas = [c for c in commands(r.stdout) if "serve" in c]
        assert len(replicas) == 2, r.stdout
        for c in replicas:
            assert "--load-format=dummy" in c and "--quantization=fp8" in c
            assert c[c.index("--host") + 1] == "127.0.0.2" and "--api-key" not in c
        assert 'VLLM_API_KEY="$(cat ' in r.stdout and "no fleet key yet" in r.stdout  # the node has none yet
    r = launch(tmp_path, *node, "--fleet-mode", "sim", "--replicas", "3")
    assert r.returncode == 0, r.stderr
    sim = [c for c in commands(r.stdout) if "serving.simfleet" in c][0]
    assert _args_after(sim, "--replicas") == "3"


def test_a_library_launched_as_a_head_stays_a_head(tmp_path):
    """Issue 23: the head's record gives the role to a plain `./launch.sh`, and a flag that contradicts it is
    refused before anything runs, with the command that changes the record."""
    from data import db as dbmod
    from data.library import deployment

    s = Settings.load({"data_dir": str(tmp_path / "var")}, environ={})
    db = dbmod.connect(s.db)
    try:
        deployment.record_head(db, s.replace(role="head", media_url_base="http://10.0.0.1:7860"))
    finally:
        db.close()
    r = launch(tmp_path, "--worker-urls", "http://10.0.0.5:8000")  # no --role: the record says head
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    assert any("serving.router_gate" in c for c in cmds) and not any("serving.simfleet" in c for c in cmds)
    r = launch(tmp_path, "--worker-urls", "http://10.0.0.5:8000", "--media-url-base", "http://10.0.0.2:7860")
    assert r.returncode == 2 and "python -m data.deployment set --role head" in r.stderr, r.stderr
    assert not commands(r.stdout)


def test_launch_sh_dry_run_shows_each_gpu_replicas_thread_budget(tmp_path):
    r = launch(tmp_path, "--fleet-mode", "gpu", "--gpus", "0,1", "--replica-threads", "2", "--pin-replicas", "on")
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stdout.splitlines() if ln.startswith("# replica-")]
    assert len(notes) == 2 and all("2 thread(s) per pool" in n and "pinned to cores" in n for n in notes), r.stdout
    replicas = [ln for ln in r.stdout.splitlines() if ln.startswith("+ ") and " serve " in ln]
    assert len(replicas) == 2
    for ln in replicas:
        assert "OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2" in ln and "setsid taskset -c " in ln
