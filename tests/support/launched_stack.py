"""The workbench as `./launch.sh` starts it on a machine without a GPU, for tests of what its users read.

`./launch.sh --detach` on a fresh data dir and free ports: the generated demo library, ingest, the first launch's
own captioning job (serving.demo_job), the simulated fleet behind vllm-router and the router gate with the fleet
key, the runner under its supervisor, and the app with login on. The test users (webapp_fixtures.ROLES, password
PASSWORD) are added with the accounts command line, `--data-dir` after the command, as the README writes it.
`./launch.sh stop` stops it all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from data import db as dbmod
from data.jobs import queries as job_queries
from data.settings import Settings
from serving import procs
from serving.launch import addresses as fleet_addresses
from tests.support.webapp_fixtures import PASSWORD, ROLES

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CW_")}
    bin_dir = str(Path(sys.executable).parent)  # vllm-router is installed beside the interpreter
    env.update(PYTHONPATH=str(REPO), PYTHON=sys.executable, PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}")
    return env


class LaunchedStack:
    """One launched workbench on `data_dir`; `url` is its app."""

    def __init__(self, data_dir: Path, *, demo_count: int = 6, replicas: int = 2, extra: tuple[str, ...] = ()):
        self.data_dir = Path(data_dir)
        self.demo_count, self.replicas = demo_count, replicas
        self.extra = tuple(extra)  # more settings flags for `./launch.sh` (e.g. --log-cap 64K)
        self.port = procs.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.settings = Settings.load({"data_dir": str(self.data_dir)}, environ={})
        self.log: list[str] = []

    def sh(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        r = subprocess.run(
            [str(REPO / "launch.sh"), *args],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=REPO,
            timeout=timeout,
        )
        self.log.append(r.stdout + r.stderr)
        assert r.returncode == 0, f"launch.sh {' '.join(args)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return r

    def up(self) -> subprocess.CompletedProcess:
        """`./launch.sh --detach` with this stack's ports (new free ones for the fleet each time)."""
        fleet = fleet_addresses.free_block("127.0.0.1", self.replicas, procs.free_port())
        return self.sh(
            "--detach",
            "--no-install",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            "--fleet-port",
            str(fleet),
            "--router-port",
            str(procs.free_port()),
            "--router-prometheus-port",
            str(procs.free_port()),
            "--replicas",
            str(self.replicas),
            "--demo-count",
            str(self.demo_count),
            *self.extra,
        )

    def stop(self) -> None:
        self.sh("stop", "--data-dir", str(self.data_dir), timeout=180)

    def add_users(self) -> None:
        pw = self.data_dir.parent / "test-password"
        pw.write_text(PASSWORD + "\n")
        for name, role in ROLES.items():
            if name == "admin":  # the launch made its own admin (and printed its password)
                continue
            subprocess.run(
                [sys.executable, "-m", "webapp.accounts", "add", name, "--role", role, "--password-file", str(pw)]
                + ["--data-dir", str(self.data_dir)],
                env=_env(),
                cwd=REPO,
                check=True,
                capture_output=True,
                timeout=120,
            )

    def db(self):
        return dbmod.connect(self.settings.db)

    def wait_jobs_done(self, timeout: float = 600) -> None:
        """Until every job is done (the first launch's job captions the demo library)."""
        d = self.db()
        try:
            deadline = time.monotonic() + timeout
            while True:
                jobs = job_queries.list_jobs(d, 100)
                if jobs and all(j["state"] == "done" for j in jobs):
                    return
                assert time.monotonic() < deadline, f"jobs not done within {timeout} s: {jobs}"
                time.sleep(1)
        finally:
            d.close()

    def __enter__(self) -> "LaunchedStack":
        try:
            self.up()
            self.add_users()
            httpx.get(self.url + "/healthz", timeout=10).raise_for_status()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if (self.data_dir / "run").exists():
            self.stop()
