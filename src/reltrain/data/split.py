"""``Split``: one split of examples as flat arrays (what the cache stores and the datasets read),
and ``encode_records``, which makes one from records."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from reltrain.data.schema import Record, relation_names
from reltrain.runtime.errors import UserError

SPLIT_ARRAYS = {"token_ids": np.int32, "offsets": np.int64, "head": np.int32, "tail": np.int32,
                "labels": np.int64}


@dataclass
class Split:
    """One split as flat arrays: tokens of example i are ``token_ids[offsets[i]:offsets[i+1]]``."""

    token_ids: np.ndarray  # (T,) int32
    offsets: np.ndarray  # (N+1,) int64
    head: np.ndarray  # (N, 2) int32 token span, end exclusive
    tail: np.ndarray  # (N, 2) int32
    labels: np.ndarray  # (N,) int64, -1 where the input had no relation; or (N, C) uint8, one
    # 0/1 per label (model.multi_label: a row may have several relations, or none)
    folder: Path | None = None  # the cache folder its arrays are mapped from

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def load(cls, folder: Path, mapped: bool = True) -> "Split":
        """The split's arrays, mapped from the files (read in place, shared by every process that
        maps them) or read into memory; shapes and types that do not fit are a ValueError."""
        arrays = {k: np.load(folder / f"{k}.npy", mmap_mode="r" if mapped else None,
                             allow_pickle=False) for k in SPLIT_ARRAYS}
        n, labels = len(arrays["labels"]), arrays["labels"]
        multi = labels.ndim == 2 and labels.dtype == np.uint8
        fits = (arrays["offsets"].shape == (n + 1,) and arrays["head"].shape == (n, 2)
                and arrays["tail"].shape == (n, 2) and arrays["token_ids"].ndim == 1
                and n > 0 and int(arrays["offsets"][-1]) == len(arrays["token_ids"])
                and (multi or labels.ndim == 1)
                and all(arrays[k].dtype == t for k, t in SPLIT_ARRAYS.items()
                        if not (k == "labels" and multi)))
        if not fits:
            raise ValueError(f"{folder}: the arrays do not fit together")
        return cls(**arrays, folder=folder if mapped else None)

    def __reduce__(self):  # to a DataLoader worker: mapped arrays go by their folder, not a copy
        if self.folder is not None:
            return Split.load, (self.folder,)
        return Split, (self.token_ids, self.offsets, self.head, self.tail, self.labels)

    @property
    def multi_label(self) -> bool:
        return self.labels.ndim == 2

    def with_labels(self, multi: bool, num_labels: int, negative: int | None,
                    where: str) -> "Split":
        """The split with one label a row (``multi`` False) or a 0/1 row per label; a row of
        several relations has no single label (a UserError naming ``where``), one of none has
        the negative label's."""
        if multi == self.multi_label:
            return self
        if multi:
            labels = np.zeros((len(self), num_labels), dtype=np.uint8)
            known = np.flatnonzero(self.labels >= 0)
            labels[known, self.labels[known]] = 1
        else:
            counts = self.labels.sum(axis=1, dtype=np.int64)
            several = np.flatnonzero(counts > 1)
            if several.size or (negative is None and (counts == 0).any()):
                row = int(several[0] if several.size else np.flatnonzero(counts == 0)[0])
                raise UserError(f"{where}: example {row + 1} has "
                                f"{'several relations' if several.size else 'no relation'} and "
                                f"model.multi_label=false gives each pair exactly one")
            labels = np.where(counts == 1, self.labels.argmax(axis=1), negative or 0)
        return replace(self, labels=labels.astype(np.uint8 if multi else np.int64), folder=None)


def encode_records(records: list[Record], tokenize, to_ids, label_index: dict[str, int],
                   max_len: int, multi: bool = False, strict: bool = True,
                   negative: int | None = None) -> tuple[Split, list[list]]:
    """Tokenize and index records, with each one's tokens; ``to_ids`` None: ids later, once a
    vocabulary exists; ``multi``: labels as one 0/1 row per label (a list of relations).
    ``strict``: a list a model of one relation cannot score is an error (scoring), else no
    label (prediction only echoes it); an empty list is the ``negative`` label, as in training."""
    tokenized = [tokenize(rec, max_len) for rec in records]
    all_tokens = [tok.tokens for tok in tokenized]
    lengths = np.array([len(t) for t in all_tokens], dtype=np.int64)
    ids = [] if to_ids is None else [i for toks in all_tokens for i in to_ids(toks)]
    split = Split(
        token_ids=np.asarray(ids, dtype=np.int32),
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        head=np.asarray([tok.head for tok in tokenized], dtype=np.int32).reshape(-1, 2),
        tail=np.asarray([tok.tail for tok in tokenized], dtype=np.int32).reshape(-1, 2),
        labels=_labels(records, label_index, multi, strict, negative),
    )
    return split, all_tokens


def _labels(records: list[Record], label_index: dict[str, int], multi: bool,
            strict: bool, negative: int | None) -> np.ndarray:
    if multi:
        labels = np.zeros((len(records), len(label_index)), dtype=np.uint8)
        for i, rec in enumerate(records):
            labels[i, [label_index[n] for n in relation_names(rec.relation) if n in label_index]] = 1
        return labels
    out = np.full(len(records), -1, dtype=np.int64)
    for i, rec in enumerate(records):
        names = relation_names(rec.relation)
        if rec.relation is not None and not names and negative is not None:
            out[i] = negative  # an empty list, as Split.with_labels reads it
            continue
        if rec.relation is not None and len(names) != 1 and strict:
            raise UserError(f"{rec.source}: relation: {len(names)} relations, but this model "
                            f"gives each pair one (it was trained with model.multi_label=false)")
        out[i] = label_index.get(names[0], -1) if len(names) == 1 else -1
    return out
