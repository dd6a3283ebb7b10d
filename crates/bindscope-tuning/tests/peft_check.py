"""Cross-check of a `experiments finetune train` run directory against transformers + PEFT.

Usage (a Python with torch, transformers, safetensors and peft):

    python crates/bindscope-tuning/tests/peft_check.py RUN_DIR BASE_MODEL_DIR

Checks, for a BERT / MiniLM run (sentence embedding = mean pooling + L2 normalisation):
1. `RUN_DIR/merged` loads with `transformers.AutoModel.from_pretrained` (strict: no missing or
   unexpected keys);
2. `RUN_DIR/adapter` (PEFT format) loads onto the base model with `PeftModel.from_pretrained`
   and every LoRA tensor is used;
3. the merged model, the base + PEFT adapter model, and bindscope's own embeddings
   (`RUN_DIR/probe_embeddings.json`) agree within 1e-4 on the probe texts;
4. `RUN_DIR/adapter_no_lines` differs from `RUN_DIR/adapter` exactly by the LiNeS scales of
   `report.json` on lora_B (lora_A identical).
Exits non-zero on the first failed check.
"""
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer


def embed(model, tok, texts, max_length):
    enc = tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        h = model(**enc).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
    return F.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2, dim=1)


def main(run: Path, base_dir: Path) -> None:
    probe = json.loads((run / "probe_embeddings.json").read_text())
    texts, ours = probe["texts"], torch.tensor(probe["embeddings"])
    max_length = probe["max_length"]
    tok = AutoTokenizer.from_pretrained(base_dir)

    merged, info = AutoModel.from_pretrained(run / "merged", output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k != "mismatched_keys" or (k == "mismatched_keys" and v)}
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], f"merged load: {bad}"
    merged.eval()
    e_merged = embed(merged, tok, texts, max_length)

    base = AutoModel.from_pretrained(base_dir).eval()
    e_base = embed(base, tok, texts, max_length)
    peft = PeftModel.from_pretrained(base, run / "adapter").eval()
    n_lora = sum(1 for n, _ in peft.named_parameters() if "lora_" in n)
    saved = load_file(run / "adapter" / "adapter_model.safetensors")
    assert n_lora == len(saved), f"PEFT built {n_lora} LoRA tensors, the adapter file has {len(saved)}"
    sd = peft.state_dict()
    for k, v in saved.items():
        kk = k.replace(".lora_A.weight", ".lora_A.default.weight").replace(".lora_B.weight", ".lora_B.default.weight")
        assert torch.equal(sd[kk], v), f"{k} not loaded"
    e_peft = embed(peft, tok, texts, max_length)

    d1 = (e_merged - e_peft).abs().max().item()
    d2 = (e_merged - ours).abs().max().item()
    d3 = (e_base - ours).abs().max().item()
    print(f"max |merged - base+PEFT| = {d1:.2e}; max |merged - bindscope| = {d2:.2e}; max |base - bindscope| = {d3:.2e} (the update's size)")
    assert d1 < 1e-4 and d2 < 1e-4, "embeddings disagree"

    report = json.loads((run / "report.json").read_text())
    scales = report["lines"]["scales"]
    raw = load_file(run / "adapter_no_lines" / "adapter_model.safetensors")
    for k, v in saved.items():
        layer = int(k.split(".layer.")[1].split(".")[0])
        if "lora_A" in k:
            assert torch.equal(v, raw[k]), k
        else:
            assert torch.allclose(v, raw[k] * scales[layer], atol=1e-7), k
    print("ok: merged checkpoint loads in transformers, PEFT adapter loads and matches, LiNeS scales verified")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
