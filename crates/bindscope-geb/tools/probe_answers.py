"""How much of each training question's answer a linear probe reads from the image embedding.

For every question template of a mini-GEB `train.json` whose answer depends on the image alone
(colours and counts are named in the template as C, S, N), a ridge classifier maps the
L2-normalised, z-scored embedding of the image to the answer, and its held-out accuracy is
printed beside the majority answer's. Lettered-choice answers are mapped to their option text
(`B` -> `green`): the letter itself is shuffled per question and says nothing about the image.
Templates whose answer also depends on the question's wording (existence, relations) are
printed too, but a probe that sees only the image cannot do better than the majority there.

Split: the first 60% of a template's turns train, the next 20% choose the ridge penalty, the
last 20% are held out (the file's order, which the generator seeds).

usage: python probe_answers.py DATA/train.json EMBEDDINGS.safetensors [MORE.safetensors ...]
The embedding files are `experiments embed --images DATA/images/train --out FILE` outputs
(`embeddings` [N, d], header metadata `inputs`: the image paths) or any safetensors file with
`embeddings` and a JSON list of image paths under `inputs` or `ids`. Needs numpy, safetensors.
"""
import collections
import json
import re
import sys

import numpy as np
from safetensors import safe_open


def load(path):
    with safe_open(path, "np") as f:
        meta = f.metadata() or {}
        e = f.get_tensor("embeddings")
    ids = json.loads(meta.get("inputs") or meta["ids"])
    # `experiments embed` records the paths it read; keep what follows `images/`.
    return {i.split("images/")[-1]: row for i, row in zip(ids, e)}


def template(q):
    q = q.split("\n")[0]
    q = re.sub(r"\b(red|green|blue|yellow|purple|orange)\b", "C", q)
    q = re.sub(r"\b(circle|square|triangle)s?\b", "S", q)
    q = re.sub(r"\d+", "N", q)
    q = re.sub(r"the value of the .*? bar greater than the value of the .*? bar", "X > Y", q)
    q = re.sub(r"\"[^\"]*\"", "W", q)
    return q[:70]


def ridge_accuracy(X, y, k):
    n = len(y)
    a, b = int(0.6 * n), int(0.8 * n)
    mu, sd = X[:a].mean(0), X[:a].std(0) + 1e-8
    Z = (X - mu) / sd
    Y = np.eye(k)[y[:a]]
    best = None
    for lam in [1.0, 10.0, 100.0, 1000.0]:
        W = np.linalg.solve(Z[:a].T @ Z[:a] + lam * np.eye(X.shape[1]), Z[:a].T @ Y)
        val = ((Z[a:b] @ W).argmax(1) == y[a:b]).mean()
        if best is None or val > best[0]:
            best = (val, W)
    return ((Z[b:] @ best[1]).argmax(1) == y[b:]).mean()


def main():
    convs = json.load(open(sys.argv[1]))
    turns = collections.defaultdict(list)
    for c in convs:
        t = c["conversations"]
        for h, g in zip(t[0::2], t[1::2]):
            q = h["value"].replace("<image>\n", "").replace("<image>", "")
            a = g["value"].strip()
            options = dict(re.findall(r"^\(([A-Z])\) (.*)$", q, re.M))
            turns[template(q)].append((c["image"], options.get(a, a)))
    for path in sys.argv[2:]:
        emb = load(path)
        print(f"== {path}")
        print("turns  probe  majority  template")
        rows = []
        for t, items in turns.items():
            answers = sorted({a for _, a in items})
            if len(items) < 60 or len(answers) > 12:
                continue
            X = np.stack([emb[im] for im, _ in items]).astype(np.float64)
            X /= np.linalg.norm(X, axis=1, keepdims=True)
            y = np.array([answers.index(a) for _, a in items])
            b = int(0.8 * len(y))
            majority = (y[b:] == np.bincount(y[:b]).argmax()).mean()
            rows.append((len(items), ridge_accuracy(X, y, len(answers)), majority, t))
        for n, acc, maj, t in sorted(rows, reverse=True):
            print(f"{n:5d}  {acc:.2f}   {maj:.2f}      {t}")


if __name__ == "__main__":
    main()
