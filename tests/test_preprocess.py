import sys
from pathlib import Path

import numpy as np
import pytest

from reltrain.config.load import load_config
from reltrain.data.preprocess import prepare
from reltrain.data.readers import read_records
from reltrain.runtime.errors import UserError

from conftest import ZH_ROWS, data_overrides, ok, run, run_cli, write_csv


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
    files = sorted(str(p.relative_to(prepared.cache_path)) for p in prepared.cache_path.rglob("*"))
    assert files == ["labels.json", "meta.json", "train", *(f"train/{k}.npy" for k in
                     ("head", "labels", "offsets", "tail", "token_ids")), "vocab.json"]
    assert np.load(prepared.cache_path / "train/labels.npy", allow_pickle=False).dtype == np.int64


def test_damaged_cache_is_rebuilt(tmp_path):
    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    prepared = prepare(cfg_for(tmp_path, path))
    (prepared.cache_path / "train/token_ids.npy").write_bytes(b"garbage")
    again = prepare(cfg_for(tmp_path, path))
    assert not again.reused and len(again.splits["train"]) == len(ZH_ROWS)


def test_vocab_min_freq_and_specials(tmp_path):
    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    prepared = prepare(cfg_for(tmp_path, path, "data.min_freq=2", "data.tokenizer=char"))
    assert prepared.vocab.tokens[:2] == ["<pad>", "<unk>"]
    assert "张" in prepared.vocab.index and "谢" not in prepared.vocab.index


def test_truncated_cache_entry_is_replaced_once_then_reused(tmp_path, caplog):
    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    prepared = prepare(cfg_for(tmp_path, path))
    npy = prepared.cache_path / "train/token_ids.npy"
    npy.write_bytes(npy.read_bytes()[:200])  # cut short: the map would reach past its end
    rebuilt = prepare(cfg_for(tmp_path, path))
    assert not rebuilt.reused and "is damaged" in caplog.text
    caplog.clear()
    again = prepare(cfg_for(tmp_path, path))
    assert again.reused and "damaged" not in caplog.text
    assert sorted(p.name for p in again.cache_path.parent.iterdir()) == [again.cache_path.name]


@pytest.mark.parametrize("how", ["cache_dir is a file", "cache_dir refuses new folders",
                                 "XDG_CACHE_HOME unwritable"])
def test_unwritable_cache_location_means_no_cache(tmp_path, monkeypatch, caplog, how):
    """The data is tokenized in a child that hands it over through the cache: without one, it
    goes through a scratch folder. Root ignores file modes, so /proc stands in for a folder
    where nothing can be created."""
    if not Path("/proc/self").is_dir():
        pytest.skip("needs /proc")
    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    if how == "cache_dir is a file":
        cfg = cfg_for(tmp_path, path, f"data.cache_dir={blocker}")
    elif how == "cache_dir refuses new folders":  # the child finds out when it saves
        cfg = cfg_for(tmp_path, path, "data.cache_dir=/proc/self")
    else:
        cfg = cfg_for(tmp_path, path)
        cfg.cache_dir = ""
        monkeypatch.setenv("XDG_CACHE_HOME", "/proc/self/reltrain")
    prepared = prepare(cfg)
    assert prepared.cache_path is None and len(prepared.splits["train"]) == len(ZH_ROWS)
    assert "continuing without a cache" in caplog.text
    fresh = prepare(cfg)
    assert not fresh.reused and fresh.vocab.tokens == prepared.vocab.tokens


def test_unwritable_cache_is_said_in_the_run_log(tmp_path, small_en):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    result = ok(run_cli("train", *data_overrides(small_en), "train.epochs=1", "log.progress=false",
                        f"data.cache_dir={blocker}", f"output_dir={tmp_path / 'run'}"))
    assert "Traceback" not in result.stderr and "continuing without a cache" in result.stderr
    assert "cache off" in result.stderr


def test_lm_cache_hit_costs_a_hash_and_a_read(tmp_path, monkeypatch, tiny_bert):
    from reltrain.config.train import LMConfig
    from reltrain.data import preprocess

    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    cfg, lm = cfg_for(tmp_path, path), LMConfig(pretrained=tiny_bert, add_chars=2)
    first = prepare(cfg, lm=lm)
    assert first.lm.added and not first.reused

    def no_tokenizing(*a, **k):
        raise AssertionError("the training text was read or tokenized on a cache hit")

    monkeypatch.setattr(preprocess, "iter_records", no_tokenizing)
    monkeypatch.setattr(preprocess, "_built_in_child", no_tokenizing)
    again = prepare(cfg, lm=lm)
    assert again.reused and again.lm.added == first.lm.added
    assert preprocess.token_identity(again) == preprocess.token_identity(first)
    record = read_records(str(path)).records[1]
    assert again.lm(record, 64).tokens == first.lm(record, 64).tokens


def test_one_relation_and_chinese_as_english_words_are_refused(tmp_path):
    one = write_csv(tmp_path / "one.csv", [r for r in ZH_ROWS if r[1] == "导演"])
    with pytest.raises(UserError, match="only|at least two relations"):
        prepare(cfg_for(tmp_path, one))
    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    with pytest.raises(UserError, match="data.language=zh"):
        prepare(cfg_for(tmp_path, path, "data.language=en"))
    assert prepare(cfg_for(tmp_path, path, "data.language=en", "data.tokenizer=char")).splits


def test_a_cache_entry_without_its_meta_file_is_replaced(tmp_path):
    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    prepared = prepare(cfg_for(tmp_path, path))
    (prepared.cache_path / "meta.json").unlink()
    assert not prepare(cfg_for(tmp_path, path)).reused
    assert prepare(cfg_for(tmp_path, path)).reused


def test_the_training_process_never_holds_the_segmenter_or_scikit_learn(tmp_path):
    """Tokenizing runs in a child process that ends, and the metrics are counted without
    scikit-learn: about 200 MB of a CNN run on deepke-zh (bench/memory.py)."""
    path = write_csv(tmp_path / "train.csv", ZH_ROWS)
    script = (
        "import sys\nfrom reltrain.cli import main\n"
        f"code = main(['train', 'data.train={path}', 'data.valid={path}', 'data.test={path}', "
        f"'data.language=zh', 'data.min_freq=1', 'train.epochs=1', 'log.progress=false', "
        f"'data.cache_dir={tmp_path / 'cache'}', 'output_dir={tmp_path / 'run'}'])\n"
        "print('HELD', code, sorted(m for m in ('jieba', 'rjieba', 'sklearn', 'scipy') if m in sys.modules))\n")
    result = ok(run([sys.executable, "-c", script]))
    assert "HELD 0 []" in result.stdout, result.stdout[-500:]
    assert "tokenizer jieba" in result.stderr and "(reused)" not in result.stderr
