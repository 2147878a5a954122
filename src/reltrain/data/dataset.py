"""Dataset, batches and samplers: a batch is a few vectorised numpy operations on the flat arrays
of a ``Split``, no per-sample Python work in the training loop (B batch, L longest sentence)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Iterator

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from reltrain.data.split import Split


@dataclass
class Batch:
    word: torch.Tensor  # (B, L) token ids, 0 = padding
    pos_head: torch.Tensor  # (B, L) clipped position relative to the head, shifted to >= 1
    pos_tail: torch.Tensor  # (B, L)
    segment: torch.Tensor  # (B, L) PCNN piece 1..3, 0 = padding
    mask: torch.Tensor  # (B, L) True on real tokens
    head: torch.Tensor  # (B, 2) token span of the head (for LMs: its markers), end exclusive
    tail: torch.Tensor  # (B, 2)
    label: torch.Tensor  # (B,) -1 where unknown
    index: torch.Tensor  # (B,) position of each example in its split

    def inputs(self) -> dict[str, torch.Tensor]:
        """What the model's forward takes (keyword tensors, so DataParallel can scatter them)."""
        return {"word": self.word, "pos_head": self.pos_head, "pos_tail": self.pos_tail,
                "segment": self.segment, "mask": self.mask, "head": self.head, "tail": self.tail}

    def to(self, device, non_blocking: bool = False) -> "Batch":
        return Batch(**{f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
                        for f in fields(self)})

    def pin_memory(self) -> "Batch":  # called by DataLoader(pin_memory=True)
        return Batch(**{f.name: getattr(self, f.name).pin_memory() for f in fields(self)})

    def __len__(self) -> int:
        return len(self.label)


def _relative(ar: np.ndarray, span: np.ndarray, limit: int) -> np.ndarray:
    start, end = span[:, :1], span[:, 1:]
    rel = np.where(ar < start, ar - start, np.where(ar >= end, ar - end + 1, 0))
    return np.clip(rel, -limit, limit) + limit + 1


class RelationDataset(Dataset):
    """Examples of one split; ``__getitems__`` returns a whole padded ``Batch``."""

    def __init__(self, split: Split, pos_limit: int, pad_id: int = 0):
        self.split, self.pos_limit, self.pad_id = split, pos_limit, pad_id
        self.lengths = split.lengths

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int) -> Batch:
        return self.__getitems__([i])

    def __getitems__(self, indices) -> Batch | Step:
        if isinstance(indices, StepIndices):
            return Step([self.batch(m) for m in indices.micro],
                        torch.from_numpy(self.split.labels[np.asarray(indices.global_index)]),
                        indices.dummy)
        return self.batch(indices)

    def batch(self, indices) -> Batch:
        s = self.split
        idx = np.asarray(indices, dtype=np.int64)
        starts, lens = s.offsets[idx], self.lengths[idx]
        ar = np.arange(max(int(lens.max()), 1))[None, :]  # (1, L)
        mask = ar < lens[:, None]  # (B, L)
        word = np.where(mask, s.token_ids[np.where(mask, starts[:, None] + ar, 0)], self.pad_id)
        head, tail = s.head[idx], s.tail[idx]
        ends = np.stack([head[:, 1], tail[:, 1]], axis=1)  # (B, 2)
        # PCNN pieces end where the entities end, so each entity lies inside pieces 1-2 even when
        # the two overlap or nest; a piece may be empty and the model handles that.
        segment = 1 + (ar >= ends.min(1, keepdims=True)) + (ar >= ends.max(1, keepdims=True))
        as_tensor = lambda a: torch.from_numpy(np.where(mask, a, 0).astype(np.int64))  # noqa: E731
        return Batch(word=torch.from_numpy(word.astype(np.int64)),
                     pos_head=as_tensor(_relative(ar, head, self.pos_limit)),
                     pos_tail=as_tensor(_relative(ar, tail, self.pos_limit)),
                     segment=as_tensor(segment),
                     mask=torch.from_numpy(mask),
                     head=torch.from_numpy(head.astype(np.int64)),
                     tail=torch.from_numpy(tail.astype(np.int64)),
                     label=torch.from_numpy(s.labels[idx]),
                     index=torch.from_numpy(idx))


def collate_batch(batch):
    """The dataset already returns a whole batch (or step); a named function so workers can
    pickle it."""
    return batch


@dataclass
class StepIndices:
    """This rank's part of one optimizer step, as the sampler plans it."""

    micro: list[list[int]]  # this rank's micro-batches, in order
    global_index: list[int]  # every example of the step (on every rank alike)
    dummy: bool = False  # no example of the step is this rank's: one stand-in, weighted 0


@dataclass
class Step:
    """One optimizer step's data on this rank: its micro-batches and the global batch's labels
    (for the loss normaliser, which every rank computes alike without a collective)."""

    batches: list[Batch]
    global_labels: torch.Tensor  # (G,) labels of the whole global batch
    dummy: bool = False

    @property
    def global_size(self) -> int:
        return len(self.global_labels)

    @property
    def num_examples(self) -> int:
        """Examples this rank trains on in the step (a stand-in does not count)."""
        return 0 if self.dummy else sum(len(b) for b in self.batches)

    def pin_memory(self) -> "Step":  # called by DataLoader(pin_memory=True)
        return Step([b.pin_memory() for b in self.batches], self.global_labels, self.dummy)


class TrainBatchSampler(Sampler[StepIndices]):
    """This rank's steps of an epoch: one permutation (``seed + epoch``) cut into global batches of
    ``world_size * batch_size * accum_steps``, each rank taking an interleaved share, so any W, B, A
    with the same product train alike and a step count is one position for any W. A rank short of
    examples in the last step gets a stand-in weighted 0, so it still joins the all-reduce."""

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, rank: int = 0,
                 world_size: int = 1, bucket: bool = False, accum_steps: int = 1):
        self.lengths, self.batch_size, self.seed = lengths, batch_size, seed
        self.rank, self.world_size, self.bucket = rank, world_size, bucket
        self.global_size = batch_size * accum_steps * world_size
        self.epoch, self.skip = 0, 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Use epoch ``epoch``'s order; leave out its first ``skip`` steps (already trained)."""
        self.epoch, self.skip = epoch, skip

    def _global_order(self) -> np.ndarray:
        order = np.random.default_rng(self.seed + self.epoch).permutation(len(self.lengths))
        if self.bucket:
            chunk = self.global_size * 50
            parts = [order[i:i + chunk] for i in range(0, len(order), chunk)]
            order = np.concatenate([p[np.argsort(self.lengths[p], kind="stable")] for p in parts])
        return order

    def _global_batches(self) -> list[np.ndarray]:
        order, size = self._global_order(), self.global_size
        batches = [order[i:i + size] for i in range(0, len(order), size)]
        if self.bucket:  # sorted chunks would otherwise train short sentences first
            perm = np.random.default_rng(self.seed + self.epoch + 1).permutation(len(batches))
            batches = [batches[i] for i in perm]
        return batches

    def __iter__(self) -> Iterator[StepIndices]:
        for batch in self._global_batches()[self.skip:]:
            share = batch[self.rank::self.world_size].tolist()
            micro = [share[i:i + self.batch_size] for i in range(0, len(share), self.batch_size)]
            yield StepIndices(micro or [[int(batch[0])]], batch.tolist(), dummy=not micro)

    @property
    def num_batches(self) -> int:
        """Optimizer steps in a whole epoch."""
        return math.ceil(len(self.lengths) / self.global_size)

    def __len__(self) -> int:
        return max(self.num_batches - self.skip, 0)


def eval_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Length-sorted batches for scoring: each <= batch_size examples and <= batch_size x the
    median tokens. Cut once for the whole split, so W ranks taking every W-th batch score
    exactly the batches one process does, and their gathered answers match its bit for bit."""
    order = np.argsort(lengths, kind="stable")
    ranked = np.asarray(lengths)[order]
    budget = batch_size * max(float(np.median(ranked)), 1.0) if len(ranked) else 0.0
    counts = np.arange(1, batch_size + 1)
    batches, start = [], 0
    while start < len(order):
        # Sorted, so a batch's last example is its longest: the padded size of the first n
        # examples from ``start`` is n * ranked[start + n - 1], which grows with n.
        longest = ranked[start:start + batch_size]
        padded = counts[:len(longest)] * longest
        n = max(int((padded <= budget).sum()), 1)
        batches.append(order[start:start + n])
        start += n
    return batches
