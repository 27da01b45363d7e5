"""How real vLLM answers bad input (`bench_fleet.py hostile DIR`, then `sweep --probe FILE`): a few hostile
clips, and the status codes, messages, metric names and a schema answer's shape of a running replica. The
recording in tests/recordings is what the simulated fleet and the client tests are held to."""

from __future__ import annotations

import json
import random
from pathlib import Path


def cmd_hostile(a) -> None:
    """A few hostile clips, to compare how real vLLM and the simulated fleet answer them."""

    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    good = sorted(Path(a.good).glob("*.mp4"))[0].read_bytes() if a.good else b""
    (d / "zero_length.mp4").write_bytes(b"")
    (d / "html_named.mp4").write_text("<!doctype html><html><body>not a video</body></html>")
    (d / "random_bytes.mp4").write_bytes(random.Random(1).randbytes(200_000))
    if good:
        (d / "truncated_half.mp4").write_bytes(good[: len(good) // 2])
        (d / "truncated_head.mp4").write_bytes(good[:4096])
    print(json.dumps(sorted(p.name for p in d.iterdir())))


async def probe(url: str, clip_root: Path, hostile: Path, prompt: str) -> dict:
    """Status codes and messages of real vLLM for bad input, its metric names and a schema answer's shape."""
    import httpx

    from data import taxonomy

    def body(uri: str, schema: bool = False) -> dict:
        b = {
            "model": "bench",
            "max_tokens": 64,
            "temperature": 0.0,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "video_url", "video_url": {"url": uri}}, {"type": "text", "text": prompt}],
                }
            ],
        }
        if schema:
            b["max_tokens"] = 1500
            b["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "caption", "schema": taxonomy.CAPTION_SCHEMA, "strict": True},
            }
        return b

    cases = {p.name: p.resolve().as_uri() for p in sorted(hostile.iterdir())}
    cases["missing_file"] = (clip_root / "does_not_exist.mp4").resolve().as_uri()
    cases["outside_root"] = "file:///etc/passwd"
    cases["dotdot"] = clip_root.resolve().as_uri() + "/../../etc/passwd"
    cases["metadata_ip"] = "http://169.254.169.254/latest/meta-data/"
    out: dict = {"cases": {}}
    async with httpx.AsyncClient(timeout=120) as c:
        for name, uri in cases.items():
            try:  # one case that times out or breaks the connection must not cost the whole run
                r = await c.post(url + "/v1/chat/completions", json=body(uri))
                out["cases"][name] = {"status": r.status_code, "body": r.text[:600]}
            except httpx.HTTPError as e:
                out["cases"][name] = {"status": None, "body": f"{type(e).__name__}: {e}"}
        good = sorted(clip_root.glob("*.mp4"))[-1].resolve().as_uri()
        r = await c.post(url + "/v1/chat/completions", json=body(good, schema=True))
        out["schema_answer"] = {"status": r.status_code, "headers": dict(r.headers), "body": r.json()}
        m = await c.get(url + "/metrics")
        out["metric_names"] = sorted(
            {line.split("{")[0].split(" ")[0] for line in m.text.splitlines() if line.startswith("vllm:")}
        )
        out["models"] = (await c.get(url + "/v1/models")).json()
        out["health"] = (await c.get(url + "/health")).status_code
    return out
