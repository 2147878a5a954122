import ast
from pathlib import Path

import pytest
import torch

from reltrain.config.train import BiLSTMConfig, CNNConfig, ModelConfig
from reltrain.data.dataset import RelationDataset
from reltrain.runtime.errors import UserError
from reltrain.models import build_model, model_names

from test_dataset import make_split

MODELS_DIR = Path(__file__).resolve().parents[1] / "src" / "reltrain" / "models"


def distribution_uses(source: str) -> list[str]:
    """Every way a file reaches torch.distributed or the launcher's rank variables."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("torch.distributed")]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.startswith("torch.distributed") or (
                    module == "torch" and any(a.name == "distributed" for a in node.names)):
                found.append(f"from {module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr == "distributed":
            found.append("attribute .distributed")
        elif isinstance(node, ast.Constant) and node.value in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
            found.append(repr(node.value))
    return found


def test_model_code_never_touches_distribution():
    for path in MODELS_DIR.glob("*.py"):
        assert not distribution_uses(path.read_text()), path


@pytest.mark.parametrize("source", ["import torch.distributed as dist",
                                    "from torch import distributed",
                                    "from torch.distributed import all_reduce",
                                    "import torch\ntorch.distributed.all_reduce(x)",
                                    "import os\nos.environ['RANK']"])
def test_the_guard_sees_every_spelling(source):
    assert distribution_uses(source)


@pytest.mark.parametrize("name,pooling", [("cnn", ""), ("pcnn", ""), ("transformer", ""),
                                          ("bilstm", "attention"), ("bilstm", "max"),
                                          ("bilstm", "last")])
def test_forward_shape_and_padding_invariance(name, pooling):
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=name, dropout=0.0,
                                    bilstm=BiLSTMConfig(pooling=pooling or "attention")),
                        vocab_size=50, num_labels=4, pos_limit=5).eval()
    split = make_split([6, 3], [(0, 2), (1, 2)], [(4, 5), (2, 3)])
    split.token_ids = split.token_ids % 50
    data = RelationDataset(split, pos_limit=5)
    together = model(**data.__getitems__([0, 1]).inputs())
    alone = model(**data.__getitems__([1]).inputs())  # no padding at all
    assert together.shape == (2, 4)
    torch.testing.assert_close(together[1], alone[0], rtol=1e-5, atol=1e-6)


def test_pcnn_handles_empty_piece():
    model = build_model(ModelConfig(name="pcnn"), 20, 3, 5).eval()
    split = make_split([4], [(0, 3)], [(1, 3)])  # nested: both end at 3, piece 2 is empty
    split.token_ids = split.token_ids % 20
    out = model(**RelationDataset(split, 5).__getitems__([0]).inputs())
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", ["cnn", "pcnn"])
def test_cpu_prediction_forward_equals_the_training_one(name):
    """Without autograd on a CPU the CNNs take another route (projections summed by embedding_bag, max
    before ReLU, an additive mask); it must compute the same function, padding, short sentences
    and empty PCNN pieces included."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(name=name, cnn=CNNConfig(kernel_sizes=[1, 3, 5])), 50, 4, 5).eval()
    split = make_split([6, 3, 1, 4, 9], [(0, 2), (1, 2), (0, 1), (0, 3), (8, 9)],
                       [(4, 5), (2, 3), (0, 1), (1, 3), (0, 1)])
    split.token_ids = split.token_ids % 50
    data = RelationDataset(split, pos_limit=5)
    inputs = data.__getitems__([0, 1, 2, 3, 4] * 2).inputs()  # 10 x 9 tokens: enough to take it
    assert model._cpu_inference(inputs["word"]) is False  # autograd on: the training route
    trained = model(**inputs)
    with torch.no_grad():
        assert model._cpu_inference(inputs["word"]) is True
        predicted = model(**inputs)
        alone = data.__getitems__([2]).inputs()  # 1 token: the training route, unless asked
        assert model._cpu_inference(alone["word"]) is False
        masks = [alone["mask"]] if name == "cnn" else [alone["segment"] == k for k in (1, 2, 3)]
        alone = model._cpu_inference_forward(alone["word"], alone["pos_head"], alone["pos_tail"], masks)
    torch.testing.assert_close(predicted, trained, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(alone[0], trained[2], rtol=1e-5, atol=1e-6)


def test_other_activations_predict_by_the_training_route():
    model = build_model(ModelConfig(name="cnn", cnn=CNNConfig(activation="tanh")), 20, 3, 5).eval()
    with torch.no_grad():
        assert model._cpu_inference(torch.zeros(1, 2, dtype=torch.long)) is False


def test_every_activation_the_config_accepts_builds_and_no_other():
    # config.py stays free of torch, so the names are written there and in layers.ACTIVATIONS.
    from dataclasses import fields

    from reltrain.models.layers import ACTIVATIONS

    choices = next(f for f in fields(CNNConfig) if f.name == "activation").metadata["choices"]
    assert set(choices) == set(ACTIVATIONS)


def test_registry_names_and_unknown_model():
    assert {"cnn", "pcnn", "bilstm", "transformer", "lm"} <= set(model_names())
    with pytest.raises(UserError, match="unknown model.name 'nope'"):
        build_model(ModelConfig(name="nope"), 10, 2, 5)


def test_example_dropout_masks_follow_examples_not_batches():
    from reltrain.models.dropout import ExampleDropout, example_noise_seeds

    drop = ExampleDropout(0.5).train()
    x = torch.ones(6, 40)
    index = torch.tensor([3, 9, 4, 0, 7, 1])
    noise = example_noise_seeds(seed=1, step=5, index=index)
    whole = drop(x, noise)
    parts = torch.cat([drop(x[:2], noise[:2]), drop(x[2:], noise[2:])])
    assert torch.equal(whole, parts)  # the same masks however the batch is split
    assert 0.3 < (whole == 0).float().mean() < 0.7 and set(whole.unique().tolist()) == {0.0, 2.0}
    other_step = drop(x, example_noise_seeds(seed=1, step=6, index=index))
    assert not torch.equal(whole, other_step)


def test_example_dropout_rows_share_their_examples_mask():
    """A sentence's spans hashed once (``rows``) are masked as each span keyed alone was."""
    from reltrain.models.dropout import ExampleDropout, example_noise_seeds

    drop = ExampleDropout(0.3, stream=11).train()
    x = torch.randn(7, 25)
    rows = torch.tensor([0, 0, 2, 1, 2, 2, 0])
    noise = example_noise_seeds(seed=4, step=2, index=torch.tensor([8, 3, 5]))
    shared = drop(x, noise, rows=rows)
    assert torch.equal(shared, drop(x, noise[rows]))
    assert torch.equal(shared[0] == 0, shared[1] == 0)  # one example, one mask
    assert not torch.equal(shared[0] == 0, shared[3] == 0)
