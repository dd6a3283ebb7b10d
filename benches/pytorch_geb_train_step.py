"""PyTorch counterpart of benches/geb_train_step.rs: one training step of GEB's generative
readout — SmolLM2-135M-Instruct (transformers LlamaForCausalLM, f32, eager attention) plus the
embedding adapter (LN → Linear d→1024 → GELU → Linear 1024→576) injected at position 1 through
`inputs_embeds`, micro-batch 8 × 128 tokens, next-token loss on every position after the slot,
backward, torch.optim.AdamW step (lr 1e-4, weight decay 0).

    python benches/pytorch_geb_train_step.py DIR/smollm2-135m-instruct [--threads 2] [--steps 5]

Prints the median step time and the peak resident memory (ru_maxrss).
"""
import argparse
import resource
import statistics
import time

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM


class Adapter(torch.nn.Module):
    def __init__(self, d, d_dec, hidden=1024):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.linear_1 = torch.nn.Linear(d, hidden)
        self.act = torch.nn.GELU()
        self.linear_2 = torch.nn.Linear(hidden, d_dec)

    def forward(self, e):
        return self.linear_2(self.act(self.linear_1(self.norm(F.normalize(e, dim=-1)))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("decoder")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(a.decoder, dtype=torch.float32, attn_implementation="eager")
    model.train()
    adapter = Adapter(384, model.config.hidden_size)
    opt = torch.optim.AdamW(list(model.parameters()) + list(adapter.parameters()), lr=1e-4, weight_decay=0.0)
    n, t = 8, 128
    ids = torch.randint(0, model.config.vocab_size, (n, t))
    labels = ids.clone()
    labels[:, :2] = -100
    e = torch.randn(n, 384)
    times = []
    for _ in range(a.steps + 1):
        t0 = time.perf_counter()
        emb = model.get_input_embeddings()(ids)
        h = adapter(e)
        emb = torch.cat([emb[:, :1], h[:, None, :], emb[:, 2:]], dim=1)
        loss = model(inputs_embeds=emb, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    times = times[1:]  # the first step allocates the optimizer state
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"torch {torch.__version__} threads {a.threads}: median step {statistics.median(times):.3f} s "
          f"(min {min(times):.3f}, {a.steps} steps); peak RSS {peak:.0f} MiB")
    print("steps (s):", " ".join(f"{x:.2f}" for x in times))


if __name__ == "__main__":
    main()
