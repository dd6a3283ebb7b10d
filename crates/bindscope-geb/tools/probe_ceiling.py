"""How large a matched-vs-zero gap the test items allow: a probe trained on the same turns.

An MLP (scikit-learn `MLPClassifier`, one hidden layer of 512, seed 42) maps
[z-scored image embedding ; bag of words and bigrams of the question] to the answer, trained on
every turn of a mini-GEB `train.json`, and answers the items of a GEB manifest (exact match of
the canonical answer: a lettered choice becomes its option text and is picked among the item's
options; anything else is lower-cased). The same probe is trained a second time with the
embedding replaced by the training mean, which is what GEB's zero control feeds a
`--standardize` readout. The difference of the two, with a paired bootstrap interval over the
items, is the signal a reader of this embedding can find in these items at this training
scale; a readout whose gap is far below it has not learned to read the slot, one near it is at
what the embedding and the data allow.

usage: python probe_ceiling.py DATA MANIFEST.jsonl EMBEDDINGS.safetensors [MORE.safetensors ...]
DATA holds `train.json`; the embeddings are `geb train`/`geb eval` cache files
(`DATA/embeddings/*.image.safetensors`: `embeddings` [N, d], metadata `ids`, the image paths
relative to `DATA/images`, read as `probe_answers.py` reads them) of one encoder; together
they cover the training and the manifest's images (where two files hold the same path, the
first is used).
Needs numpy, safetensors, scikit-learn.
"""
import collections
import json
import re
import sys

import numpy as np
from probe_answers import load
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.neural_network import MLPClassifier

OPTION = re.compile(r"^\(([A-Z])\) (.*)$", re.M)
LETTER = re.compile(r"^\(([A-Z])\)$")


def canonical(question, answer, options=None):
    """(answer, candidates): a lettered choice as its option text among the options."""
    if options is None:
        opts = dict(OPTION.findall(question))
    else:
        opts = {m.group(1): m.group(2) for m in map(OPTION.match, options) if m}
    m = LETTER.match(answer.strip())
    if m and m.group(1) in opts:
        return opts[m.group(1)], list(opts.values())
    return answer.strip().lower(), None


def stem(question):
    """The question without `<image>`, its options and the answer-format instruction."""
    q = OPTION.sub("", question.replace("<image>", ""))
    return q.split("\nAnswer")[0].strip()


def main(data, manifest, *files):
    vectors = {}
    for path in files:
        for image, e in load(path).items():
            vectors.setdefault(image, e)
    if len({len(e) for e in vectors.values()}) != 1:
        sys.exit(f"{', '.join(files)}: embeddings of different widths")

    def image_row(path):
        if path not in vectors:
            sys.exit(f"{', '.join(files)}: no embedding for image '{path}'")
        return vectors[path]

    xq, xi, y = [], [], []
    for conv in json.load(open(f"{data}/train.json")):
        turns = conv["conversations"]
        for human, gpt in zip(turns[::2], turns[1::2]):
            xq.append(stem(human["value"]))
            xi.append(image_row(conv["image"]))
            y.append(canonical(human["value"], gpt["value"])[0])
    items = [json.loads(line) for line in open(manifest) if line.strip()]
    tq = [stem(r["question"]) for r in items]
    ti = [image_row(r["image"]) for r in items]
    ta = [canonical(r["question"], r["answers"][0], r.get("options")) for r in items]

    train, test = np.stack(xi), np.stack(ti)
    mu, sd = train.mean(0), train.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    ztrain, ztest = (train - mu) / sd, (test - mu) / sd
    words = CountVectorizer(ngram_range=(1, 2), min_df=2).fit(xq)

    def features(questions, z, mean_only):
        b = words.transform(questions).toarray().astype(np.float32)
        return np.hstack([np.zeros_like(z) if mean_only else z, b])

    hits = {}
    for name, mean_only in (("matched", False), ("zero", True)):
        probe = MLPClassifier(hidden_layer_sizes=(512,), alpha=1e-3, max_iter=300,
                              early_stopping=True, random_state=42)
        probe.fit(features(xq, ztrain, mean_only), y)
        p = probe.predict_proba(features(tq, ztest, mean_only))
        col = {c: k for k, c in enumerate(probe.classes_)}
        h = []
        for pk, (answer, candidates) in zip(p, ta):
            pool = candidates or list(probe.classes_)
            guess = max(pool, key=lambda c: pk[col[c]] if c in col else -1.0)
            h.append(guess == answer)
        hits[name] = np.array(h, float)

    m, zc = hits["matched"], hits["zero"]
    rng = np.random.default_rng(20260722)
    gaps = np.array([(m[k] - zc[k]).mean() for k in
                     (rng.integers(0, len(m), len(m)) for _ in range(20000))]) * 100
    lo, hi = np.percentile(gaps, [2.5, 97.5])
    print(f"{len(items)} items, {len(y)} training turns")
    print(f"probe: matched {100 * m.mean():.1f}%, zero {100 * zc.mean():.1f}%, "
          f"gap {100 * (m - zc).mean():+.1f} pp [{lo:.1f}, {hi:.1f}]")
    by = collections.defaultdict(list)
    for r, a, b in zip(items, m, zc):
        by[r["category"]].append((a, b))
    for cat, v in sorted(by.items()):
        v = np.array(v)
        print(f"  {cat:10s} n={len(v):4d} matched {100 * v[:, 0].mean():5.1f}% "
              f"zero {100 * v[:, 1].mean():5.1f}%")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
