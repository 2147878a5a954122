"""Per-encoder model sections with defaults of their own; the flat keys of earlier versions
still accepted in a file, on the command line and in a received config."""

import pytest

from reltrain.config import config_from_dict, load_config, to_dict
from reltrain.errors import UserError


def test_flat_and_sectioned_keys_give_the_same_config(tmp_path):
    flat = load_config(None, ["model.num_filters=32", "model.kernel_sizes=[3]", "model.tf_dim=64",
                              "model.rnn_hidden=20", "model.pooling=max", "model.lm_markers=typed"])
    nested = load_config(None, ["model.cnn.num_filters=32", "model.cnn.kernel_sizes=[3]",
                                "model.transformer.dim=64", "model.bilstm.hidden=20",
                                "model.bilstm.pooling=max", "model.lm.markers=typed"])
    assert to_dict(flat) == to_dict(nested)
    recipe = tmp_path / "old.yaml"
    recipe.write_text("model:\n  num_filters: 48\n  tf_heads: 8\n")
    from_file = load_config(str(recipe), ["model.tf_dim=64"])
    assert (from_file.model.cnn.num_filters, from_file.model.transformer.heads,
            from_file.model.transformer.dim) == (48, 8, 64)
    later = load_config(str(recipe), ["model.cnn.num_filters=16"])  # the command line wins
    assert later.model.cnn.num_filters == 16


def test_each_encoder_has_its_own_classifier_dropout(tmp_path):
    assert (load_config().model.dropout, load_config().model.lm.dropout) == (0.5, 0.1)
    # An older recipe set the pretrained encoder's dropout as model.dropout.
    recipe = tmp_path / "lm.yaml"
    recipe.write_text(f"model:\n  name: lm\n  pretrained: {tmp_path}\n  dropout: 0.3\n")
    assert load_config(str(recipe)).model.lm.dropout == 0.3
    assert load_config(str(recipe), ["model.lm.dropout=0.2"]).model.lm.dropout == 0.2
    assert load_config(None, ["model.dropout=0.3"]).model.lm.dropout == 0.1  # a cnn run's


def test_a_received_config_of_an_earlier_version_reads_into_the_sections():
    old = {"model": {"name": "lm", "pretrained": "/m", "lm_add_chars": 0, "dropout": 0.2,
                     "tf_dim": 64, "rnn_layers": 1}}
    cfg = config_from_dict(old)
    assert (cfg.model.lm.pretrained, cfg.model.lm.add_chars, cfg.model.lm.dropout,
            cfg.model.transformer.dim, cfg.model.bilstm.layers) == ("/m", 0, 0.2, 64, 1)
    with pytest.raises(UserError, match="model.num_filters and model.cnn.num_filters are the same"):
        config_from_dict({"model": {"num_filters": 8, "cnn": {"num_filters": 16}}})
    with pytest.raises(UserError, match="did you mean 'model.cnn.num_filters'"):
        load_config(None, ["model.num_filter=3"])
