import numpy as np

from reltrain.config import load_config
from reltrain.data.preprocess import prepare

from conftest import ZH_ROWS, write_csv


def cfg_for(tmp_path, path, *extra):
    return load_config(None, [f"data.train={path}", "data.language=zh",
                              f"data.cache_dir={tmp_path / 'cache'}", "data.min_freq=1", *extra]).data


def test_cache_reused_and_rebuilt_on_change(tmp_path):
    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    first = prepare(cfg_for(tmp_path, path))
    assert not first.reused
    again = prepare(cfg_for(tmp_path, path))
    assert again.reused and again.cache_path == first.cache_path
    assert again.vocab.tokens == first.vocab.tokens
    np.testing.assert_array_equal(again.splits["train"].token_ids, first.splits["train"].token_ids)
    option = prepare(cfg_for(tmp_path, path, "data.tokenizer=char"))
    assert not option.reused and option.cache_path != first.cache_path
    write_csv(path, ZH_ROWS[:3])  # same name, new content
    changed = prepare(cfg_for(tmp_path, path))
    assert not changed.reused and len(changed.splits["train"]) == 3


def test_cache_files_load_without_pickle(tmp_path):
    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    prepared = prepare(cfg_for(tmp_path, path))
    files = sorted(p.name for p in prepared.cache_path.iterdir())
    assert files == ["labels.json", "meta.json", "train.npz", "vocab.json"]
    with np.load(prepared.cache_path / "train.npz", allow_pickle=False) as z:
        assert z["labels"].dtype == np.int64


def test_damaged_cache_is_rebuilt(tmp_path):
    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    prepared = prepare(cfg_for(tmp_path, path))
    (prepared.cache_path / "train.npz").write_bytes(b"garbage")
    again = prepare(cfg_for(tmp_path, path))
    assert not again.reused and len(again.splits["train"]) == len(ZH_ROWS)


def test_vocab_min_freq_and_specials(tmp_path):
    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    prepared = prepare(cfg_for(tmp_path, path, "data.min_freq=2", "data.tokenizer=char"))
    assert prepared.vocab.tokens[:2] == ["<pad>", "<unk>"]
    assert "张" in prepared.vocab.index and "谢" not in prepared.vocab.index
