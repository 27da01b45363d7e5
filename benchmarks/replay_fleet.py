"""A fleet of paced replicas that answer every caption request with answers the simulated fleet rendered beforehand,
sized as real vLLM's recording: for measuring the runner (its ceiling, its write-lock holds, a 16-node rehearsal)
on a machine whose cores could not also simulate hundreds of replicas.

    python benchmarks/replay_fleet.py --replicas 128 --capacity 8 --rate 3.5 --ready-file /tmp/fleet.json

Why not the simulated fleet itself: it renders each answer with its logprobs as it goes (7 ms of CPU each here)
and probes each clip; 448 answers/s would need ~3 cores for the simulator alone. The answers here are the
simulated fleet's own (serving.simfleet.answers: the same body keys as vLLM 0.25, "[SIMULATED]" captions, token
logprobs of `--top-logprobs` alternatives), with the caption run to the schema's 1,500 characters so that an
answer has the recording's size (tests/recordings/vllm-0.25.0-answers.json, `good_logprobs`: 478 tokens, 222 KB with 5
alternatives); `--variants` distinct ones, served in turn.

Each replica listens on its own port, runs at most `--capacity` requests at once (the rest wait, as vLLM queues
them), and holds each for capacity / rate seconds: a full replica answers `--rate` clips/s (an H200: ~3.5).
`--rate 0` answers at once. GET /stats (any port) returns each replica's completed requests and the integral of
its running requests over time (request-seconds), for busy shares.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from data import taxonomy
from serving.simfleet import answers as sim_answers, logprobs as sim_logprobs

RECORDED_CAPTION_CHARS = 1500  # the recorded answer's caption ran to the schema's maxLength


def render_bodies(variants: int, top_logprobs: int) -> list[bytes]:
    """`variants` complete HTTP answers (head + body) of the simulated fleet, captions run to 1,500 characters."""
    schema = taxonomy.model_schema(taxonomy.CAPTION_SCHEMA)
    out = []
    for i in range(variants):
        answer = sim_answers.synthetic_answer(f"replay/{i:05d}.mp4", None, schema)
        caption = answer["caption"]
        while len(caption) < RECORDED_CAPTION_CHARS - 100:
            caption += " " + answer["caption"].split("] ", 1)[-1]
        answer["caption"] = caption[: RECORDED_CAPTION_CHARS - 1].rsplit(" ", 1)[0] + "."
        content = json.dumps(answer, ensure_ascii=False)
        lp = None
        tokens = max(1, round(len(content) / sim_answers.CHARS_PER_TOKEN))
        if top_logprobs:
            lp = sim_logprobs.answer_logprobs(content, answer, schema, top_logprobs, f"replay{i}".encode())
            tokens = len(lp["content"])
        body = sim_answers.completion_body(
            "Qwen/Qwen3-VL-8B-Instruct (simulated)", i, sim_answers.Answer(content, tokens, "stop", lp), 5600
        )
        data = json.dumps(body).encode()
        head = (
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-simulated: 1\r\n"
            f"content-length: {len(data)}\r\n\r\n"
        ).encode()
        out.append(head + data)
    return out


class Replica:
    def __init__(self, capacity: int, hold_s: float):
        self.capacity = capacity
        self.hold_s = hold_s
        self.slots = asyncio.Semaphore(capacity)
        self.running = 0
        self.completed = 0
        self.area = 0.0  # request-seconds running
        self.since = time.monotonic()

    def _tick(self) -> None:
        t = time.monotonic()
        self.area += self.running * (t - self.since)
        self.since = t

    def stats(self) -> dict:
        self._tick()
        return {"completed": self.completed, "request_seconds": self.area, "running": self.running}


async def serve(args) -> None:
    bodies = render_bodies(args.variants, args.top_logprobs)
    hold = args.capacity / args.rate if args.rate > 0 else 0.0
    replicas = [Replica(args.capacity, hold) for _ in range(args.replicas)]
    turn = [0]

    def handler(rep: Replica):
        async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line[:15].lower() == b"content-length:":
                            length = int(line[15:])
                    if length:
                        await reader.readexactly(length)
                    if head.startswith(b"GET /stats"):
                        data = json.dumps({"replicas": [r.stats() for r in replicas], "t": time.monotonic()}).encode()
                        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(data) + data)
                        await writer.drain()
                        continue
                    if head.startswith(b"GET"):
                        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                        await writer.drain()
                        continue
                    async with rep.slots:
                        rep._tick()
                        rep.running += 1
                        try:
                            if rep.hold_s:
                                await asyncio.sleep(rep.hold_s)
                        finally:
                            rep._tick()
                            rep.running -= 1
                            rep.completed += 1
                    turn[0] += 1
                    writer.write(bodies[turn[0] % len(bodies)])
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                pass
            finally:
                writer.close()

        return on_connection

    servers = [await asyncio.start_server(handler(r), "127.0.0.1", 0, backlog=4096) for r in replicas]
    urls = [f"http://127.0.0.1:{s.sockets[0].getsockname()[1]}" for s in servers]
    ready = {"urls": urls, "answer_bytes": [len(b) for b in bodies], "hold_s": hold, "pid": os.getpid()}
    Path(args.ready_file).write_text(json.dumps(ready))
    await asyncio.Event().wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--capacity", type=int, default=8, help="requests a replica runs at once")
    ap.add_argument("--rate", type=float, default=3.5, help="clips/s of a full replica; 0 answers at once")
    ap.add_argument("--top-logprobs", type=int, default=5, help="alternatives per token in the answers (0: none)")
    ap.add_argument("--variants", type=int, default=32, help="distinct answers, served in turn")
    ap.add_argument("--ready-file", required=True, help="where to write the URLs once listening")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
