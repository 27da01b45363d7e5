"""The fleet's TLS: the captioning client and the FleetReader trust the same CAs (serving.fleet.tls), and a reader
makes its context once.

Each httpx client builds an SSL context of its own, loading a CA bundle (~20 ms of CPU), and the reader made a
client per read; the app and the runner read their fleet every few seconds. The reader makes the context once and
gives it to each client. Which CAs: the captioning client read SSL_CERT_FILE (httpx's default) while the reader did
not, so a fleet behind a private CA was captioned on while the Fleet tab showed every replica down with
CERTIFICATE_VERIFY_FAILED. Both now verify with serving.fleet.tls: SSL_CERT_FILE/DIR, else certifi's CAs; an
untrusted certificate is refused by both. The CPU per read, before and after: `python
benchmarks/bench_fleet_reads.py` (docs/BENCHMARKS.md)."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from serving.client import FleetClient
from serving.fleet.reader import FleetReader

ROOT = Path(__file__).resolve().parents[2]


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def _serve(tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    if tls is not None:
        srv.socket = tls.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def self_signed(tmp_path):
    """(URL of an https server on loopback with a self-signed certificate for 127.0.0.1, the certificate's file)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "2"]
        + ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    srv = _serve(tls)
    try:
        yield f"https://127.0.0.1:{srv.server_port}", cert
    finally:
        srv.shutdown()
        srv.server_close()


async def _client_get(settings, url: str) -> httpx.Response | Exception:
    """A GET through the captioning client's own connection pool (its TLS context included)."""
    client = FleetClient(settings)
    try:
        async with client._pool(url) as c:
            return await c.get(url + "/health")
    except httpx.HTTPError as e:
        return e
    finally:
        await client.aclose()


def test_an_https_fleet_with_an_untrusted_certificate_is_refused_by_captioning_and_the_fleet_tab(
    settings, self_signed, monkeypatch
):
    url, cert = self_signed
    trusting = httpx.get(url + "/health", verify=ssl.create_default_context(cafile=cert), trust_env=False)
    assert trusting.status_code == 200  # the server answers whoever trusts its certificate
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    reader = FleetReader(settings)
    for _ in range(2):  # the first read makes the reader's context, the second uses it
        r = reader.get(url + "/health")
        assert isinstance(r, httpx.ConnectError) and "CERTIFICATE_VERIFY_FAILED" in str(r), r
    (status,) = reader.fleet_status([url])
    assert not status.healthy and "CERTIFICATE_VERIFY_FAILED" in status.error
    r = asyncio.run(_client_get(settings, url))
    assert isinstance(r, httpx.ConnectError) and "CERTIFICATE_VERIFY_FAILED" in str(r), r


def test_a_fleet_behind_a_private_ca_named_by_ssl_cert_file_is_captioned_on_and_shown_up(
    settings, self_signed, monkeypatch
):
    """The CA file a deployment names for the captioning client is the one the Fleet tab verifies with: the tab
    never shows a fleet down that the runner captions on."""
    url, cert = self_signed
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    r = asyncio.run(_client_get(settings, url))
    assert isinstance(r, httpx.Response) and r.status_code == 200, r
    reader = FleetReader(settings)
    assert reader.get(url + "/health").status_code == 200
    (status,) = reader.fleet_status([url])
    assert status.healthy, status.error


# in a child process: the tests' conftest shares one default SSL context among all of httpx's clients
COUNT = r"""
import ssl, sys
made = []
_create = ssl.create_default_context
def counting(*args, **kwargs):
    made.append(1)
    return _create(*args, **kwargs)
ssl.create_default_context = counting
import httpx
from data.settings import Settings
from serving.fleet.reader import FleetReader
url = sys.argv[2]
reader = FleetReader(Settings.load({"data_dir": sys.argv[1]}, environ={}))
codes = [reader.get(url + "/health").status_code for _ in range(3)]
healthy = [s.healthy for s in reader.fleet_status([url, url])] + [reader.look([url])["healthy"]]
print(codes, healthy, len(made))
"""


def test_a_reader_makes_one_tls_context_for_all_its_reads(tmp_path):
    srv = _serve()
    try:
        out = subprocess.run(
            [sys.executable, "-c", COUNT, str(tmp_path / "var"), f"http://127.0.0.1:{srv.server_port}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    finally:
        srv.shutdown()
        srv.server_close()
    assert out.stdout.split("]")[-1].strip() == "1", out.stdout  # 5 reads (3 gets, fleet_status, look): 1 context
    assert out.stdout.startswith("[200, 200, 200] [True, True, 1]"), out.stdout
