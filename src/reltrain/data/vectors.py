"""Pretrained word vectors (word2vec / GloVe text, or binary word2vec) matched to a vocabulary."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from reltrain.data.vocab import Vocab
from reltrain.runtime.errors import DataError

log = logging.getLogger(__name__)


def load_word_vectors(path: str | Path, vocab: Vocab, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(V, dim) vectors for the vocabulary and a (V,) mask of the rows found (as written, then
    lower-cased); ``.bin`` is binary word2vec, anything else text, with or without a header."""
    path = Path(path)
    wanted = {tok: i for i, tok in enumerate(vocab.tokens) if i > 1}  # not <pad>, <unk>
    lower: dict[str, list[int]] = {}
    for tok, i in wanted.items():
        lower.setdefault(tok.lower(), []).append(i)
    vectors = np.zeros((len(vocab), dim), dtype=np.float32)
    found = np.zeros(len(vocab), dtype=bool)
    exact = np.zeros(len(vocab), dtype=bool)
    for word, vec in (_read_binary(path, dim) if path.suffix == ".bin" else _read_text(path, dim)):
        if word in wanted:
            i = wanted[word]
            vectors[i], found[i], exact[i] = vec, True, True
        for i in lower.get(word.lower(), ()):
            if not exact[i]:
                vectors[i], found[i] = vec, True
    return vectors, found


def _read_text(path: Path, dim: int):
    with open(path, encoding="utf-8", errors="strict") as f:
        for number, line in enumerate(f, start=1):
            parts = line.rstrip("\n").rstrip().split(" ")
            if number == 1 and len(parts) == 2 and all(p.isdigit() for p in parts):
                _check_dim(path, 1, int(parts[1]), dim)
                continue
            if len(parts) < 2:
                continue
            _check_dim(path, number, len(parts) - 1, dim)
            try:
                yield parts[0], np.asarray(parts[1:], dtype=np.float32)
            except ValueError:
                raise DataError(str(path), number, None, "expected a word and numbers") from None


def _read_binary(path: Path, dim: int):
    with open(path, "rb") as f:
        header = f.readline().split()
        if len(header) != 2 or not all(h.isdigit() for h in header):
            raise DataError(str(path), 1, None, "expected a binary word2vec header 'N D'")
        count, size = int(header[0]), int(header[1])
        _check_dim(path, 1, size, dim)
        for _ in range(count):
            word = bytearray()
            while (ch := f.read(1)) not in (b" ", b""):
                if ch != b"\n":
                    word += ch
            data = f.read(4 * size)
            if len(data) < 4 * size:
                raise DataError(str(path), None, None, "truncated binary word2vec file")
            yield word.decode("utf-8", errors="replace"), np.frombuffer(data, dtype=np.float32)


def _check_dim(path: Path, line: int, found: int, dim: int) -> None:
    if found != dim:
        raise DataError(str(path), line, None,
                        f"vectors have {found} dimensions but model.word_dim is {dim}; set "
                        f"model.word_dim={found}")
