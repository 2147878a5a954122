"""Where the sentences of a text begin, by sentencex's rules for its language ("Mr." and "U.S."
end none): an extraction model trained on sentences answers each sentence of a text alone
(``extract.sentences``, inference/windows.py)."""

from __future__ import annotations

import re
from bisect import bisect_right

from reltrain.data.schema import Annotated

# A text without one of these before its last character is one sentence (a regular expression:
# a ninth of the time of a loop over the characters, on DuIE's texts).
ENDS = re.compile("[.!?。！？…]")
CROSSING_SHARE = 0.05  # extract.sentences=auto splits where at most this share of relations cross


def sentence_starts(text: str, language: str) -> list[int]:
    """The first character of each sentence after the first (none where the text is one).
    sentencex is asked only where a sentence could end before the text does: most texts are
    one sentence. Its cost grows with the square of a text's sentences (a mark every five
    characters: 6 / 26 / 99 ms at 5,000 / 10,000 / 20,000 characters, sentencex 1.0.32,
    bench/sentence_cost.py), bounded by the longest text a row may hold; a 177-character
    English paragraph, 4 us."""
    end = len(text.rstrip())
    if not ENDS.search(text, 0, end - 1):
        return []
    import sentencex

    starts, at = [], 0
    for part in sentencex.segment(language, text):
        at += len(part)
        starts.append(at)
    return [s for s in starts[:-1] if s < end]  # not the white space after the last


def resolve_sentences(setting: str, train: list[Annotated], language: str) -> str:
    """``auto``: split unless more than ``CROSSING_SHARE`` of the training relations hold
    between two sentences of a text (CoNLL04's and DuIE's examples are one sentence each)."""
    if setting != "auto":
        return setting
    crossing = total = 0
    for s in train:
        starts = sentence_starts(s.text, language) if s.relations else []
        total += len(s.relations)
        if starts:
            where = [bisect_right(starts, e.start) for e in s.entities]
            crossing += sum(where[r.head] != where[r.tail] for r in s.relations)
    return "split" if crossing <= CROSSING_SHARE * total else "whole"
