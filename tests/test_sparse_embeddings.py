"""Sparse embedding updates (train.sparse_embeddings): the clipping, the optimizer's state and a
run that uses them; the launch modes are covered by test_distributed and test_resume, whose runs
take the default (sparse on a CPU)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from reltrain.cli import main
from reltrain.training.optim import Optimizers, build_optimizer, clip_gradients, sparse_embedding

from conftest import (cli_error, data_overrides, training_of)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Module()  # where reltrain's encoders keep it: model.embed.word
        self.embed.word = nn.Embedding(50, 4, padding_idx=0)
        self.out = nn.Linear(4, 3)

    def forward(self, ids):
        return self.out(self.embed.word(ids).mean(dim=1))


def _grads(sparse: bool, ids: torch.Tensor) -> Tiny:
    model = Tiny()
    model.embed.word.sparse = sparse
    model(ids).pow(2).sum().mul(100).backward()  # large enough to be clipped
    return model


def test_clipping_a_sparse_gradient_equals_clipping_the_dense_one():
    ids = torch.tensor([[1, 2, 2, 7], [7, 7, 3, 0]])  # repeated rows: summed before the norm
    dense, sparse = _grads(False, ids), _grads(True, ids)
    assert sparse.embed.word.weight.grad.is_sparse
    clip_gradients(dense.parameters(), 0.5)
    clip_gradients(sparse.parameters(), 0.5)
    torch.testing.assert_close(sparse.embed.word.weight.grad.to_dense(),
                               dense.embed.word.weight.grad, rtol=0, atol=1e-7)
    torch.testing.assert_close(sparse.out.weight.grad, dense.out.weight.grad, rtol=0, atol=1e-7)
    total = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in dense.parameters()]))
    assert total.item() == pytest.approx(0.5, rel=1e-4)


def test_clipping_dense_gradients_is_torchs_own():
    ids = torch.tensor([[1, 2, 2, 7]])
    ours, theirs = _grads(False, ids), _grads(False, ids)
    clip_gradients(ours.parameters(), 0.5)
    nn.utils.clip_grad_norm_(theirs.parameters(), 0.5)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a.grad, b.grad)


def test_only_the_rows_a_step_used_move_and_the_state_round_trips():
    cfg = SimpleNamespace(lr=0.1, weight_decay=0.0)
    ctx = SimpleNamespace(device=torch.device("cpu"), world_size=1, backend=None)
    model = Tiny()
    word, how = sparse_embedding("auto", model, cfg, ctx)
    assert word is model.embed.word and "sparse" in how
    opt = build_optimizer(model, cfg, word, pretrained=False)
    before = word.weight.detach().clone()
    model(torch.tensor([[3, 4]])).sum().backward()
    clip_gradients(model.parameters(), 5.0)
    for part in opt.parts:
        part.step()
    moved = (word.weight.detach() != before).any(dim=1).nonzero().flatten().tolist()
    assert moved == [3, 4]
    state = opt.state_dict()
    assert "sparse" in state
    again = build_optimizer(model, cfg, word, pretrained=False)
    again.load_state_dict(state)
    assert again.state_dict()["sparse"]["state"][0]["step"] == 1
    dense = build_optimizer(model, cfg, None, pretrained=False)
    with pytest.raises(ValueError, match="sparse embedding updates"):
        dense.load_state_dict(state)
    assert isinstance(opt, Optimizers) and opt.param_groups is opt.dense.param_groups


def test_the_row_update_is_sparse_adams_with_an_exact_square_root():
    """SparseAdam's formula, computed here in float64: RowAdam's float32 steps stay within a few
    float32 roundings of it (a square root of 11-bit accuracy, what torch's gave on some Intel
    Xeon processes, is 100x off), and its state is SparseAdam's, both ways."""
    from reltrain.training.optim import RowAdam

    torch.manual_seed(0)
    start = torch.randn(40, 8)
    weight = nn.Parameter(start.clone())
    ours = RowAdam([weight], lr=0.01)
    exact, m, v = start.double(), torch.zeros(40, 8).double(), torch.zeros(40, 8).double()
    for step in range(1, 13):
        rows = torch.randint(0, 12, (16,))  # repeated rows: summed, as coalesce() does
        values = torch.randn(16, 8) * 10.0 ** -step  # second moments far below one
        weight.grad = torch.sparse_coo_tensor(rows[None], values, weight.shape,
                                              check_invariants=True)
        ours.step()
        g = torch.zeros(40, 8).double().index_add_(0, rows, values.double())
        used = torch.unique(rows)
        m[used] += (g[used] - m[used]) * 0.1
        v[used] += (g[used] ** 2 - v[used]) * 0.001
        size = 0.01 * (1 - 0.999 ** step) ** 0.5 / (1 - 0.9 ** step)
        exact[used] -= size * m[used] / (v[used].sqrt() + 1e-8)
    torch.testing.assert_close(weight.detach().double(), exact, rtol=0, atol=1e-6)
    assert torch.equal(weight.detach()[12:], start[12:])  # rows never used never move
    theirs = torch.optim.SparseAdam([nn.Parameter(start.clone())], lr=0.01)
    theirs.load_state_dict(ours.state_dict())
    RowAdam([weight], lr=0.01).load_state_dict(theirs.state_dict())
    assert theirs.state_dict()["state"][0]["step"] == 12


def test_the_schedule_sets_one_learning_rate_for_both():
    from reltrain.training.optim import Schedule

    cfg = SimpleNamespace(lr=0.1, weight_decay=0.0, schedule="plateau", lr_factor=0.5,
                          lr_patience=0, epochs=3, warmup_ratio=0.1)
    ctx = SimpleNamespace(device=torch.device("cpu"), world_size=1, backend=None)
    model = Tiny()
    word = sparse_embedding("true", model, cfg, ctx)[0]
    opt = build_optimizer(model, cfg, word, pretrained=False)
    schedule = Schedule(opt, cfg, 10, pretrained=False)
    for metric in (0.5, 0.4, 0.3):
        schedule.after_epoch(metric)
    assert opt.sparse.param_groups[0]["lr"] == opt.dense.param_groups[0]["lr"] < 0.1


def test_a_bad_setting_is_one_line():
    from reltrain.config.load import load_config
    from reltrain.runtime.errors import UserError

    with pytest.raises(UserError, match="train.sparse_embeddings must be auto, true or false"):
        load_config(None, ["train.sparse_embeddings=sometimes"])


def test_where_sparse_updates_cannot_apply():
    cfg = SimpleNamespace(lr=0.1, weight_decay=0.01)
    cpu = SimpleNamespace(device=torch.device("cpu"), world_size=1, backend=None)
    assert sparse_embedding("auto", Tiny(), cfg, cpu)[0] is None  # SparseAdam has no decay
    with pytest.raises(Exception, match="weight decay"):
        sparse_embedding("true", Tiny(), cfg, cpu)
    cfg.weight_decay = 0.0
    nccl = SimpleNamespace(device=torch.device("cpu"), world_size=2, backend="nccl")
    with pytest.raises(Exception, match="NCCL"):
        sparse_embedding("true", Tiny(), cfg, nccl)
    assert sparse_embedding("false", Tiny(), cfg, cpu)[0] is None
    frozen = Tiny()
    frozen.embed.word.weight.requires_grad_(False)
    assert sparse_embedding("auto", frozen, cfg, cpu)[0] is None
    with pytest.raises(Exception, match="trainable word embedding"):
        sparse_embedding("true", frozen, cfg, cpu)


def test_a_run_says_which_updates_it_uses_and_refuses_a_change_on_resume(small_en, tmp_path, capsys):
    run = [*data_overrides(small_en), f"output_dir={tmp_path / 'run'}", "log.progress=false"]
    assert main(["train", *run, "train.epochs=1"]) == 0
    assert "sparse embedding updates" in capsys.readouterr().err
    payload = training_of(tmp_path / "run/checkpoints/last")
    assert "sparse" in payload["optimizer"]
    assert json.loads((tmp_path / "run/summary.json").read_text())["test"]["num_examples"] == 80
    error = cli_error(capsys, "train", *run, "train.epochs=2", "train.sparse_embeddings=false")
    assert "train.sparse_embeddings" in error
