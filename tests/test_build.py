"""The streamed cache build gives the arrays and the vocabulary of tokenizing everything in
memory, whatever the chunks and workers; the entry is mapped, not read, and old entries are
rebuilt."""

import json
import pickle
import random
from collections import Counter

import numpy as np
import pytest

from reltrain.config.load import load_config
from reltrain.data import build
from reltrain.data.preprocess import CACHE_FORMAT, prepare
from reltrain.data.split import Split, encode_records
from reltrain.data.readers import read_labels, read_records
from reltrain.data.tokenize import Tokenizer
from reltrain.data.vocab import Vocab
from reltrain.runtime.errors import DataError

from conftest import ZH_ROWS, data_overrides, ok, torchrun, write_csv

SPLITS = ("train", "valid", "test")


def _in_memory(cfg, files: dict, labels: list[str]):
    """How the cache was built before it streamed: every record and token list at once."""
    tokenizer, index = Tokenizer.from_config(cfg), {name: i for i, name in enumerate(labels)}
    splits, token_lists = {}, {}
    for name, path in files.items():
        records = read_records(path, labels, skip_bad_rows=cfg.skip_bad_rows).records
        splits[name], token_lists[name] = encode_records(records, tokenizer, None, index,
                                                        cfg.max_len)
    counts = Counter(t for tokens in token_lists["train"] for t in tokens)
    kept = sorted((t for t, n in counts.items() if n >= cfg.min_freq), key=lambda t: (-counts[t], t))
    vocab = Vocab(["<pad>", "<unk>", *kept[:cfg.max_vocab or None]])
    for name, split in splits.items():
        split.token_ids = np.asarray([i for toks in token_lists[name] for i in vocab.encode(toks)],
                                     dtype=np.int32)
    return vocab, splits


def _assert_same(folder, splits: dict) -> None:
    for name, expected in splits.items():
        got = Split.load(folder / name)
        for key in ("token_ids", "offsets", "head", "tail", "labels"):
            np.testing.assert_array_equal(getattr(got, key), getattr(expected, key), err_msg=key)


@pytest.mark.parametrize("workers, chunk_rows, options", [
    (1, 4096, ["data.min_freq=2"]),
    (2, 37, ["data.min_freq=2", "data.max_vocab=150"]),
    (2, 50, ["data.min_freq=1", "data.lowercase=false"]),
])
def test_streamed_build_equals_the_in_memory_one(tmp_path, monkeypatch, small_en, workers,
                                                 chunk_rows, options):
    monkeypatch.setattr(build, "CHUNK_ROWS", chunk_rows)
    cfg = load_config(None, [*data_overrides(small_en), *options]).data
    files = {name: getattr(cfg, name) for name in SPLITS}
    given = read_labels(cfg.labels)
    labels, vocab, meta = build.write_splits(files, tmp_path, build.Spec(cfg), given, workers, False)
    expected_vocab, expected = _in_memory(cfg, files, given)
    assert labels == given and vocab.tokens == expected_vocab.tokens
    assert cfg.max_vocab == 0 or len(vocab) == cfg.max_vocab + 2
    assert meta["rows"] == {name: len(split) for name, split in expected.items()}
    _assert_same(tmp_path, expected)


def test_chinese_words_in_chunks_and_workers_with_bad_rows(tmp_path, monkeypatch):
    """jieba in two worker processes, chunks of 7 rows, a token's count spread over chunks,
    labels from the training rows, and bad rows skipped where they are."""
    monkeypatch.setattr(build, "CHUNK_ROWS", 7)
    rows = [(f"{text}，编号{n % 13}", *rest) for n in range(60) for text, *rest in [ZH_ROWS[n % 4]]]
    train = write_csv(tmp_path / "train.csv", rows)
    lines = train.read_text(encoding="utf-8").splitlines()
    lines[21] = lines[21].replace(",1,", ",99,")  # an offset the head is not at
    (tmp_path / "bad.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = load_config(None, [f"data.train={tmp_path / 'bad.csv'}", f"data.valid={train}",
                             "data.language=zh", "data.skip_bad_rows=true"]).data
    files = {"train": cfg.train, "valid": cfg.valid}
    out = tmp_path / "entry"
    out.mkdir()
    labels, vocab, meta = build.write_splits(files, out, build.Spec(cfg), None, 2, False)
    read = read_records(cfg.train, skip_bad_rows=True)
    assert labels == sorted({r.relation for r in read.records})
    assert meta["skipped"]["train"] == read.skipped and len(read.skipped) == 1
    expected_vocab, expected = _in_memory(cfg, files, labels)
    assert vocab.tokens == expected_vocab.tokens
    _assert_same(out, expected)
    cfg.skip_bad_rows = False
    (tmp_path / "again").mkdir()
    with pytest.raises(DataError) as raised:
        build.write_splits(files, tmp_path / "again", build.Spec(cfg), None, 2, False)
    assert str(raised.value) == read.skipped[0]


def test_token_counts_across_chunks_match_a_counter():
    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    chunks = [[rng.choice(words[: rng.randint(1, 300)]) for _ in range(rng.randint(0, 200))]
              for _ in range(40)]
    counts = build.TokenCounts(min_freq=3)
    for chunk in chunks:
        texts = sorted(set(chunk))
        hashes = np.asarray([build.token_hash(t) for t in texts], dtype=np.int64)
        counts.add(hashes, np.asarray([chunk.count(t) for t in texts]), texts)
    total = Counter(t for chunk in chunks for t in chunk)
    expected = sorted((t for t, n in total.items() if n >= 3), key=lambda t: (-total[t], t))
    vocab, hashes, ids = counts.vocab(max_vocab=0)
    assert vocab.tokens[2:] == expected
    assert counts.vocab(max_vocab=10)[0].tokens[2:] == expected[:10]
    assert sorted(ids.tolist()) == list(range(2, 2 + len(expected)))
    assert {vocab.tokens[i]: build.token_hash(vocab.tokens[i]) for i in ids} == \
        dict(zip((vocab.tokens[i] for i in ids), hashes.tolist()))


def test_the_cache_is_mapped_and_pickles_by_its_folder(tmp_path, small_en):
    cfg = load_config(None, [*data_overrides(small_en), f"data.cache_dir={tmp_path}"]).data
    prepared = prepare(cfg)
    train = prepared.splits["train"]
    assert isinstance(train.token_ids, np.memmap) and not train.token_ids.flags.writeable
    sent = pickle.dumps(train)
    assert len(sent) < 1000  # the folder, not the arrays
    back = pickle.loads(sent)
    np.testing.assert_array_equal(back.token_ids, train.token_ids)


def test_an_entry_of_an_older_format_is_rebuilt_not_read(tmp_path, small_en, caplog):
    cfg = load_config(None, [*data_overrides(small_en), f"data.cache_dir={tmp_path}"]).data
    first = prepare(cfg)
    meta_file = first.cache_path / "meta.json"
    meta = json.loads(meta_file.read_text())
    assert meta["format"] == CACHE_FORMAT
    meta_file.write_text(json.dumps({**meta, "format": CACHE_FORMAT - 1}))
    again = prepare(cfg)
    assert not again.reused and f"cache format {CACHE_FORMAT - 1}" in caplog.text
    assert prepare(cfg).reused


def test_every_rank_maps_the_same_cache_files(tmp_path, small_en):
    """Under DDP rank 0 builds the entry and every rank maps its arrays: nothing travels between
    the ranks but the go-ahead of ``main_first``."""
    script = tmp_path / "ranks.py"
    script.write_text(
        "import json, sys\nimport numpy as np\n"
        "from reltrain.runtime import distributed as D\nfrom reltrain.config.load import load_config\n"
        "from reltrain.data.preprocess import prepare\n"
        "cfg = load_config(None, sys.argv[1:])\n"
        "ctx = D.setup('cpu', cfg.dist)\n"
        "with ctx.main_first():\n    prepared = prepare(cfg.data)\n"
        "train = prepared.splits['train']\n"
        # one write per line, newline included: print writes the text and its end separately
        # (unbuffered under the workers' PYTHONUNBUFFERED), so two ranks' lines could interleave
        "sys.stdout.write('RANK ' + json.dumps([ctx.rank, str(train.folder),"
        " isinstance(train.token_ids, np.memmap), prepared.reused, int(train.token_ids.sum())])"
        " + '\\n')\n"
        "D.teardown(ctx)\n")
    result = ok(torchrun(2, str(script), *data_overrides(small_en), f"data.cache_dir={tmp_path / 'c'}"))
    ranks = sorted(json.loads(line.split("RANK ", 1)[1]) for line in result.stdout.splitlines()
                   if line.startswith("RANK "))
    assert [r[0] for r in ranks] == [0, 1]
    assert ranks[0][1] == ranks[1][1] and ranks[0][2] and ranks[1][2]
    assert not ranks[0][3] and ranks[1][3] and ranks[0][4] == ranks[1][4]
