"""The router gate says what it refuses (issue 45, point 6): for each refusal its status, its reason and the address
it came from, the first of each kind at once and then a count; every line bounded; never the fleet key, nor the
token a client gave. The gate runs in-process on a loopback port; refusals never reach its upstream."""

from __future__ import annotations

import asyncio
import socket
import threading

import httpx
import pytest

from serving import procs, router_gate
from serving.redact import Redactor

KEY = "k3y-" + "s" * 40


@pytest.fixture
def gate(monkeypatch, capsys):
    monkeypatch.setattr(router_gate, "REFUSED_SAY_S", 0.5)
    port = procs.free_port()
    g = router_gate.RouterGate("http://127.0.0.1:9", KEY, port=port, redact=Redactor([KEY]))
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(target=lambda: loop.run_until_complete(g.serve("127.0.0.1", port, stop)), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            threading.Event().wait(0.05)
    yield url, port
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)


def raw(port: int, data: bytes) -> bytes:
    """Send `data` as it is (what httpx would refuse to send) and read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        return s.recv(1000)


def said(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("[router-gate] refused")]


def test_each_refusal_is_said_with_status_reason_and_source(gate, capsys):
    url, port = gate
    with httpx.Client(timeout=5, trust_env=False) as c:
        assert c.get(url + "/workers").status_code == 401
        assert c.get(url + "/workers", headers={"authorization": "Bearer the-wrong-token-123"}).status_code == 401
        assert c.get(url + "/health", headers={"authorization": "Basic Zm9v"}).status_code == 401
        assert (
            c.get(url + "/workers", headers={"host": "rebound.example", "authorization": f"Bearer {KEY}"}).status_code
            == 403
        )
        assert (
            c.get(
                url + "/workers", headers={"origin": "http://evil.example", "authorization": f"Bearer {KEY}"}
            ).status_code
            == 403
        )
        assert (
            c.post(url + "/add_worker?url=http://x&sig=abc", headers={"authorization": f"Bearer {KEY}"}).status_code
            == 403
        )
        assert c.get(url + "/workers", headers={"host": f"{KEY}.example"}).status_code == 403  # the key, sent as a Host
    threading.Event().wait(1.5)  # the second Host refusal is one of a kind said already: counted, said after
    lines = said(capsys)
    text = "\n".join(lines)
    assert len(lines) == 7, text
    for line in lines[:6]:
        assert line.startswith("[router-gate] refused 40") and " from 127.0.0.1:" in line, line
    assert lines[6].startswith("[router-gate] refused 403 from 127.0.0.1: 1 more since the line before; Host '")
    assert "[fleet key].example" in lines[6]
    assert "401 from 127.0.0.1:" in lines[0] and "no fleet key (no Authorization header): GET /workers" in lines[0]
    assert "a token that is not the fleet key" in lines[1] and "the-wrong-token-123" not in text
    assert "its authorization header has another scheme" in lines[2] and "Zm9v" not in text
    assert "Host 'rebound.example' is not a loopback name" in lines[3]
    assert "sent by a browser for a page (Origin 'http://evil.example')" in lines[4]
    assert "not the OpenAI API" in lines[5] and "POST /add_worker" in lines[5] and "sig=" not in lines[5]
    assert KEY not in text  # never the key, wherever a client put it


def test_a_flood_is_counted_not_said_line_by_line_and_every_line_is_bounded(gate, capsys):
    url, port = gate
    with httpx.Client(timeout=5, trust_env=False) as c:
        for _ in range(200):
            assert c.get(url + "/health").status_code == 401
        threading.Event().wait(1.5)  # the count is said every REFUSED_SAY_S (0.5 s here)
    for i in range(40):  # 40 long paths: one kind (401, no key) from one address
        raw(port, b"GET /" + b"x" * 3000 + b"%d HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n\r\n" % (i, port))
    raw(port, b"GARBAGE \x00\x01\x7f " + b"y" * 5000 + b"\r\n\r\n")  # not HTTP at all
    threading.Event().wait(1.5)
    lines = said(capsys)
    text = "\n".join(lines)
    assert len(lines) <= 12, text  # 241 refusals: the first of each kind, then a count every REFUSED_SAY_S
    assert any("more since the line before; no fleet key (no Authorization header)" in line for line in lines), text
    counted = sum(int(line.split(": ", 1)[1].split(" more")[0]) for line in lines if " more since" in line)
    assert counted == 200 - 1 + 40, text  # every refusal said or counted, none lost
    assert any("400 from 127.0.0.1:" in line and "not HTTP the gate reads" in line for line in lines), text
    assert all(len(line) < 600 for line in lines), max(len(line) for line in lines)
    assert "\x7f" not in text and "\x00" not in text
