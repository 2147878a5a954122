"""A model folder (a checkpoint or an export) from a stranger: read through one schema, bounded,
never trusted to name a path; every bad one is one line and exit 2."""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat

import pytest

import reltrain
from reltrain.cli import main
from reltrain.runtime.errors import UserError

from conftest import data_overrides, encoder_args, payload_of, run_cli, user_error, write_folder

pytestmark = pytest.mark.slow

TEXT, HEAD, TAIL = "alice was born in paris", "alice", "paris"
ASK = ("--text", TEXT, "--head", HEAD, "--tail", TAIL)


@pytest.fixture(scope="module")
def trained(small_en, tiny_bert, tmp_path_factory) -> dict:
    """A checkpoint and an exported folder of the CNN and of the tiny BERT."""
    out = {}
    for name in ("cnn", "lm"):
        root = tmp_path_factory.mktemp(f"artifact-{name}")
        assert main(["train", *data_overrides(small_en), "log.progress=false", "train.epochs=1", *encoder_args(name, tiny_bert),
                     f"output_dir={root / 'run'}"]) == 0
        checkpoint = root / "run" / "checkpoints" / "best"
        assert main(["export", str(checkpoint), str(root / "model")]) == 0
        out[name] = (checkpoint, root / "model")
    return out


def saved(payload: dict, path) -> str:
    return write_folder(payload, path)


def refused(path, match: str) -> str:
    """``reltrain.load`` and ``reltrain export`` both refuse ``path`` with one line."""
    with pytest.raises(UserError, match=match) as caught:
        reltrain.load(path)
    with pytest.raises(UserError, match=match):
        from reltrain.commands.export import export_model
        from reltrain.config.commands import ExportOptions

        export_model(ExportOptions(path, os.path.join(os.path.dirname(path), "export-of-refused")))
    return str(caught.value)


@pytest.mark.parametrize("name", ["../../escaped.pth", "ABSOLUTE", "sub/escaped.pth"])
def test_tokenizer_file_names_in_a_checkpoint_are_never_paths(trained, tmp_path, name):
    name = str(tmp_path / "absolute-escaped.pth") if name == "ABSOLUTE" else name
    payload = payload_of(trained["lm"][0])
    payload["lm"]["files"][name] = "import os  # a .pth file would run at the next Python start"
    (tmp_path / "a" / "b").mkdir(parents=True)
    path = saved(payload, tmp_path / "a" / "b" / "evil")
    refused(path, "tokenizer.files must name files among")
    line = user_error(run_cli("predict", path, *ASK))
    assert "tokenizer.files must name files among" in line
    assert not [p for p in tmp_path.rglob("*escaped*")]


def test_an_exported_folder_is_read_inside_itself_only(trained, tmp_path):
    _, folder = trained["lm"]
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    cases = {}
    for case in ("dotdot", "absolute", "symlink", "device", "fifo", "weights"):
        copy_ = tmp_path / case
        shutil.copytree(folder, copy_)
        config = json.loads((copy_ / "config.json").read_text())
        if case == "dotdot":
            config["tokenizer"]["files"] = ["../outside.txt"]
        elif case == "absolute":
            config["tokenizer"]["files"] = [str(outside)]
        elif case == "symlink":
            (copy_ / "tokenizer.json").unlink()
            (copy_ / "tokenizer.json").symlink_to(outside)
        elif case == "device":
            (copy_ / "tokenizer.json").unlink()
            (copy_ / "tokenizer.json").symlink_to("/dev/zero")
        elif case == "fifo":
            (copy_ / "tokenizer.json").unlink()
            os.mkfifo(copy_ / "tokenizer.json")  # opening it for reading would wait for a writer
        else:  # the weights, a link to weights outside the folder
            (copy_ / "model.safetensors").rename(tmp_path / "outside.safetensors")
            (copy_ / "model.safetensors").symlink_to(tmp_path / "outside.safetensors")
        (copy_ / "config.json").write_text(json.dumps(config))
        cases[case] = copy_
    for case in ("dotdot", "absolute"):
        refused(str(cases[case]), "tokenizer.files must name files among")
    for case in ("symlink", "device", "weights"):
        refused(str(cases[case]), "a link; a model folder holds its own files")
    refused(str(cases["fifo"]), "not a regular file")
    assert outside.read_text() == "secret"


def test_a_words_folder_names_no_other_vocabulary(trained, tmp_path):
    _, folder = trained["cnn"]
    copy_ = tmp_path / "model"
    shutil.copytree(folder, copy_)
    config = json.loads((copy_ / "config.json").read_text())
    config["tokenizer"]["vocab"] = "/etc/passwd"
    (copy_ / "config.json").write_text(json.dumps(config))
    refused(str(copy_), "tokenizer.vocab must be vocab.json")


def test_a_received_config_is_not_interpolated(trained, tmp_path, monkeypatch):
    monkeypatch.setenv("RELTRAIN_TEST_SECRET", "hunter2")
    _, folder = trained["cnn"]
    for key, value in (("language", "${oc.env:RELTRAIN_TEST_SECRET}"),
                       ("train", "${oc.env:RELTRAIN_TEST_SECRET}")):
        copy_ = tmp_path / key
        shutil.copytree(folder, copy_)
        config = json.loads((copy_ / "config.json").read_text())
        config["reltrain_config"]["data"][key] = value
        (copy_ / "config.json").write_text(json.dumps(config))
        if key == "language":
            message = refused(str(copy_), "data.language must be zh or en")
            assert "hunter2" not in message
        else:
            assert reltrain.load(copy_).config.data.train == value  # a plain string, unresolved


def tampered_checkpoints(trained) -> dict:
    cnn, lm = payload_of(trained["cnn"][0]), payload_of(trained["lm"][0])
    cases = {}

    def case(name, base, change, match):
        payload = copy.deepcopy(base)
        change(payload)
        cases[name] = (payload, match)

    case("labels not a list", cnn, lambda p: p.update(labels="born_in"),
         "needs id2label and tokenizer mappings")
    case("labels twice", cnn, lambda p: p.update(labels=[p["labels"][0]] * len(p["labels"])),
         "holds a name twice")
    case("more labels than outputs", cnn, lambda p: p["labels"].append("extra"),
         "weights do not fit")
    case("vocabulary longer than its embedding", cnn, lambda p: p["vocab"].extend(["x", "y"]),
         "weights do not fit")
    case("vocabulary without its specials", cnn, lambda p: p.update(vocab=p["vocab"][2:]),
         "must start with <pad>, <unk>")
    case("a width of 10^12", cnn, lambda p: p["config"]["model"].update(word_dim=10**12),
         "model.word_dim must be between 1 and 65536, not 1000000000000")
    case("a negative width", cnn, lambda p: p["config"]["model"]["cnn"].update(num_filters=-5),
         "model.cnn.num_filters must be between 1 and 65536, not -5")
    case("a width by its pre-release name", cnn, lambda p: p["config"]["model"].update(num_filters=5),
         "unknown key 'model.num_filters'")
    case("an unknown model type", cnn, lambda p: p["config"]["model"].update(name="evil"),
         "unknown model.name")
    case("an unknown config key", cnn, lambda p: p["config"]["model"].update(evil=1),
         "unknown key 'model.evil'")
    case("a config value of another type", cnn, lambda p: p["config"]["train"].update(lr="fast"),
         "train.lr must be float")
    case("no weights", cnn, lambda p: p.pop("model"), "incomplete model folder: no model.safetensors")
    case("no labels", cnn, lambda p: p.pop("labels"), "needs id2label and tokenizer mappings")
    case("no vocabulary", cnn, lambda p: p.update(vocab=None), "incomplete model folder: no vocab.json")
    case("encoder layers of 10^12", lm,
         lambda p: p["hf_config"].update(num_hidden_layers=10**12), "out of bounds")
    case("encoder width of 10^12", lm, lambda p: p["hf_config"].update(hidden_size=10**12),
         "out of bounds")
    case("encoder width of another model", lm, lambda p: p["hf_config"].update(hidden_size=64),
         "weights do not fit")
    case("an unknown encoder type", lm, lambda p: p["hf_config"].update(model_type="evil-net"),
         "does not build")
    case("garbage tokenizer", lm, lambda p: p["lm"]["files"].update({"tokenizer.json": "{garbage"}),
         "cannot load a tokenizer")
    case("no encoder config", lm, lambda p: p.update(hf_config=None), "without its tokenizer")
    return cases


def test_tampered_checkpoints_are_one_line_each(trained, tmp_path):
    for i, (name, (payload, match)) in enumerate(tampered_checkpoints(trained).items()):
        path = saved(payload, tmp_path / f"case{i}")
        try:
            refused(path, match)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None
    # the command line as users see it: exit 2, one line, no traceback
    payload, match = tampered_checkpoints(trained)["a width of 10^12"]
    line = user_error(run_cli("predict", saved(payload, tmp_path / "wide"), *ASK))
    assert "model.word_dim must be between 1 and 65536" in line


def test_tokenizer_config_cannot_send_transformers_to_other_files(trained, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "tokenizer.json").write_text("{not a tokenizer")
    payload = payload_of(trained["lm"][0])
    config = json.loads(payload["lm"]["files"]["tokenizer_config.json"])
    config.update(tokenizer_file=str(elsewhere / "tokenizer.json"),
                  vocab_file=str(elsewhere / "tokenizer.json"), auto_map={"AutoTokenizer": "x.Y"})
    payload["lm"]["files"]["tokenizer_config.json"] = json.dumps(config)
    path = saved(payload, tmp_path / "redirected")
    expected = reltrain.load(trained["lm"][0]).predict_text(TEXT, HEAD, TAIL)
    got = reltrain.load(path).predict_text(TEXT, HEAD, TAIL)
    with pytest.raises(reltrain.UserError, match="labels given entity pairs"):
        reltrain.load(path).extract(TEXT)
    assert got["top_k"] == expected["top_k"]  # the tokenizer beside it, not the one named


def test_onnx_that_names_external_files_is_refused(trained, tmp_path):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    folder = tmp_path / "model"
    assert main(["export", str(trained["cnn"][0]), str(folder), "--format", "onnx"]) == 0
    graph = onnx.load(str(folder / "model.onnx"))
    tensor = graph.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "/etc/hostname"
    onnx.save(graph, str(folder / "model.onnx"))
    with pytest.raises(UserError, match="refers to tensors in other files"):
        reltrain.load(folder, runtime="onnx")


def test_exported_files_share_one_mode(trained):
    _, folder = trained["cnn"]
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
    assert len(set(modes.values())) == 1, modes


def test_export_takes_a_run_directory_and_an_exported_folder(trained, tmp_path):
    checkpoint, folder = trained["cnn"]
    run_dir = checkpoint.parent.parent
    assert main(["export", str(run_dir), str(tmp_path / "from-run")]) == 0
    assert main(["export", str(folder), str(tmp_path / "from-folder")]) == 0
    original = json.loads((folder / "config.json").read_text())
    for out in ("from-run", "from-folder"):
        card = json.loads((tmp_path / out / "config.json").read_text())
        assert card["metrics"] == original["metrics"]
        assert card["training_data"] == original["training_data"]
    assert "neither a model folder" in user_error(run_cli("export", str(tmp_path), str(tmp_path / "x")))
    # into the run it reads: a run directory holding another folder resumes no more
    line = user_error(run_cli("export", str(run_dir), str(run_dir / "exported")))
    assert "OUT_DIR" in line and "lies inside" in line and not (run_dir / "exported").exists()
