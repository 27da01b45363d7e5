"""What structured output costs the CPU per caption: xgrammar, exactly as vLLM 0.25 drives it, on our schema.

On the 2xH200 node a replica kept 9.7-12.4 cores busy with our grammar-constrained 478-token answers against 5.1
for vLLM alone with free text (docs/GPU.md, "Owed" 2). This measures the grammar's share on any CPU: it compiles
the model-facing schema of the current prompt (`data.taxonomy.model_schema`) with vLLM's settings (xgrammar,
`disable_any_whitespace`, so `any_whitespace=False`), then replays the real answer recorded from vLLM 0.25.0
(`tests/recordings/vllm-0.25.0-answers.json`, 478 completion tokens) through a GrammarMatcher token by token: one
`fill_next_token_bitmask` + `accept_token` per generated token, which is the engine core's per-token grammar work.
It also times the detokenizer's per-token step (tokenizers' DecodeStream, what vLLM's fast incremental
detokenizer uses), the other per-token CPU cost that grows with answer length.

The token ids are the ones the dummy-weight model produced: the answer text is split greedily into the longest
vocabulary entries (the dummy vocabulary's pseudo-words), which gives the recorded completion-token count.

Needs `xgrammar` (0.2.1 is what vLLM 0.25.0 pins), `torch` (CPU is fine), `transformers` and a Qwen3-VL model folder
(the real one, or the dummy from serving/gpu_bundle/make_dummy_qwen3vl.py). On this repo's CPU machine:

    python3.11 -m venv /tmp/xg && /tmp/xg/bin/pip install /opt/wheels/torch-*+cpu-cp311-*.whl \
        transformers sqlite-utils jsonschema apache-tvm-ffi pydantic
    /tmp/xg/bin/pip install --no-deps xgrammar==0.2.1
    /tmp/xg/bin/python serving/gpu_bundle/make_dummy_qwen3vl.py /tmp/dummyq
    PYTHONPATH=. /tmp/xg/bin/python benchmarks/bench_grammar.py --model /tmp/dummyq
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

RECORDING = Path(__file__).resolve().parents[1] / "tests" / "recordings" / "vllm-0.25.0-answers.json"


def recorded_answer() -> tuple[str, int]:
    """The good answer real vLLM gave, and its completion-token count."""
    good = json.loads(RECORDING.read_text())["answers"]["good"]["body"]
    return good["choices"][0]["message"]["content"], good["usage"]["completion_tokens"]


def greedy_ids(text: str, tokenizer) -> list[int]:
    """Token ids as a model emitting whole vocabulary entries would have written `text` (longest match first)."""
    vocab = tokenizer.get_vocab()
    # byte-level form: a space is "Ġ" (U+0120); the answer is ASCII apart from what the cleaner already removed
    form = "".join("\u0120" if c == " " else c for c in text)
    longest = max(len(k) for k in vocab)
    ids, i = [], 0
    while i < len(form):
        for n in range(min(longest, len(form) - i), 0, -1):
            tid = vocab.get(form[i : i + n])
            if tid is not None:
                ids.append(tid)
                i += n
                break
        else:
            raise ValueError(f"no vocabulary entry for {form[i]!r} at {i}")
    return ids


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a Qwen3-VL model folder (tokenizer files)")
    ap.add_argument("--answers", type=int, default=50, help="how many answers to replay (default 50)")
    ap.add_argument("--threads", type=int, default=8, help="GrammarCompiler max_threads (vLLM uses 8)")
    args = ap.parse_args(argv)

    import torch
    import xgrammar as xgr
    from tokenizers.decoders import DecodeStream
    from transformers import AutoTokenizer

    from data import prompts, taxonomy

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(args.model)
    vocab_size = json.loads((Path(args.model) / "config.json").read_text())["text_config"]["vocab_size"]
    schema = next(p["schema"] for p in prompts.PRESETS if p["name"] == prompts.DEFAULT_PROMPT and p["version"] == 2)
    assert not taxonomy.unsupported_features(schema)
    text, completion_tokens = recorded_answer()
    ids = greedy_ids(text, tok) + [tok.convert_tokens_to_ids("<|im_end|>")]
    print(f"answer: {len(text)} chars, {len(ids)} tokens replayed (vLLM reported {completion_tokens})")

    t0 = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab_size)
    t1 = time.perf_counter()
    compiler = xgr.GrammarCompiler(info, max_threads=args.threads)
    compiled = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
    t2 = time.perf_counter()
    print(f"once per server: tokenizer info {t1 - t0:.2f} s; once per schema (cached after): compile {t2 - t1:.2f} s")

    bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    per_answer_cpu, per_token_us = [], []
    for _ in range(args.answers):
        c0 = time.process_time()
        matcher = xgr.GrammarMatcher(compiled)
        for tid in ids:
            s = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask, 0)
            if not matcher.accept_token(tid):
                raise SystemExit(f"the grammar refused the recorded answer at token {tid} ({tok.decode([tid])!r})")
            per_token_us.append((time.perf_counter() - s) * 1e6)
        per_answer_cpu.append(time.process_time() - c0)
    assert matcher.is_terminated(), "the recorded answer did not complete the grammar"

    detok_cpu = []
    for _ in range(args.answers):
        c0 = time.process_time()
        stream = DecodeStream(skip_special_tokens=True)
        for tid in ids:
            stream.step(tok._tokenizer, tid)
        detok_cpu.append(time.process_time() - c0)

    q = statistics.quantiles(per_token_us, n=100)
    grammar_s = statistics.median(per_answer_cpu)
    print(f"grammar per token: median {statistics.median(per_token_us):.1f} us, p99 {q[98]:.1f} us")
    print(f"grammar per answer ({len(ids)} tokens): {grammar_s * 1000:.1f} ms CPU (median of {args.answers})")
    print(f"detokenizer per answer: {statistics.median(detok_cpu) * 1000:.1f} ms CPU")
    print(f"grammar share of the measured 4.3 core-s per clip on the node: {grammar_s / 4.3 * 100:.2f} %")


if __name__ == "__main__":
    main()
