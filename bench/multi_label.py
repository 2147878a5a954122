"""Several relations a pair against one, on DuIE's pairs (model.multi_label).

DuIE's gold triples made into classification rows: each (subject, object) pair at the first
occurrence of each string, with all its predicates; the reversed pair and one unrelated pair of
the sentence's entities as pairs with none. The same rows train two CNNs on characters:

- ``lists``: the relations as a list (model.multi_label: one sigmoid per relation, thresholds
  chosen on validation);
- ``first``: each pair's first predicate alone, "无关系" for none (a softmax: the one-relation
  model every peer trains).

Both answer the validation pairs; each (pair, relation) is counted once against all the gold
predicates, on every pair and on the pairs that have two or more.

    python bench/multi_label.py [--duie ../shared/data/duie] [--epochs 10] [--out /tmp/ml]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

NONE = "无关系"


def pairs_of(row: dict, rng: random.Random) -> list[tuple[str, str, int, int, list[str]]]:
    """(head, tail, head_at, tail_at, relations) of one DuIE sentence."""
    text, gold = row["text"], {}
    for spo in row.get("spo_list") or []:
        obj = spo["object"]
        obj = obj.get("@value") if isinstance(obj, dict) else obj
        gold.setdefault((spo["subject"], obj), [])
        if spo["predicate"] not in gold[(spo["subject"], obj)]:
            gold[(spo["subject"], obj)].append(spo["predicate"])
    out = []
    for (head, tail), relations in gold.items():
        out.append((head, tail, relations))
        if (tail, head) not in gold:
            out.append((tail, head, []))
    names = sorted({n for pair in gold for n in pair})
    unrelated = [(a, b) for a in names for b in names if a != b and (a, b) not in gold
                 and (b, a) not in gold]
    if unrelated:
        a, b = rng.choice(unrelated)
        out.append((a, b, []))
    placed = []
    for head, tail, relations in out:
        h, t = text.find(head), text.find(tail)
        if head and tail and h >= 0 and t >= 0 and (h, len(head)) != (t, len(tail)):
            placed.append((head, tail, h, t, relations))
    return placed


def write(rows: list[dict], path: Path, first: bool) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            relation = row["relations"]
            relation = (relation[0] if relation else NONE) if first else relation
            f.write(json.dumps({"text": row["text"], "h": row["h"], "t": row["t"],
                                "relation": relation}, ensure_ascii=False) + "\n")


def rows_of(path: Path, rng: random.Random) -> list[dict]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for head, tail, h, t, relations in pairs_of(row, rng):
            rows.append({"text": row["text"], "h": {"name": head, "pos": [h, h + len(head)]},
                         "t": {"name": tail, "pos": [t, t + len(tail)]}, "relations": relations})
    return rows


def reltrain(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "reltrain", *args], check=True,
                   stdout=subprocess.DEVNULL)


def train_seconds(run: Path) -> float:
    return sum(json.loads(line).get("train_seconds") or 0
               for line in (run / "metrics.jsonl").read_text().splitlines())


def score(gold: list[list[str]], answered: list[list[str]], several: bool = False) -> dict:
    keep = [i for i, g in enumerate(gold) if not several or len(g) >= 2]
    g = {(i, r) for i in keep for r in gold[i]}
    a = {(i, r) for i in keep for r in answered[i]}
    right = len(g & a)
    p, r = right / max(len(a), 1), right / max(len(g), 1)
    return {"P": p, "R": r, "F1": 2 * p * r / max(p + r, 1e-12), "pairs": len(keep)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duie", default=str(Path(__file__).resolve().parents[2] / "shared/data/duie"))
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--out", default="/tmp/reltrain-multi-label")
    args = parser.parse_args()
    out, rng = Path(args.out), random.Random(0)
    out.mkdir(parents=True, exist_ok=True)
    splits = {s: rows_of(Path(args.duie) / f"{s}.json", rng) for s in ("train", "valid")}
    # a validation predicate no training pair has cannot be learnt: out of its lists (and a
    # pair that had only such predicates out of the set)
    known = {r for row in splits["train"] for r in row["relations"]}
    splits["valid"] = [{**row, "relations": [r for r in row["relations"] if r in known]}
                       for row in splits["valid"]
                       if not row["relations"] or any(r in known for r in row["relations"])]
    gold = [row["relations"] for row in splits["valid"]]
    print(f"pairs: train {len(splits['train'])}, valid {len(splits['valid'])}; valid pairs with "
          f"two or more relations {sum(len(g) >= 2 for g in gold)}")
    results = {}
    for design, first in (("lists", False), ("first", True)):
        for split, rows in splits.items():
            write(rows, out / f"{split}_{design}.jsonl", first)
        run = out / f"run_{design}"
        if not (run / "summary.json").is_file():  # a finished run of an earlier call is kept
            reltrain("train", f"data.train={out / f'train_{design}.jsonl'}",
                     f"data.valid={out / f'valid_{design}.jsonl'}", "data.language=zh",
                     "data.tokenizer=char", "model.name=cnn", f"train.epochs={args.epochs}",
                     "log.progress=false", "log.tensorboard=false", f"output_dir={run}")
        seconds = train_seconds(run)
        answers = out / f"answers_{design}.jsonl"
        reltrain("predict", str(run), str(out / "valid_lists.jsonl"), "--output", str(answers))
        rows = [json.loads(line) for line in answers.read_text(encoding="utf-8").splitlines()]
        answered = [[a["relation"] for a in row["relations"]] if "relations" in row
                    else [row["relation"]] if row["relation"] != NONE else [] for row in rows]
        results[design] = {"seconds": seconds, "all": score(gold, answered),
                           "several": score(gold, answered, several=True)}
    print(f"{'':28}{'lists (sigmoids)':>20}{'first (softmax)':>20}")
    for part, name in (("all", "every pair"), ("several", "pairs of 2+ relations")):
        for k in ("P", "R", "F1"):
            print(f"{name + ' ' + k:28}" + "".join(f"{results[d][part][k]:>20.4f}"
                                                   for d in ("lists", "first")))
    print(f"{'training seconds':28}" + "".join(f"{results[d]['seconds']:>20.1f}"
                                               for d in ("lists", "first")))
    json.dump(results, open(out / "results.json", "w"), indent=1)


if __name__ == "__main__":
    main()
