"""A FleetReader's TLS: one context per reader, and the verification every read had before it was shared.

Each httpx client builds an SSL context of its own, loading certifi's CA bundle (~20 ms of CPU), and the reader
made a client per read; the app and the runner read their fleet every few seconds. The reader now makes the
context once and gives it to each client: the same one httpx would make (certifi's CAs, and trust_env=False, so
SSL_CERT_FILE is not read), so an https fleet is verified as it was: a self-signed certificate is refused.
The CPU per read, before and after: `python benchmarks/bench_fleet_reads.py` (docs/BENCHMARKS.md)."""

from __future__ import annotations

import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from serving.fleet_reader import FleetReader

ROOT = Path(__file__).resolve().parents[1]


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


def test_an_https_fleet_with_a_self_signed_certificate_is_refused_even_when_ssl_cert_file_names_it(
    settings, self_signed, monkeypatch
):
    url, cert = self_signed
    trusting = httpx.get(url + "/health", verify=ssl.create_default_context(cafile=cert), trust_env=False)
    assert trusting.status_code == 200  # the server answers whoever trusts its certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the reader does not read the environment (trust_env=False)
    reader = FleetReader(settings)
    for _ in range(2):  # the first read makes the reader's context, the second uses it
        r = reader.get(url + "/health")
        assert isinstance(r, httpx.ConnectError) and "CERTIFICATE_VERIFY_FAILED" in str(r), r
    (status,) = reader.fleet_status([url])
    assert not status.healthy and "CERTIFICATE_VERIFY_FAILED" in status.error


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
from serving.fleet_reader import FleetReader
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
