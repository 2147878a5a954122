"""Tokenizers with character offsets, entity token spans and the window around the entities. Each
piece between entity boundaries is tokenized alone, so a token never straddles an entity edge."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Callable

from reltrain.data.schema import Record
from reltrain.data.segment import jieba_words

Piece = tuple[str, int, int]  # token, start char, end char (exclusive)

_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s")  # str.isspace's characters
# English words as treebanks (CoNLL04's, the Penn Treebank's) cut them, so that raw text meets a
# span model in the units it was trained on: initialisms (U.S.), hyphenated words (Bin-Nun),
# numbers (1,000, 5.5, $5) and abbreviations (Calif. , Dr.: a period not ending the text) stay
# whole; 's, 'Brien and n't begin tokens of their own. Cut at _WORD's points, CoNLL04's
# validation sentences lost 7 points of entities F1 and 17 of strict relations (docs/extraction.md).
# NLTK's TreebankWordTokenizer cuts much the same, but importing nltk takes a second (scipy).
_TREEBANK = re.compile(r"""(?:[^\W\d_]\.){2,}
    | \w+?(?=n['’]t\b) | n['’]t\b | ['’]\w+
    | (?:\$(?=\d))? \w+ (?:(?:[-./]|(?<=\d),(?=\d))\w+)* (?:\.(?!\.)(?!\W*$))?
    | \.\.\. | -- | [^\w\s]""", re.UNICODE | re.VERBOSE)


@dataclass(frozen=True)
class Tokenized:
    tokens: list[str]
    head: tuple[int, int]  # token span, end exclusive
    tail: tuple[int, int]
    truncated: bool = False


# Each gives the pieces of ``text``, offsets counted from ``at``, where it starts in its sentence.

def _matches(pattern: re.Pattern, text: str, at: int = 0) -> list[Piece]:
    return [(m.group(), at + m.start(), at + m.end()) for m in pattern.finditer(text)]


def _char_pieces(text: str, at: int = 0) -> list[Piece]:
    if not _SPACE.search(text):  # most Chinese text: every character is one (built in C)
        return list(zip(text, range(at, at + len(text)), range(at + 1, at + len(text) + 1)))
    return [(c, at + i, at + i + 1) for i, c in enumerate(text) if not c.isspace()]


def _jieba_pieces(text: str, at: int = 0) -> list[Piece]:
    out = []
    for word in jieba_words(text):  # the words cover the text, in order
        end = at + len(word)
        if word.strip():
            out.append((word, at, end))
        at = end
    return out


_KINDS: dict[str, Callable[[str, int], list[Piece]]] = {
    "word": partial(_matches, _WORD), "treebank": partial(_matches, _TREEBANK),
    "char": _char_pieces, "jieba": _jieba_pieces,
}


class Tokenizer:
    """Splits sentences into tokens; ``kind`` is word, treebank, char or jieba."""

    def __init__(self, kind: str, lowercase: bool = False):
        self.kind, self.lowercase = kind, lowercase
        self._pieces = _KINDS[kind]

    @classmethod
    def from_config(cls, data_cfg) -> "Tokenizer":
        kind = data_cfg.tokenizer
        if kind == "auto":
            kind = "jieba" if data_cfg.language == "zh" else "word"
        return cls(kind, lowercase=data_cfg.lowercase and data_cfg.language == "en")

    def pieces(self, text: str, cuts: set[int]) -> list[Piece]:
        """Tokens of ``text``, never crossing a character position in ``cuts``."""
        return self._cut_pieces(text, cuts)[0]

    def _cut_pieces(self, text: str, cuts: set[int]) -> tuple[list[Piece], dict[int, int]]:
        """``pieces`` and, for each cut, the index of the first token at or after it."""
        bounds = sorted({0, len(text), *cuts})
        out: list[Piece] = []
        first: dict[int, int] = {}
        for a, b in zip(bounds, bounds[1:]):
            first[a] = len(out)
            out += self._pieces(text[a:b], a)
        first[bounds[-1]] = len(out)
        return out, first

    def __call__(self, record: Record, max_len: int) -> Tokenized:
        h, t = record.head, record.tail
        if record.tokens is not None:  # pre-tokenised: keep the user's tokens
            pieces, pos = [], 0
            for tok in record.tokens:
                pieces.append((tok, pos, pos + len(tok)))
                pos += len(tok) + 1
            head = _token_span(pieces, h.start, h.end)
            tail = _token_span(pieces, t.start, t.end)
        else:
            # Cut at the entity edges, the tokens of an entity are those from its start's
            # first token to its end's.
            pieces, first = self._cut_pieces(record.text, {h.start, h.end, t.start, t.end})
            head, tail = (first[h.start], first[h.end]), (first[t.start], first[t.end])
            # Readers reject blank entities, so each has a token.
            assert head[0] < head[1] and tail[0] < tail[1], f"an entity of {record.text!r} has no token"
        tokens = [p[0].lower() for p in pieces] if self.lowercase else [p[0] for p in pieces]
        return truncate(tokens, head, tail, max_len)


def _token_span(pieces: list[Piece], start: int, end: int) -> tuple[int, int]:
    inside = [i for i, (_, s, e) in enumerate(pieces) if s >= start and e <= end]
    # Readers reject blank entities, and cuts at entity edges keep every piece inside or outside.
    assert inside, f"entity {start}..{end} has no token"
    return inside[0], inside[-1] + 1


def truncate(tokens: list[str], head: tuple[int, int], tail: tuple[int, int],
             max_len: int) -> Tokenized:
    """Keep at most ``max_len`` tokens, centred on the entities and never cutting one (two entities
    that alone span more are kept whole)."""
    if len(tokens) <= max_len:
        return Tokenized(tokens, head, tail)
    lo, hi = min(head[0], tail[0]), max(head[1], tail[1])
    if hi - lo >= max_len:
        start, stop = lo, hi
    else:
        start = max(0, lo - (max_len - (hi - lo)) // 2)
        start = min(start, len(tokens) - max_len)
        stop = start + max_len
    shift = lambda span: (span[0] - start, span[1] - start)  # noqa: E731
    return Tokenized(tokens[start:stop], shift(head), shift(tail), truncated=True)
