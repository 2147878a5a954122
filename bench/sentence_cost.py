"""What cutting a text into sentences costs (data/sentences.py, sentencex): a short English
paragraph, each text of a SpERT file (CoNLL04's; most are one sentence and never reach
sentencex), and Chinese text with a sentence mark every five characters at the lengths a row may
reach, where sentencex's time grows with the square of the sentences.

    python bench/sentence_cost.py --spert ../shared/data/conll04/train.json

One thread; each figure the best of ``--rounds`` passes.
"""

from __future__ import annotations

import argparse
import json
import time

from reltrain.data.sentences import ENDS, sentence_starts

PARAGRAPH = ("John Smith works for the U.S. Army in Los Angeles. He was born in Jerusalem. Mary "
             "Lee met him at the U.N. on Monday. They talked for an hour about Calif. politics. "
             "Then he left.")


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spert", help="a SpERT JSON file whose texts (tokens joined) to cut")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sentence_starts(PARAGRAPH, "en")  # sentencex imported
    n = 5000
    texts = [f"{PARAGRAPH} {i}" for i in range(n)]  # new strings: nothing cached
    t = best(lambda: [sentence_starts(x, "en") for x in texts], args.rounds)
    print(f"English paragraph of {len(PARAGRAPH)} characters, {len(sentence_starts(PARAGRAPH, 'en')) + 1}"
          f" sentences: {t / n * 1e6:.1f} us")
    if args.spert:
        with open(args.spert, encoding="utf-8") as f:
            texts = [" ".join(row["tokens"]) for row in json.load(f)]
        asked = sum(bool(ENDS.search(x, 0, len(x.rstrip()) - 1)) for x in texts)
        t = best(lambda: [sentence_starts(x, "en") for x in texts], args.rounds)
        print(f"{args.spert}: {len(texts)} texts, {asked} handed to sentencex: "
              f"{t / len(texts) * 1e6:.1f} us a text, {t / max(asked, 1) * 1e6:.1f} us a text handed on")
    for length in (5000, 10000, 20000):
        text = ("我爱北京。" * length)[:length]
        t = best(lambda: sentence_starts(text, "zh"), max(1, args.rounds // 2))
        print(f"Chinese, a mark every 5 characters, {length:,} characters: {t * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
