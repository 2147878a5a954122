"""Every encoder trains, evaluates, predicts, resumes and runs under 2-process gloo DDP."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import reltrain
from reltrain.cli import main
from reltrain.data.lm import LMTokenizer
from reltrain.data.schema import Entity, Record
from reltrain.data.vectors import load_word_vectors
from reltrain.data.vocab import Vocab

from conftest import (ZH_ROWS, data_overrides, encoder_args, ok, payload_of, torchrun, weights_of,
                      write_csv)

pytestmark = pytest.mark.slow

BASE = ["log.progress=false", "train.batch_size=16"]


@pytest.mark.parametrize("name", ["bilstm", "transformer", "lm"])
def test_encoder_trains_resumes_evaluates_predicts(name, small_en, tiny_bert, tmp_path, capsys):
    args = [*data_overrides(small_en), *BASE, *encoder_args(name, tiny_bert), f"output_dir={tmp_path}"]
    assert main(["train", *args, "train.epochs=1"]) == 0
    assert main(["train", *args, "train.epochs=2"]) == 0  # resumes the finished first epoch
    history = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in history] == [1, 2] and history[1]["train_loss"] < history[0]["train_loss"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "checkpoints/best"), small_en["test"]]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["macro_f1"] == summary["test"]["macro_f1"]
    model = reltrain.load(tmp_path / "checkpoints/best")
    out = model.predict_text("Alice Moreau was born in Dunmore .", "Alice Moreau", "Dunmore")
    assert out["relation"] in model.labels and len(out["top_k"]) == 3


@pytest.mark.parametrize("name", ["bilstm", "transformer", "lm"])
def test_encoder_under_two_process_ddp(name, small_en, tiny_bert, tmp_path):
    ok(torchrun(2, "-m", "reltrain", "train", *data_overrides(small_en), *BASE, "train.epochs=1",
                "train.batch_size=8", *encoder_args(name, tiny_bert), f"output_dir={tmp_path}"))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["global_batch_size"] == 16
    ckpt = weights_of(tmp_path / "checkpoints/best")
    assert not any(k.startswith("module.") for k in ckpt)


def rec(text: str, head: tuple[int, int], tail: tuple[int, int]) -> Record:
    return Record(text, Entity(text[head[0]:head[1]], *head), Entity(text[tail[0]:tail[1]], *tail),
                  None, "x:1")


def marked(tok: LMTokenizer, out, span) -> list[str]:
    return tok.hf.convert_ids_to_tokens(out.tokens[span[0]:span[1]])


@pytest.mark.parametrize("text,head,tail,head_tokens,tail_tokens", [
    ("alice moreau was born in dunmore", (0, 12), (25, 32), ["alice", "moreau"], ["dunmore"]),
    ("张玲导演说，张玲很满意红楼的拍摄", (11, 13), (6, 8), ["红", "楼"], ["张", "玲"]),
    ("dunmore is where alice moreau was born", (17, 29), (0, 7), ["alice", "moreau"], ["dunmore"]),
])
def test_lm_offsets_map_exactly_to_subwords(tiny_bert, text, head, tail, head_tokens, tail_tokens):
    tok = LMTokenizer.from_folder(tiny_bert)
    out = tok(rec(text, head, tail), max_len=64)
    assert marked(tok, out, out.head) == ["[E1]", *head_tokens, "[/E1]"]
    assert marked(tok, out, out.tail) == ["[E2]", *tail_tokens, "[/E2]"]
    assert tok.hf.convert_ids_to_tokens(out.tokens[:1]) == ["[CLS]"]
    assert tok.hf.convert_ids_to_tokens(out.tokens[-1:]) == ["[SEP]"]


def test_lm_window_is_placed_around_the_entities(tiny_bert):
    tok = LMTokenizer.from_folder(tiny_bert)
    filler = " ".join(["was"] * 80)
    text = f"{filler} alice moreau was born in dunmore {filler}"
    start = len(filler) + 1
    out = tok(rec(text, (start, start + 12), (start + 25, start + 32)), max_len=32)
    assert len(out.tokens) == 32 and out.truncated
    assert marked(tok, out, out.head) == ["[E1]", "alice", "moreau", "[/E1]"]
    assert marked(tok, out, out.tail) == ["[E2]", "dunmore", "[/E2]"]


def test_lm_gives_unknown_characters_their_own_tokens(tiny_bert):
    tok = LMTokenizer.from_folder(tiny_bert)
    base = len(tok)
    texts = ["张玲是导演，出生于武汉", "谢万松是湖北省人", "alice moreau was born in dunmore"]
    stats = tok.add_unknown_chars(texts, min_count=2)
    # 是 is [UNK] twice; 出, 生, 于 and the full-width comma once each: they stay [UNK].
    assert tok.added == ["是"] and len(tok) == base + 1
    assert stats["added"] == 1 and stats["unk_after"] < stats["unk_before"]
    out = tok(rec(texts[0], (0, 2), (9, 11)), max_len=64)
    assert tok.hf.convert_ids_to_tokens(out.tokens) == [
        "[CLS]", "[E1]", "张", "玲", "[/E1]", "是", "导", "演", "[UNK]", "[UNK]", "[UNK]", "[UNK]",
        "[E2]", "武", "汉", "[/E2]", "[SEP]"]
    assert out.tokens[5] == base  # after the model's vocabulary and the markers
    english = tok(rec(texts[2], (0, 12), (25, 32)), max_len=64)
    assert marked(tok, english, english.head) == ["[E1]", "alice", "moreau", "[/E1]"]
    again = LMTokenizer.from_files(tok.files(), None, tok.added)
    assert again(rec(texts[0], (0, 2), (9, 11)), max_len=64).tokens == out.tokens


def test_lm_learns_added_tokens_and_predicts_with_them(tiny_bert, tmp_path):
    data = write_csv(tmp_path / "zh.csv", ZH_ROWS)
    out = tmp_path / "run"
    args = [f"data.{k}={data}" for k in ("train", "valid", "test")]
    lm = [*args, *BASE, "train.batch_size=2", "model.name=lm", f"model.lm.pretrained={tiny_bert}",
          f"output_dir={out}"]
    assert main(["train", *lm, "train.epochs=1"]) == 0
    assert main(["train", *lm, "train.epochs=2"]) == 0  # resumes: same added tokens, same table
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    ckpt = payload_of(out / "checkpoints/last")
    added = ckpt["lm"]["added"]
    assert "是" in added and "《" in added and "执" not in added  # 执 occurs once
    model = reltrain.load(out / "checkpoints/last")
    table = model.model.added.weight
    assert table.shape[0] == len(added)
    assert not torch.allclose(table[0], table[1])  # both started at the mean embedding
    result = model.predict_text("张玲是导演", "张玲", "导演")
    assert result["relation"] in model.labels


def test_lm_added_tokens_under_two_process_ddp(tiny_bert, tmp_path):
    data = write_csv(tmp_path / "zh.csv", ZH_ROWS)
    ok(torchrun(2, "-m", "reltrain", "train", *(f"data.{k}={data}" for k in ("train", "valid", "test")),
                *BASE, "train.batch_size=1", "train.epochs=1", "model.name=lm",
                f"model.lm.pretrained={tiny_bert}", f"output_dir={tmp_path / 'run'}"))
    ckpt = payload_of(tmp_path / "run/checkpoints/last")
    assert "是" in ckpt["lm"]["added"] and "added.weight" in ckpt["model"]


def test_word_vectors_text_and_binary(tmp_path):
    vocab = Vocab(["<pad>", "<unk>", "alice", "Dunmore", "zebra"])
    text = tmp_path / "vec.txt"
    text.write_text("3 2\nalice 1 2\ndunmore 3 4\nother 5 6\n")
    vectors, found = load_word_vectors(text, vocab, 2)
    assert found.tolist() == [False, False, True, True, False]
    np.testing.assert_array_equal(vectors[3], [3, 4])  # matched through lower case
    binary = tmp_path / "vec.bin"
    with open(binary, "wb") as f:
        f.write(b"2 2\n")
        for word, vec in (("zebra", [7, 8]), ("alice", [1, 1])):
            f.write(word.encode() + b" " + np.asarray(vec, dtype=np.float32).tobytes() + b"\n")
    vectors, found = load_word_vectors(binary, vocab, 2)
    assert found.tolist() == [False, False, True, False, True]
    np.testing.assert_array_equal(vectors[4], [7, 8])
    from reltrain.runtime.errors import DataError

    with pytest.raises(DataError, match="set model.word_dim=2"):
        load_word_vectors(text, vocab, 3)


def test_frozen_pretrained_vectors_stay_fixed(small_en, tmp_path):
    from reltrain.data.readers import read_records

    words = sorted({w for r in read_records(small_en["train"]).records for w in r.text.lower().split()})
    vec = tmp_path / "glove.txt"
    rng = np.random.default_rng(0)
    vec.write_text("".join(f"{w} " + " ".join(f"{x:.4f}" for x in rng.normal(size=8)) + "\n"
                           for w in words))
    out = tmp_path / "run"
    assert main(["train", *data_overrides(small_en), *BASE, "train.epochs=1", "model.word_dim=8",
                 f"model.word_vectors={vec}", "model.freeze_embeddings=true", f"output_dir={out}"]) == 0
    weights = weights_of(out / "checkpoints/last")["embed.word.weight"]
    vocab = payload_of(out / "checkpoints/last")["vocab"]
    first = dict(line.split(" ", 1) for line in vec.read_text().splitlines())
    word = vocab[2]
    expected = torch.tensor([float(x) for x in first[word].split()])
    torch.testing.assert_close(weights[2], expected)


def test_lm_stored_in_fp16_trains_in_fp32(tiny_bert, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    half = tmp_path / "half-bert"
    shutil.copytree(tiny_bert, half)
    weights = load_file(str(half / "model.safetensors"))
    save_file({k: v.half() for k, v in weights.items()}, str(half / "model.safetensors"),
              metadata={"format": "pt"})
    config = json.loads((half / "config.json").read_text())
    (half / "config.json").write_text(json.dumps({**config, "torch_dtype": "float16",
                                                  "dtype": "float16"}))
    data = write_csv(tmp_path / "zh.csv", ZH_ROWS)  # Chinese: added characters too
    out = tmp_path / "run"
    assert main(["train", *[f"data.{k}={data}" for k in ("train", "valid")], *BASE,
                 "train.batch_size=2", "train.epochs=1", "model.name=lm",
                 f"model.lm.pretrained={half}", f"output_dir={out}"]) == 0
    assert all(p.dtype == torch.float32 for p in reltrain.load(out / "checkpoints/best").model.parameters())
