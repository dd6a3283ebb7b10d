#!/usr/bin/env python3
"""transformers counterpart of benches/lm_decode.rs: SmolLM2-135M greedy decoding and prefill.

f32, batch 1, on the CPU with as many threads as the Rust side uses:

- decode: `model.generate(do_sample=False, max_new_tokens=64, min_new_tokens=64)` from a
  32-token prompt (one prefill + 63 one-token steps through the KV cache; `min_new_tokens`
  keeps EOS out, as the Rust bench does); also the 32-token prefill alone, so that the per-step
  rate is 63 / (generate - prefill_32);
- prefill_512: one `model(input_ids)` over 512 tokens (logits of every position).

The prompt ids are the Rust bench's: 512 ids from a 64-bit LCG in 17..vocab, the decode
prompt being the first 32.

    python benches/pytorch_lm_decode.py [DIR/smollm2-135m-instruct] [--threads 2] [--runs 10]
        [--attn sdpa|eager] [--only all|decode|prefill]

Without a model directory the same config (benches/configs/smollm2_135m.json) is built with
random weights. Prints one JSON line per measurement (median and min in ms, tokens/s) and the
generated ids.
"""
import argparse
import json
import os
import statistics
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT, NEW_TOKENS, PREFILL, EOS = 32, 64, 512, 2


def prompt_ids(n, vocab):
    """The Rust bench's generator: x <- x * 6364136223846793005 + 1442695040888963407 mod 2**64."""
    x, out = 0, []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(17 + (x >> 33) % (vocab - 17))
    return out


def timed(fn, runs, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", help="SmolLM2 checkpoint directory (random weights if absent)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument("--only", default="all", choices=["all", "decode", "prefill"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        model = AutoModelForCausalLM.from_pretrained(
            args.model, dtype=torch.float32, attn_implementation=args.attn
        )
        name = "smollm2-135m"
    else:
        with open(os.path.join(HERE, "configs", "smollm2_135m.json")) as f:
            raw = json.load(f)
        cfg = LlamaConfig(**{k: v for k, v in raw.items() if k != "model_type"})
        cfg._attn_implementation = args.attn
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).to(torch.float32)
        name = "smollm2-135m-random"
    model.eval()
    ids = torch.tensor([prompt_ids(PREFILL, model.config.vocab_size)])
    prompt = ids[:, :PROMPT]
    common = {"bench": None, "model": name, "attn": args.attn, "threads": args.threads,
              "runs": args.runs, "torch": torch.__version__, "transformers": transformers.__version__}

    def report(bench, median, mn, **extra):
        print(json.dumps({**common, "bench": bench, "median_ms": round(median, 2),
                          "min_ms": round(mn, 2), **extra}), flush=True)

    with torch.inference_mode():
        if args.only in ("all", "decode"):
            gen = dict(attention_mask=torch.ones_like(prompt), do_sample=False,
                       max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                       eos_token_id=EOS, pad_token_id=EOS)
            out = model.generate(prompt, **gen)
            new = out[0, PROMPT:].tolist()
            assert len(new) == NEW_TOKENS, len(new)
            print(json.dumps({"model": name, "generated_ids": new}), flush=True)
            med, mn = timed(lambda: model.generate(prompt, **gen), args.runs)
            report(f"decode/prompt{PROMPT}_new{NEW_TOKENS}", med, mn,
                   tokens_per_s=round(NEW_TOKENS / (med / 1e3), 2))
            pmed, pmn = timed(lambda: model(prompt), args.runs)
            report(f"decode/prefill_{PROMPT}", pmed, pmn,
                   step_tokens_per_s=round((NEW_TOKENS - 1) / ((med - pmed) / 1e3), 2))
        if args.only in ("all", "prefill"):
            med, mn = timed(lambda: model(ids), args.runs)
            report(f"prefill_512/tokens{PREFILL}", med, mn,
                   tokens_per_s=round(PREFILL / (med / 1e3), 2))


if __name__ == "__main__":
    main()
