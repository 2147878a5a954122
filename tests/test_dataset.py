import numpy as np
import pytest
import torch

from reltrain.data.dataset import RelationDataset, TrainBatchSampler, eval_batches
from reltrain.data.split import Split


def make_split(lengths, heads, tails):
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return Split(token_ids=np.arange(2, 2 + offsets[-1], dtype=np.int32), offsets=offsets,
                 head=np.asarray(heads, dtype=np.int32), tail=np.asarray(tails, dtype=np.int32),
                 labels=np.arange(len(lengths), dtype=np.int64))


def test_batch_padding_positions_and_segments():
    split = make_split([5, 3], [(1, 2), (2, 3)], [(3, 5), (0, 1)])
    batch = RelationDataset(split, pos_limit=2).__getitems__([0, 1])
    assert batch.word.shape == (2, 5)
    assert batch.word[1].tolist() == [7, 8, 9, 0, 0]
    assert batch.mask[1].tolist() == [True, True, True, False, False]
    # relative to head (1,2): -1, 0, 1, 2, 3 -> clipped to 2 -> shifted by pos_limit + 1 = 3
    assert batch.pos_head[0].tolist() == [2, 3, 4, 5, 5]
    assert batch.pos_tail[1].tolist() == [3, 4, 5, 0, 0]
    # pieces end at the entity ends: head ends at 2, tail at 5
    assert batch.segment[0].tolist() == [1, 1, 2, 2, 2]
    assert batch.segment[1].tolist() == [1, 2, 2, 0, 0]
    assert batch.index.tolist() == [0, 1] and batch.label.dtype == torch.int64


def steps(sampler) -> list:
    return list(sampler)


@pytest.mark.parametrize("world,batch,accum", [(2, 4, 1), (1, 4, 2), (2, 2, 2), (4, 2, 1), (3, 1, 3)])
def test_any_split_of_the_global_batch_trains_the_same_steps(world, batch, accum):
    lengths = np.random.default_rng(0).integers(1, 30, size=37)  # 37: the last step is short
    single = TrainBatchSampler(lengths, batch_size=8 if world * accum != 9 else 9, seed=3, bucket=True)
    ranks = [TrainBatchSampler(lengths, batch, 3, r, world, bucket=True, accum_steps=accum)
             for r in range(world)]
    for s in (single, *ranks):
        s.set_epoch(2)
    whole, per_rank = steps(single), [steps(s) for s in ranks]
    assert all(len(p) == len(whole) == single.num_batches == ranks[0].num_batches for p in per_rank)
    for i, step in enumerate(whole):
        mine = [ix for p in per_rank if not p[i].dummy for m in p[i].micro for ix in m]
        assert sorted(mine) == sorted(step.global_index)  # each example once, no padding
        assert all(p[i].global_index == step.global_index for p in per_rank)
        assert all(len(m) <= batch and len(p[i].micro) <= accum for p in per_rank for m in p[i].micro)
    assert sorted(ix for step in whole for ix in step.global_index) == list(range(37))


def test_a_rank_without_examples_in_the_last_step_gets_a_stand_in():
    ranks = [TrainBatchSampler(np.ones(9, dtype=np.int64), 4, 0, r, 2) for r in (0, 1)]
    last = [steps(s)[-1] for s in ranks]  # 9 = 8 + 1: the last step has one example
    assert [s.dummy for s in last] == [False, True] and last[1].micro == [last[0].micro[0]]
    step = RelationDataset(make_split([2] * 9, [(0, 1)] * 9, [(1, 2)] * 9), 2).__getitems__(last[1])
    assert step.dummy and step.num_examples == 0 and step.global_size == 1


def test_skipping_steps_resumes_the_same_order():
    lengths = np.random.default_rng(4).integers(1, 30, size=50)
    full, resumed = TrainBatchSampler(lengths, 4, 1), TrainBatchSampler(lengths, 4, 1)
    full.set_epoch(3)
    resumed.set_epoch(3, skip=5)
    assert [s.global_index for s in steps(full)][5:] == [s.global_index for s in steps(resumed)]
    assert len(resumed) == full.num_batches - 5


def test_bucketing_reduces_padding_and_keeps_every_example():
    lengths = np.random.default_rng(1).integers(1, 100, size=500)
    plain, bucket = TrainBatchSampler(lengths, 16, 0), TrainBatchSampler(lengths, 16, 0, bucket=True)
    pad = lambda s: sum(len(b) * lengths[b].max() - lengths[b].sum()  # noqa: E731
                        for step in s for b in step.micro)
    assert pad(bucket) < pad(plain) / 3
    assert sorted(i for step in bucket for b in step.micro for i in b) == list(range(500))


def test_eval_batches_cover_every_example_once_in_length_order():
    lengths = np.random.default_rng(2).integers(1, 50, size=101)
    batches = eval_batches(lengths, 10)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(101))
    assert np.all(np.diff(lengths[flat]) >= 0)


def test_eval_batches_cap_padded_tokens_at_the_median_times_the_batch_size():
    rng = np.random.default_rng(3)
    lengths = np.concatenate([rng.integers(10, 40, size=990), rng.integers(150, 200, size=10)])
    batches = eval_batches(lengths, 64)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    budget = 64 * np.median(lengths)
    assert all(len(b) <= 64 and (len(b) == 1 or len(b) * lengths[b].max() <= budget) for b in batches)
    padded = sum(len(b) * lengths[b].max() for b in batches)
    fixed = np.sort(lengths)
    fixed_padded = sum(len(fixed[i:i + 64]) * fixed[i:i + 64].max() for i in range(0, 1000, 64))
    assert padded < lengths.sum() * 1.05 < fixed_padded
    assert eval_batches(np.zeros(0, dtype=np.int64), 8) == []
