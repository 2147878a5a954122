"""Per-encoder model sections with defaults of their own; the flat names of the pre-release
versions are unknown keys, with the sectioned name offered."""

import re

import pytest

from reltrain.config.load import config_from_dict, load_config
from reltrain.runtime.errors import UserError


def test_the_sectioned_keys_from_a_file_and_the_command_line(tmp_path):
    cfg = load_config(None, ["model.cnn.num_filters=32", "model.cnn.kernel_sizes=[3]",
                             "model.transformer.dim=64", "model.bilstm.hidden=20",
                             "model.bilstm.pooling=max", "model.lm.markers=typed"])
    assert (cfg.model.cnn.num_filters, cfg.model.cnn.kernel_sizes, cfg.model.transformer.dim,
            cfg.model.bilstm.hidden, cfg.model.bilstm.pooling, cfg.model.lm.markers) == (
        32, [3], 64, 20, "max", "typed")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model:\n  cnn:\n    num_filters: 48\n  transformer:\n    heads: 8\n")
    from_file = load_config(str(recipe), ["model.transformer.dim=64"])
    assert (from_file.model.cnn.num_filters, from_file.model.transformer.heads,
            from_file.model.transformer.dim) == (48, 8, 64)
    later = load_config(str(recipe), ["model.cnn.num_filters=16"])  # the command line wins
    assert later.model.cnn.num_filters == 16


def test_each_encoder_has_its_own_classifier_dropout():
    assert (load_config().model.dropout, load_config().model.lm.dropout) == (0.5, 0.1)
    assert load_config(None, ["model.lm.dropout=0.2"]).model.lm.dropout == 0.2
    assert load_config(None, ["model.dropout=0.3"]).model.lm.dropout == 0.1  # a cnn run's


@pytest.mark.parametrize("flat", ["num_filters", "tf_dim", "pretrained", "rnn_hidden"])
def test_a_flat_name_of_the_pre_release_versions_is_an_unknown_key(flat):
    with pytest.raises(UserError, match=f"unknown key 'model.{flat}'"):
        load_config(None, [f"model.{flat}=3"])
    with pytest.raises(UserError, match=f"unknown key 'model.{flat}'"):
        config_from_dict({"model": {flat: 3}})


def test_a_near_miss_is_offered_the_sectioned_name():
    for given in ("model.num_filter=3", "model.num_filters=3"):
        with pytest.raises(UserError, match="did you mean 'model.cnn.num_filters'"):
            load_config(None, [given])


def test_every_number_option_states_its_bound_on_its_field():
    """Bounds stand beside choices on the fields and one loop checks both (check_fields): a new
    number option without one is refused here. The seed takes any integer; an offset of a
    --text question is checked with the sentence it points into."""
    import dataclasses

    from reltrain.config.commands import EvaluateOptions, PredictOptions, ServeOptions
    from reltrain.config.train import Config

    def unbounded(cls, prefix=""):
        for f in dataclasses.fields(cls):
            if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(
                    f.default_factory()):
                yield from unbounded(type(f.default_factory()), f"{prefix}{f.name}.")
            elif f.type in ("int", "float", "int | None", "float | None") and not f.metadata.get("bound"):
                yield prefix + f.name

    assert list(unbounded(Config)) == ["train.seed"]
    assert list(unbounded(PredictOptions)) == ["head_offset", "tail_offset"]
    assert list(unbounded(EvaluateOptions)) == list(unbounded(ServeOptions)) == []


def test_task_extract_has_its_own_defaults_where_none_is_given(tmp_path):
    cfg = load_config(None, ["task=extract"])
    assert (cfg.model.name, cfg.train.lr) == ("bilstm", 5e-3)
    assert load_config(None, ["task=extract", "train.lr=0.01"]).train.lr == 0.01
    recipe = tmp_path / "r.yaml"
    recipe.write_text("task: extract\nmodel:\n  name: bilstm\ntrain:\n  lr: 0.002\n")
    assert load_config(str(recipe)).train.lr == 0.002  # a file's value is given too
    assert load_config(None, ["train.lr=0.002"]).model.name == "cnn"  # classify: unchanged
    with pytest.raises(UserError, match="task=extract reads text with model.name=bilstm"):
        load_config(None, ["task=extract", "model.name=cnn"])


@pytest.mark.parametrize("items, message", [
    (["task=extract", "model.bilstm.hidden=256"],
     "model.bilstm.hidden=256 does not apply to task=extract (its BiLSTM is sized by extract.hidden)"),
    (["task=extract", "model.multi_label=false"], "model.multi_label=false does not apply"),
    (["task=extract", "eval.negative_label=none"], "eval.negative_label=none does not apply"),
    (["extract.hidden=64"], "extract.hidden applies to task=extract only (this run is task=classify)"),
])
def test_an_option_the_task_has_no_use_for_is_refused_not_ignored(items, message):
    with pytest.raises(UserError, match=re.escape(message)):
        load_config(None, items)
    assert load_config(None, ["task=extract", "extract.hidden=64", "model.multi_label=true",
                              "model.dropout=0.3"]).extract.hidden == 64


def test_an_odd_extraction_width_is_refused_by_its_bound():
    """extract.hidden is both directions' width: an odd one built a BiLSTM one unit narrower
    than the span classifier expected, and training stopped with a matrix-shape traceback."""
    with pytest.raises(UserError, match="extract.hidden must be an even number between 2 and"):
        load_config(None, ["task=extract", "extract.hidden=201"])
    assert load_config(None, ["task=extract", "extract.hidden=202"]).extract.hidden == 202


@pytest.mark.parametrize("value", ["-1", "5", "two"])
def test_the_context_lstm_depth_is_bounded(value):
    """extract.context_layers builds that many BiLSTM layers: a negative or huge depth from a
    config file is one line, not a model."""
    with pytest.raises(UserError, match="extract.context_layers"):
        load_config(None, ["task=extract", f"extract.context_layers={value}"])
    assert load_config(None, ["task=extract", "extract.context_layers=1"]).extract.context_layers == 1
