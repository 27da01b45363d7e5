"""The TLS context every client of the fleet verifies with: the captioning client (serving.client) and every fleet
read (serving.fleet.reader, so the Fleet tab, the runner's look and `./launch.sh status`) trust the same CAs, so
a fleet the runner captions on is never shown as down by a certificate the Fleet tab would not trust.

What httpx makes by default, as Python tools read it: the CA file or folder named by SSL_CERT_FILE / SSL_CERT_DIR
(a private CA in front of the nodes), else certifi's bundle. Clients pass `trust_env=False` for proxies only.
Making one costs ~20 ms of CPU (loading a bundle): make it once per client and share it.
"""

from __future__ import annotations

import ssl

import httpx


def context() -> ssl.SSLContext:
    """A fresh context that verifies the fleet's certificates as described above."""
    return httpx.create_ssl_context(trust_env=True)
