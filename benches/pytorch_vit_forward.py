#!/usr/bin/env python3
"""PyTorch counterpart of benches/vit_forward.rs: CLIP ViT-B/16 vision tower forward.

Same config (benches/configs/clip-vit-base-patch16.json), random weights, batch 8, 224×224,
float32, inference mode, on the CPU with as many threads as the Rust side uses.

    python benches/pytorch_vit_forward.py [--threads 2] [--runs 10]

Prints the median and min wall time per forward in milliseconds.
"""
import argparse
import json
import os
import statistics
import time

import torch
from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with open(os.path.join(HERE, "configs", "clip-vit-base-patch16.json")) as f:
        vc = json.load(f)["vision_config"]
    cfg = CLIPVisionConfig(**{k: v for k, v in vc.items() if k != "model_type"})
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = CLIPVisionModelWithProjection(cfg).eval()
    x = torch.randn(args.batch, 3, 224, 224)
    times = []
    with torch.inference_mode():
        for _ in range(2):
            model(pixel_values=x)
        for _ in range(args.runs):
            t = time.perf_counter()
            model(pixel_values=x)
            times.append((time.perf_counter() - t) * 1e3)
    print(json.dumps({"bench": "clip_vit_b16_forward_b8", "threads": args.threads,
                      "median_ms": statistics.median(times), "min_ms": min(times), "runs": args.runs,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
