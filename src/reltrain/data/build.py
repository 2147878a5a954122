"""A cache entry built as a stream: rows are read here and parsed and tokenized a chunk at a time
in worker processes, and every array goes to disk as it grows, so no process holds the corpus.
Word tokens travel as 64-bit hashes of their text until the vocabulary is known (16 bytes per
distinct token here); a second pass over the arrays on disk turns them into ids."""

from __future__ import annotations

import hashlib
from contextlib import closing
from dataclasses import dataclass
from functools import partial
from itertools import chain, islice
from pathlib import Path

import numpy as np

from reltrain.runtime import children
from reltrain.data.readers import iter_rows, parse_row
from reltrain.data.schema import relation_names
from reltrain.data.vocab import PAD, UNK, Vocab
from reltrain.runtime.errors import DataError
from reltrain.data.lm import LMTokenizer
from reltrain.data.tokenize import Tokenizer

CHUNK_ROWS = 4096  # rows a worker takes at a time: its first chunk also holds the sample checked


@dataclass
class Spec:
    """What a worker builds its tokenizer from: the data options, or a pretrained model's folder
    with its marker types and added characters (then tokens are already ids)."""

    data_cfg: object
    lm_folder: str = ""
    lm_types: list | None = None
    lm_added: list | None = None

    @property
    def words(self) -> bool:
        return not self.lm_folder


def _setup(spec: Spec):
    """A worker's tokenizer, which it keeps and passes to each ``_encode_chunk``."""
    if spec.words:
        return Tokenizer.from_config(spec.data_cfg)

    tokenize = LMTokenizer.from_folder(spec.lm_folder, spec.lm_types)
    tokenize.add_chars(spec.lm_added or [])
    return tokenize


def token_hash(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little",
                          signed=True)


def _encode_chunk(tokenize, job: tuple) -> dict:
    """Parse and tokenize one chunk of rows; a bad row is raised, or listed with ``skip``."""
    path, rows, labels, max_len, words, skip, sample = job
    known = set(labels) if labels is not None else None
    out = {"lengths": [], "spans": [], "relations": [], "skipped": [], "truncated": 0, "text": []}
    tokens: list = []
    for line, build in rows:
        record = parse_row(build, known, labels, path, line)
        if isinstance(record, DataError):
            if not skip:
                raise record
            out["skipped"].append(str(record))
            continue
        tok = tokenize(record, max_len)
        tokens.extend(tok.tokens)
        out["lengths"].append(len(tok.tokens))
        out["spans"].append((*tok.head, *tok.tail))
        out["relations"].append(record.relation)
        out["truncated"] += tok.truncated
        if sample and len(out["text"]) < 2000:
            out["text"].append(record.text)
    if not words:
        out["tokens"] = np.asarray(tokens, dtype=np.int64)
        return out
    unique: dict[str, int] = {}
    index = np.fromiter((unique.setdefault(t, len(unique)) for t in tokens), np.int64, len(tokens))
    texts = list(unique)
    hashes = np.fromiter((token_hash(t) for t in texts), np.int64, len(texts))
    out["tokens"] = hashes[index]
    out["counts"] = np.bincount(index, minlength=len(texts))
    out["hashes"], out["texts"] = hashes, texts
    return out


class TokenCounts:
    """How often each training token occurs, by hash, in two sorted arrays; a token's text is
    kept once it is frequent enough to enter the vocabulary."""

    def __init__(self, min_freq: int):
        self.min_freq = min_freq
        self.hashes = np.empty(0, np.int64)
        self.counts = np.empty(0, np.int64)
        self.texts: dict[int, str] = {}

    def add(self, hashes: np.ndarray, counts: np.ndarray, texts: list[str]) -> None:
        order = np.argsort(hashes)
        hashes, counts = hashes[order], counts[order]
        at = np.searchsorted(self.hashes, hashes)
        found = at < len(self.hashes)
        found[found] = self.hashes[at[found]] == hashes[found]
        self.counts[at[found]] += counts[found]
        self.hashes = np.insert(self.hashes, at[~found], hashes[~found])
        self.counts = np.insert(self.counts, at[~found], counts[~found])
        totals = self.counts[np.searchsorted(self.hashes, hashes)]
        for i in np.flatnonzero(totals >= self.min_freq):
            self.texts.setdefault(int(hashes[i]), texts[order[i]])

    def vocab(self, max_vocab: int) -> tuple[Vocab, np.ndarray, np.ndarray]:
        """The vocabulary (by frequency, then text; ``max_vocab`` > 0 caps it) and its sorted
        hashes with their ids."""
        frequent = self.counts >= self.min_freq
        kept = sorted(zip(self.counts[frequent].tolist(), self.hashes[frequent].tolist()),
                      key=lambda ch: (-ch[0], self.texts[ch[1]]))
        if max_vocab:
            kept = kept[:max_vocab]
        hashes = np.asarray([h for _, h in kept], dtype=np.int64)
        ids = np.arange(2, 2 + len(kept), dtype=np.int32)
        order = np.argsort(hashes)
        return Vocab([PAD, UNK, *(self.texts[h] for _, h in kept)]), hashes[order], ids[order]


class _Appender:
    """A growing array kept in a raw file, then written out as ``.npy`` a block at a time."""

    def __init__(self, path: Path, dtype, width: int = 1):
        self.path, self.dtype, self.width, self.rows = path, np.dtype(dtype), width, 0
        self.file = open(path.with_suffix(".raw"), "wb")

    def add(self, values) -> None:
        array = np.asarray(values, dtype=self.dtype).reshape(-1, self.width)
        self.file.write(array.tobytes())
        self.rows += len(array)

    def finish(self, mapping=None, dtype=None) -> None:
        """Write the ``.npy`` (each block through ``mapping`` when given); drop the raw file."""
        self.file.close()
        raw = self.path.with_suffix(".raw")
        shape = (self.rows,) if self.width == 1 else (self.rows, self.width)
        out = np.lib.format.open_memmap(self.path, mode="w+", dtype=dtype or self.dtype,
                                        shape=shape)
        if self.rows:
            source = np.memmap(raw, dtype=self.dtype, mode="r", shape=shape)
            for start in range(0, self.rows, 1 << 20):
                block = source[start:start + (1 << 20)]
                out[start:start + len(block)] = block if mapping is None else mapping(block)
            del source
        out.flush()
        del out
        raw.unlink()


def write_splits(files: dict[str, str], folder: Path, spec: Spec, labels: list[str] | None,
                 workers: int, progress: bool, check_texts=None,
                 check_relations=None) -> tuple[list[str], Vocab | None, dict]:
    """Tokenize ``files`` (split name -> path, training first) into ``folder/<split>/*.npy``;
    ``labels`` None: the training relations, sorted. ``check_texts`` sees the first training
    texts, ``check_relations`` every training relation. Returns labels, vocabulary and meta."""
    cfg = spec.data_cfg
    counts = TokenCounts(cfg.min_freq) if spec.words else None
    meta: dict = {"skipped": {}, "truncated": {}, "rows": {}}
    written, listed = {}, False
    for name, path in files.items():
        training = name == "train"
        (folder / name).mkdir()
        out, relations, split_meta, split_listed = _write_split(
            path, folder / name, spec, labels, workers, progress, desc=f"tokenize {name}",
            counts=counts if training else None, check_texts=check_texts if training else None)
        if training:
            if check_relations is not None:
                check_relations(set(relations))
            labels = labels if labels is not None else sorted(relations)
        index = {label: i for i, label in enumerate(labels)}
        written[name] = (out, [index[r] for r in relations], split_meta["rows"])
        listed = listed or split_listed
        for key, value in split_meta.items():
            meta[key][name] = value
    vocab = lookup = None
    if counts is not None:
        vocab, hashes, ids = counts.vocab(cfg.max_vocab)
        lookup = _hash_lookup(hashes, ids)
    for name, (out, label_ids, rows) in written.items():
        _finish_split(folder / name, out, label_ids, lookup, rows, len(labels) if listed else 0)
    meta["multi_label"] = listed
    return labels, vocab, meta


def _write_split(path: str, folder: Path, spec: Spec, labels, workers: int, progress: bool,
                 desc: str, counts: TokenCounts | None, check_texts) -> tuple[dict, list, dict, bool]:
    """One file's rows appended to raw arrays; returns them, its relations in the order they
    first appear (the numbers ``relations.npy`` holds, each beside its row), its meta data and
    whether a row gave a list of relations."""
    out = {"tokens": _Appender(folder / "token_ids.npy", np.int64),
           "lengths": _Appender(folder / "lengths.npy", np.int64),
           "spans": _Appender(folder / "spans.npy", np.int32, 4),
           "relations": _Appender(folder / "relations.npy", np.int64, 2)}
    relations: dict = {}
    listed = False
    meta = {"skipped": [], "truncated": 0, "rows": 0}
    jobs = _jobs(path, labels, spec.data_cfg, spec.words)
    with closing(_encoded(spec, jobs, workers, progress, desc)) as chunks:
        for number, chunk in enumerate(chunks):
            if number == 0 and check_texts is not None:
                check_texts(chunk["text"])
            if counts is not None:
                counts.add(chunk["hashes"], chunk["counts"], chunk["texts"])
            for key in ("tokens", "lengths", "spans"):
                out[key].add(chunk[key])
            first = meta["rows"]
            listed = listed or any(isinstance(r, tuple) for r in chunk["relations"])
            out["relations"].add([(first + k, relations.setdefault(name, len(relations)))
                                  for k, r in enumerate(chunk["relations"])
                                  for name in relation_names(r)])
            meta["rows"] += len(chunk["lengths"])
            meta["truncated"] += chunk["truncated"]
            meta["skipped"] += chunk["skipped"]
    if not meta["rows"]:
        skipped = meta["skipped"]
        raise DataError(path, None, None, "no usable rows" +
                        (f" ({len(skipped)} skipped)" if skipped else ""))
    return out, list(relations), meta, listed


def _hash_lookup(hashes: np.ndarray, ids: np.ndarray):
    def to_ids(block: np.ndarray) -> np.ndarray:
        if not len(hashes):
            return np.ones(len(block), dtype=np.int32)
        at = np.minimum(np.searchsorted(hashes, block), len(hashes) - 1)
        return np.where(hashes[at] == block, ids[at], 1).astype(np.int32)  # 1: <unk>
    return to_ids


def _finish_split(folder: Path, out: dict, final_labels: list[int], lookup, rows: int,
                  multi: int) -> None:
    """The split's arrays as ``Split`` reads them (token ids, offsets, spans, labels: each row's
    label, -1 for none; with ``multi`` labels, a row of that many 0/1, one per label)."""
    out["tokens"].finish(lookup, np.int32)
    for key in ("lengths", "spans", "relations"):
        out[key].finish()
    lengths = np.load(folder / "lengths.npy")
    np.save(folder / "offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    spans = np.load(folder / "spans.npy")
    np.save(folder / "head.npy", np.ascontiguousarray(spans[:, :2]))
    np.save(folder / "tail.npy", np.ascontiguousarray(spans[:, 2:]))
    pairs = np.load(folder / "relations.npy").reshape(-1, 2)  # (row, relation as first seen)
    mapping = np.asarray(final_labels, dtype=np.int64)
    if multi:
        labels = np.zeros((rows, multi), dtype=np.uint8)
        labels[pairs[:, 0], mapping[pairs[:, 1]]] = 1
    else:
        labels = np.full(rows, -1, dtype=np.int64)
        labels[pairs[:, 0]] = mapping[pairs[:, 1]]
    np.save(folder / "labels.npy", labels)
    for name in ("lengths.npy", "spans.npy", "relations.npy"):
        (folder / name).unlink()


def _jobs(path: str, labels, cfg, words: bool):
    rows = iter_rows(path, encoding=cfg.encoding)
    first = True
    while chunk := list(islice(rows, CHUNK_ROWS)):
        yield (path, chunk, labels, cfg.max_len, words, cfg.skip_bad_rows, first)
        first = False


def _encoded(spec: Spec, jobs, workers: int, progress: bool, desc: str):
    """Each job's ``_encode_chunk`` result in order: in ``workers`` processes when there is more
    than one chunk, else in this one."""
    from tqdm.auto import tqdm

    first = list(islice(jobs, 2))
    jobs = chain(first, jobs)
    if len(first) < 2 or workers <= 1:
        results = map(partial(_encode_chunk, _setup(spec)), jobs)
    else:
        results = children.ordered_map(_encode_chunk, jobs, workers, _setup, (spec,))
    try:
        with tqdm(desc=desc, disable=not progress, unit="sent", leave=False) as bar:
            for result in results:
                bar.update(len(result["lengths"]) + len(result["skipped"]))
                yield result
    finally:
        if hasattr(results, "close"):
            results.close()  # the workers end now, not when the error's traceback is gone
