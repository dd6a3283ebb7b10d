"""PyTorch + PEFT counterpart of `benches/finetune_step.rs`: one training step of the binding
finetuning recipe on all-MiniLM-L6-v2.

Recipe (as bindscope's): LoRA r=4, lora_alpha=4, lora_dropout=0 on the query, key, value and
attention-output projections of every layer (PEFT `target_modules` regex), everything else
frozen; the base model's own dropout off (bindscope's BERT has none), as in `model.eval()`;
a batch of 32 triplets from `benches/configs/finetune_batch.json` = 96 texts tokenized
together (padding to the longest, truncation at 256 as sentence-transformers), mean pooling +
L2 normalisation, hinge triplet loss over cosine (margin 0.05), backward, AdamW (lr 5e-5,
weight decay 0.01, eps 1e-8). Tokenization is inside the timed step, as in the Rust bench.

Usage (a Python with torch, transformers and peft):

    python benches/pytorch_finetune_step.py DIR/minilm-l6-v2 [--steps 20] [--threads N]

Prints the median and mean step time over `--steps` timed steps after 3 warm-up steps.
"""
import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from transformers import AutoModel, AutoTokenizer

TARGETS = r".*encoder\.layer\.\d+\.attention\.(self\.(query|key|value)|output\.dense)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    batch = json.loads((Path(__file__).parent / "configs" / "finetune_batch.json").read_text())["triplets"]
    assert len(batch) == 32
    texts = [t["anchor"] for t in batch] + [t["positive"] for t in batch] + [t["negative"] for t in batch]

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=4, lora_dropout=0.0, target_modules=TARGETS))
    model.eval()  # base dropout off; gradients still flow
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-5, weight_decay=0.01, eps=1e-8)

    def step() -> float:
        enc = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        h = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
        e = F.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2, dim=1)
        a, p, n = e[:32], e[32:64], e[64:]
        loss = F.relu(0.05 - (a * p).sum(1) + (a * n).sum(1)).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(3):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({
        "bench": "pytorch+peft finetune step, all-MiniLM-L6-v2, batch 32 triplets",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "trainable_params": trainable,
        "seq_len": int(tok(texts, padding=True, return_tensors="pt")["input_ids"].shape[1]),
        "median_s": statistics.median(times),
        "mean_s": statistics.mean(times),
        "min_s": min(times),
        "steps": len(times),
    }, indent=1))


if __name__ == "__main__":
    main()
