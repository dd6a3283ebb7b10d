#!/usr/bin/env python3
"""PyTorch counterpart of benches/jer_sketch.rs: the paper's JER sketch of one image.

The paper's method: J·V with V = 32 orthonormal directions in input space, by forward-mode
autodiff (`torch.func.jvp` vmapped over the 32 tangents), for one 224×224 probe image; then the
singular values of J·V. Models: DINOv2 ViT-S/14 (benches/configs/dinov2-small.json, pooled
output, position embeddings interpolated to 224) and CLIP ViT-B/16 (image_embeds). Random
weights, float32, CPU.

`--estimator output-sketch` times bindscope's default estimator instead: Gᵀ·J with G = 32
Gaussian directions in output space, by one forward pass and the reverse-mode pullback
(`torch.func.vjp`) vmapped over the 32 cotangents.

    python benches/pytorch_jer.py [--threads 2] [--runs 3] [--estimator input-sketch|output-sketch]
"""
import argparse
import json
import os
import statistics
import time

import torch
from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection, Dinov2Config, Dinov2Model

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name):
    with open(os.path.join(HERE, "configs", name)) as f:
        return json.load(f)


def models():
    torch.manual_seed(0)
    d = load("dinov2-small.json")
    dino_cfg = Dinov2Config(**{k: v for k, v in d.items() if k not in ("model_type", "architectures")})
    dino_cfg._attn_implementation = "eager"  # forward-mode AD through plain matmul/softmax
    dino = Dinov2Model(dino_cfg).eval()
    vc = load("clip-vit-base-patch16.json")["vision_config"]
    clip_cfg = CLIPVisionConfig(**{k: v for k, v in vc.items() if k != "model_type"})
    clip_cfg._attn_implementation = "eager"
    clip = CLIPVisionModelWithProjection(clip_cfg).eval()
    return {
        "vit_s14_dinov2": lambda x: dino(pixel_values=x).pooler_output,
        "vit_b16_clip": lambda x: clip(pixel_values=x).image_embeds,
    }


def jer_sketch(f, k=32):
    x = ((0.45 + 0.225 * torch.randn(1, 3, 224, 224)).clamp(0, 1) - 0.45) / 0.225
    m = x.numel()
    v, _ = torch.linalg.qr(torch.randn(m, k))
    tangents = v.T.reshape(k, 1, 3, 224, 224)

    def jvp_one(t):
        return torch.func.jvp(f, (x,), (t,))[1]

    jv = torch.func.vmap(jvp_one)(tangents)  # [k, 1, D]
    s = torch.linalg.svdvals(jv[:, 0, :].T.double())
    return float(s.sum() ** 2 / (s ** 2).sum())


def output_sketch(f, k=32):
    x = ((0.45 + 0.225 * torch.randn(1, 3, 224, 224)).clamp(0, 1) - 0.45) / 0.225
    y, pullback = torch.func.vjp(f, x)  # one forward pass
    g = torch.randn(k, *y.shape)
    gtj = torch.func.vmap(pullback)(g)[0]  # [k, 1, 3, 224, 224]
    s = torch.linalg.svdvals(gtj.reshape(k, -1).double())
    return float(s.sum() ** 2 / (s ** 2).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--estimator", choices=["input-sketch", "output-sketch"], default="input-sketch")
    args = ap.parse_args()
    sketch = jer_sketch if args.estimator == "input-sketch" else output_sketch
    torch.set_num_threads(args.threads)
    for name, f in models().items():
        sketch(f)  # warm-up
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            sketch(f)
            times.append((time.perf_counter() - t) * 1e3)
        print(json.dumps({"bench": f"jer_sketch_{name}", "estimator": args.estimator, "threads": args.threads, "median_ms": statistics.median(times),
                          "min_ms": min(times), "runs": args.runs, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
