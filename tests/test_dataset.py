import numpy as np
import torch

from reltrain.data.dataset import EvalBatchSampler, RelationDataset, TrainBatchSampler
from reltrain.data.preprocess import Split


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


def test_train_sampler_shards_are_the_global_batch():
    lengths = np.random.default_rng(0).integers(1, 30, size=37)
    single = TrainBatchSampler(lengths, batch_size=8, seed=3)
    ranks = [TrainBatchSampler(lengths, batch_size=4, seed=3, rank=r, world_size=2) for r in (0, 1)]
    for s in (single, *ranks):
        s.set_epoch(2)
    single_batches = list(single)
    per_rank = [list(s) for s in ranks]
    assert len(per_rank[0]) == len(per_rank[1]) == len(ranks[0])
    for i, batch in enumerate(single_batches[:-1]):  # the last one holds the padding duplicate
        assert sorted(per_rank[0][i] + per_rank[1][i]) == sorted(batch)
    covered = {i for batches in per_rank for b in batches for i in b}
    assert covered == set(range(37))


def test_bucketing_reduces_padding_and_keeps_every_example():
    lengths = np.random.default_rng(1).integers(1, 100, size=500)
    plain, bucket = TrainBatchSampler(lengths, 16, 0), TrainBatchSampler(lengths, 16, 0, bucket=True)
    pad = lambda s: sum(len(b) * lengths[b].max() - lengths[b].sum() for b in s)  # noqa: E731
    assert pad(bucket) < pad(plain) / 3
    assert sorted(i for b in bucket for i in b) == list(range(500))


def test_eval_sampler_deals_identical_batches_to_ranks():
    lengths = np.random.default_rng(2).integers(1, 50, size=101)
    whole = list(EvalBatchSampler(lengths, 10))
    for world in (2, 3):
        shards = [list(EvalBatchSampler(lengths, 10, r, world)) for r in range(world)]
        dealt = [b for shard in shards for b in shard]
        assert sorted(map(tuple, dealt)) == sorted(map(tuple, whole))
