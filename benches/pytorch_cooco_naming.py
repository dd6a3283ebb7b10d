#!/usr/bin/env python3
"""transformers counterpart of benches/cooco_naming.rs: one COOCO naming step of LLaVA-OneVision.

f32, batch 1, on the CPU with as many threads as the Rust side uses. The step, from the decoded
640 x 640 RGB image to the generated ids: LlavaOnevisionImageProcessorPil (the PIL backend,
which bindscope reproduces), then `model.generate(input_ids, pixel_values, image_sizes,
do_sample=False, max_new_tokens=10, min_new_tokens=10)` with the prompt's `<image>` already
expanded to the image's feature count (what the processor does; not timed), without attentions
(`naming`, with `--attn`) and with `output_attentions=True` plus the base view's vision-tower
attention (`naming_attention`, eager attention, which output_attentions needs: what the COOCO
analysis reads; transformers keeps every row of every decoder layer's prompt attention).

- tiny: tests/fixtures/cooco_llava (the fixture checkpoint);
- 0.5b: benches/configs/llava_onevision_0.5b.json with random weights (transformers' init).

The prompt ids and the image are the Rust bench's (the same LCG and integer formula).

    python benches/pytorch_cooco_naming.py [--model tiny|0.5b] [--threads 2] [--runs 3]
        [--attn sdpa|eager]

Prints one JSON line per measurement (median and min in ms) and the peak resident memory
(ru_maxrss) after one step without and one with attention. Run one model per process to read
its own peak.
"""
import argparse
import json
import os
import resource
import statistics
import time

import numpy as np
import torch
import transformers
from PIL import Image
from transformers import LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration
from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
    LlavaOnevisionImageProcessorPil,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIDE, PROMPT, NEW_TOKENS = 640, 24, 10


def image():
    y, x = np.mgrid[0:SIDE, 0:SIDE]
    px = np.stack([x * 255 // (SIDE - 1), y * 255 // (SIDE - 1), (x + y) * 255 // (2 * (SIDE - 1))], -1)
    return Image.fromarray(px.astype(np.uint8), "RGB")


def prompt_ids(vocab, image_token):
    x, out = 0, []
    for _ in range(PROMPT):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(17 + (x >> 33) % (vocab - 17))
    out[3] = image_token
    return out


def timed(fn, runs, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), min(times)


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["tiny", "0.5b"], default="tiny")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--attn", default="sdpa")
    ap.add_argument("--only", choices=["naming", "naming_attention"],
                    help="time one bench (the 0.5B attention bench needs about 24 GB)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.model == "tiny":
        d = os.path.join(ROOT, "tests/fixtures/cooco_llava")
        model = LlavaOnevisionForConditionalGeneration.from_pretrained(d, attn_implementation=a.attn)
        with open(os.path.join(d, "preprocessor_config.json")) as f:
            pc = json.load(f)
        proc = LlavaOnevisionImageProcessorPil(size=pc["size"], image_grid_pinpoints=pc["image_grid_pinpoints"])
    else:
        with open(os.path.join(HERE, "configs/llava_onevision_0.5b.json")) as f:
            cfg = LlavaOnevisionConfig(**json.load(f))
        cfg._attn_implementation = a.attn
        model = LlavaOnevisionForConditionalGeneration(cfg)
        proc = LlavaOnevisionImageProcessorPil()
    model = model.eval().float()
    cfg = model.config
    img = image()
    ids = prompt_ids(cfg.text_config.vocab_size, cfg.image_token_index)
    with torch.no_grad():
        px = proc(images=[img], return_tensors="pt")
        n_feat = model.model.get_image_features(px["pixel_values"][0], px["image_sizes"]).pooler_output[0].shape[0]
    expanded = ids[:3] + [cfg.image_token_index] * n_feat + ids[4:]
    input_ids = torch.tensor([expanded])

    def step(attention):
        with torch.no_grad():
            p = proc(images=[img], return_tensors="pt")
            out = model.generate(
                input_ids=input_ids, pixel_values=p["pixel_values"], image_sizes=p["image_sizes"],
                do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                output_attentions=attention, return_dict_in_generate=True,
            )
            if attention:
                model.model.vision_tower(p["pixel_values"][0][:1], output_attentions=True)
        return out.sequences[0, input_ids.shape[1]:].tolist()

    header = {"model": a.model, "prompt_tokens": input_ids.shape[1], "torch": torch.__version__,
              "transformers": transformers.__version__, "threads": a.threads, "attn": a.attn}
    if a.only != "naming_attention":
        header["generated_ids"] = step(False)
        header["peak_rss_mib_naming"] = round(peak_mib())
        med, mn = timed(lambda: step(False), a.runs)
        print(json.dumps(header), flush=True)
        print(json.dumps({"bench": f"{a.model}/naming", "median_ms": round(med, 2), "min_ms": round(mn, 2)}),
              flush=True)
    if a.only == "naming":
        return
    # Attention probabilities need the eager kernels.
    model.set_attn_implementation("eager")
    step(True)
    med, mn = timed(lambda: step(True), a.runs)
    print(json.dumps({"bench": f"{a.model}/naming_attention", "peak_rss_mib_attention": round(peak_mib()),
                      "median_ms": round(med, 2), "min_ms": round(mn, 2)}), flush=True)

if __name__ == "__main__":
    main()
