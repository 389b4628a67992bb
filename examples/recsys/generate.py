"""Synthetic click-through data shaped like Criteo's, with a known best attainable AUC.

Each row has 13 numeric features (heavy-tailed counts, like Criteo's integer columns), 26
categorical ids (Zipf-distributed: a few ids are very frequent, most are rare; vocabularies
from a few hundred to millions) and a click label drawn from a hidden model::

    p(click) = sigmoid(bias + sum_f w_f[id_f] + sum_j v_j * z_j),   z_j = standardised log1p(count_j)

with hidden per-id weights ``w_f`` and numeric weights ``v``. No model can beat the AUC of
the true probabilities, so that AUC (measured on a held-out sample, printed and written to
the manifest) is the ceiling the training scripts aim a fraction of. A wide-and-deep model
can reach close to it given enough data: the wide part has the hidden model's very shape.

Output: ``train-00000-of-000NN.tfrecord[.gz]`` files of ``tf.train.Example`` rows (features
``num`` 13 floats, ``cat`` 26 int64 ids, ``label`` int64 0/1), ``eval.tfrecord[.gz]`` (a
held-out sample from the same distribution) and ``manifest.json``. Everything is a function
of ``--seed`` and the size flags: the same flags write the same bytes (each file has its own
random stream, so files can be written in parallel with ``--jobs``).

    python generate.py --out data --quick              # ~4.5 MB, seconds (the tests' size)
    python generate.py --out data --benchmark          # ~3.4 GB (the benchmark's size)
    python generate.py --out data --rows 2000000 --files 32 --vocab-scale 0.1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

NUM_NUMERIC = 13
NUM_CATEGORICAL = 26
#: Vocabulary sizes at --vocab-scale 1: geometric from 200 to 4 million, like Criteo's
#: columns (which range from 3 to ~10 million ids).
BASE_VOCAB = [int(round(200 * (20000 ** (i / (NUM_CATEGORICAL - 1))))) for i in range(NUM_CATEGORICAL)]
MIN_VOCAB = 16
ID_SIGMA = 0.35  # spread of the hidden per-id weights
NUM_SIGMA = 0.3  # spread of the hidden numeric weights
TARGET_CTR = 0.25  # about Criteo's click rate
PRESETS = {
    # rows, files, vocab scale, eval rows
    "quick": (24_000, 8, 0.001, 8_000),
    "benchmark": (24_000_000, 64, 0.25, 100_000),
}


def vocab_sizes(scale: float) -> list[int]:
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"--vocab-scale {scale}: give a positive number")
    return [max(MIN_VOCAB, int(round(v * scale))) for v in BASE_VOCAB]


def hidden_model(seed: int, vocab: list[int]) -> dict[str, object]:
    """The hidden weights: a function of the seed and the vocabulary sizes only."""
    rng = np.random.default_rng([seed, 0])
    ids = [rng.normal(0.0, ID_SIGMA, v).astype(np.float32) for v in vocab]
    num = rng.normal(0.0, NUM_SIGMA, NUM_NUMERIC).astype(np.float32)
    # numeric columns: log-normal counts with per-column location and scale
    loc = rng.uniform(0.0, 4.0, NUM_NUMERIC)
    scale = rng.uniform(0.5, 1.5, NUM_NUMERIC)
    return {"ids": ids, "num": num, "loc": loc, "scale": scale, "bias": 0.0}


def zipf_ids(rng: np.random.Generator, vocab: int, n: int) -> np.ndarray:
    """Ids in [0, vocab) with P(k) ~ 1/(k+1) (Zipf, exponent 1), by inverting its CDF."""
    u = rng.random(n)
    ids = np.floor(np.exp(u * math.log(vocab + 1.0))).astype(np.int64) - 1
    return np.minimum(ids, vocab - 1)


def sample(
    rng: np.random.Generator, model: dict, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """n rows: numeric counts, ids, labels and the true click probabilities."""
    vocab = [len(w) for w in model["ids"]]
    z = rng.normal(size=(n, NUM_NUMERIC))
    counts = np.floor(np.exp(model["loc"] + model["scale"] * z))  # heavy-tailed integer counts
    cat = np.stack([zipf_ids(rng, v, n) for v in vocab], axis=1)
    logit = model["bias"] + z @ model["num"]
    for f, w in enumerate(model["ids"]):
        logit = logit + w[cat[:, f]]
    p = 1.0 / (1.0 + np.exp(-logit))
    label = (rng.random(n) < p).astype(np.int64)
    return counts.astype(np.float32), cat, label, p


def calibrate_bias(seed: int, model: dict) -> float:
    """The bias that gives about TARGET_CTR clicks (bisection on a fixed sample)."""
    rng = np.random.default_rng([seed, 1])
    _, _, _, p0 = sample(rng, model, 20_000)
    logit0 = np.log(p0) - np.log1p(-p0)
    lo, hi = -10.0, 10.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if np.mean(1 / (1 + np.exp(-(logit0 + mid)))) < TARGET_CTR:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC by ranks (Mann-Whitney U), ties averaged."""
    labels = np.asarray(labels).astype(bool)
    _, inverse, counts = np.unique(np.asarray(scores), return_inverse=True, return_counts=True)
    first = np.cumsum(counts) - counts  # rank - 1 of each distinct score's first row
    r = (first + (counts + 1) / 2)[inverse]
    pos = int(labels.sum())
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float((r[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))


def serialize(tf, counts: np.ndarray, cat: np.ndarray, label: np.ndarray) -> list[bytes]:  # type: ignore[no-untyped-def]
    out = []
    for i in range(len(label)):
        example = tf.train.Example(
            features=tf.train.Features(
                feature={
                    "num": tf.train.Feature(float_list=tf.train.FloatList(value=counts[i])),
                    "cat": tf.train.Feature(int64_list=tf.train.Int64List(value=cat[i])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label[i]])),
                }
            )
        )
        out.append(example.SerializeToString())
    return out


def write_file(
    path: str, seed: int, stream: int, rows: int, vocab: list[int], gzip: bool
) -> dict[str, object]:
    """One file: its own random stream ([seed, 2, stream]), so the bytes do not depend on
    which process wrote it or in which order."""
    import tensorflow as tf

    model = hidden_model(seed, vocab)
    model["bias"] = calibrate_bias(seed, model)
    rng = np.random.default_rng([seed, 2, stream])
    options = tf.io.TFRecordOptions(compression_type="GZIP" if gzip else "")
    clicks = 0
    tmp = path + ".part"
    with tf.io.TFRecordWriter(tmp, options) as writer:
        for start in range(0, rows, 4096):  # in chunks: bounded memory at any size
            counts, cat, label, _ = sample(rng, model, min(4096, rows - start))
            clicks += int(label.sum())
            for record in serialize(tf, counts, cat, label):
                writer.write(record)
    os.replace(tmp, path)
    return {"file": os.path.basename(path), "rows": rows, "clicks": clicks, "bytes": os.path.getsize(path)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="directory to write (created)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="the tests' size: 24,000 rows, 8 files, ~4.5 MB")
    size.add_argument("--benchmark", action="store_true", help="24 million rows, 64 files, ~3.4 GB")
    parser.add_argument("--rows", type=int, help="training rows (all files)")
    parser.add_argument("--files", type=int, help="number of training files")
    parser.add_argument("--vocab-scale", type=float, help="vocabularies = scale x 200..4,000,000")
    parser.add_argument("--eval-rows", type=int, help="rows of the held-out eval.tfrecord")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gzip", action="store_true", help="GZIP the files (smaller, slower to read)")
    parser.add_argument("--jobs", type=int, default=1, help="files written in parallel")
    args = parser.parse_args(argv)

    rows, files, scale, eval_rows = PRESETS["benchmark" if args.benchmark else "quick"]
    rows = args.rows if args.rows is not None else rows
    files = args.files if args.files is not None else files
    scale = args.vocab_scale if args.vocab_scale is not None else scale
    eval_rows = args.eval_rows if args.eval_rows is not None else eval_rows
    for name, value in (
        ("--rows", rows),
        ("--files", files),
        ("--eval-rows", eval_rows),
        ("--jobs", args.jobs),
    ):
        if value < 1:
            parser.error(f"{name} {value}: give a positive number")
    if files > rows:
        parser.error(f"--files {files} is more than --rows {rows}: every file needs a row")
    if not 0 <= args.seed < 2**63:
        parser.error(f"--seed {args.seed}: give a number from 0 to 2**63-1")
    try:
        vocab = vocab_sizes(scale)
    except ValueError as e:
        parser.error(str(e))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = ".tfrecord.gz" if args.gzip else ".tfrecord"
    per_file = [rows // files + (1 if i < rows % files else 0) for i in range(files)]
    names = [str(out / f"train-{i:05d}-of-{files:05d}{suffix}") for i in range(files)]
    jobs = [
        (n, args.seed, i, r, vocab, args.gzip) for i, (n, r) in enumerate(zip(names, per_file, strict=True))
    ]
    jobs.append((str(out / f"eval{suffix}"), args.seed, files, eval_rows, vocab, args.gzip))
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            written = list(pool.map(write_file, *zip(*jobs, strict=True)))
    else:
        written = [write_file(*job) for job in jobs]

    # the ceiling: AUC of the true probabilities on a held-out sample of its own stream
    model = hidden_model(args.seed, vocab)
    model["bias"] = calibrate_bias(args.seed, model)
    _, _, label, p = sample(np.random.default_rng([args.seed, 3]), model, 200_000)
    manifest = {
        "attainable_auc": round(auc(label, p), 5),
        "ctr": round(float(label.mean()), 5),
        "seed": args.seed,
        "rows": rows,
        "eval_rows": eval_rows,
        "vocab_sizes": vocab,
        "total_vocab": sum(vocab),
        "compression": "GZIP" if args.gzip else "",
        "num_numeric": NUM_NUMERIC,
        "num_categorical": NUM_CATEGORICAL,
        "train_files": written[:-1],
        "eval_file": written[-1],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(int(w["bytes"]) for w in written)  # type: ignore[call-overload]
    print(
        f"wrote {rows:,} rows in {files} files + {eval_rows:,} eval rows ({total / 1e6:.1f} MB) to {out}; "
        f"vocabularies {min(vocab):,}..{max(vocab):,} ({sum(vocab):,} ids); "
        f"click rate {manifest['ctr']:.3f}; attainable AUC {manifest['attainable_auc']:.4f}",
        file=sys.stderr,
    )
    print(json.dumps({k: manifest[k] for k in ("attainable_auc", "ctr", "rows", "total_vocab")}))


if __name__ == "__main__":
    main()
