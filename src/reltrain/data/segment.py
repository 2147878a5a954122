"""jieba's words (accurate mode, HMM on), faster: the dictionary path from ``rjieba``, unknown runs
through jieba's own HMM (``jieba_hmm``), as the models were trained on jieba's words. Where the
path cannot be read back, without rjieba, or with jieba's dictionary changed, jieba segments."""

from __future__ import annotations

import logging
import marshal
from functools import lru_cache

from reltrain.data import jieba_hmm


@lru_cache(maxsize=1)
def _jieba():
    """jieba, imported, quietened and loaded once: it takes a second and logs on first use, and
    setLogLevel on every call cost a quarter of prediction time (logging clears its caches)."""
    import jieba

    import jieba.finalseg  # the HMM, called per unknown run: imported once here

    jieba.setLogLevel(logging.WARNING)
    # jieba's default cache is /tmp/jieba.cache, loaded whoever wrote it: another user could plant
    # a segmentation there. This user's own folder instead.
    jieba.dt.tmp_dir = _private_folder()
    if jieba.dt.dictionary is None and not jieba.dt.initialized:  # the packaged dictionary
        _load_dictionary(jieba.dt)
    jieba.initialize()  # a no-op once loaded; jieba's own way for any other dictionary
    return jieba


def _load_dictionary(tokenizer) -> None:
    """jieba's packaged dictionary into ``tokenizer``, from the cache file jieba itself writes in
    its ``tmp_dir`` (built and written as jieba does when missing or malformed), read in one call:
    jieba's ``marshal.load`` reads the file a few bytes at a time (1.1 s against 0.26 s at the
    start of every Chinese ``reltrain predict``)."""
    import contextlib
    import os
    import tempfile

    cache = os.path.join(tokenizer.tmp_dir, "jieba.cache")
    try:
        with open(cache, "rb") as f:
            freq, total = marshal.loads(f.read())
        if not isinstance(freq, dict) or not isinstance(total, int):
            raise ValueError("not a jieba dictionary cache")
    except (OSError, ValueError, EOFError, TypeError):
        freq, total = tokenizer.gen_pfdict(tokenizer.get_dict_file())
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=tokenizer.tmp_dir)
            with os.fdopen(fd, "wb") as f:
                marshal.dump((freq, total), f)
            os.replace(tmp, cache)
        except OSError:  # read-only or full: built again at the next start
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
    tokenizer.FREQ, tokenizer.total, tokenizer.initialized = freq, total, True


def _private_folder() -> str:
    """``$XDG_CACHE_HOME/reltrain/jieba``, made private to this user; a fresh temporary folder
    where that cannot be had (it is then rebuilt at each start, a second)."""
    import tempfile

    from reltrain.data.preprocess import default_cache_dir, owned_privately

    folder = default_cache_dir() / "jieba"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if owned_privately(folder):
            return str(folder)
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="reltrain-jieba-")


@lru_cache(maxsize=1)
def _rjieba():
    """rjieba and jieba's dictionary as loaded (its size and total count), or None without
    rjieba."""
    try:
        import rjieba
    except ImportError:
        return None
    dt = _jieba().dt
    return rjieba, (len(dt.FREQ), dt.total)


def _fast():
    """rjieba while jieba's dictionary is its own and unchanged; a custom dictionary, an added or
    deleted word or a new count, none of which rjieba would know, sends every sentence to jieba."""
    jieba, loaded = _jieba(), _rjieba()
    dt = jieba.dt
    if (loaded is None or dt.dictionary != jieba.DEFAULT_DICT
            or (len(dt.FREQ), dt.total) != loaded[1] or jieba.finalseg.Force_Split_Words):
        return None
    return loaded[0]


def jieba_words(text: str) -> list[str]:
    """``jieba.lcut(text)``, faster."""
    jieba = _jieba()
    fast = _fast()
    if fast is None:
        return jieba.lcut(text)
    freq, han, skip = jieba.dt.FREQ, jieba.re_han_default, jieba.re_skip_default
    out: list[str] = []
    for block in han.split(text):
        if not block:
            continue
        if han.match(block):
            words = _block_words(block, fast, freq)
            out.extend(words if words is not None else jieba.dt.cut(block))
        else:  # jieba.Tokenizer.cut's handling of what is not a word block
            for part in skip.split(block):
                if skip.match(part):
                    out.append(part)
                else:
                    out.extend(part)
    return out


def _block_words(block: str, fast, freq: dict) -> list[str] | None:
    out: list[str] = []
    run = ""  # one-character steps of the path not yet flushed
    for word in fast.cut(block, False):
        if len(word) == 1:
            run += word
            continue
        # jieba's HMM-off mode glues runs of single letters and digits ([a-zA-Z0-9], which is
        # what ASCII isalnum means) into one word: it stands for one-character steps of the
        # path unless the dictionary holds it.
        if word.isascii() and word.isalnum():
            if freq.get(word):
                return None  # a dictionary word or glued single steps: ambiguous
            run += word
            continue
        if run:
            _flush(run, out, freq)
            run = ""
        out.append(word)
    if run:
        _flush(run, out, freq)
    return out


def _flush(run: str, out: list[str], freq: dict) -> None:
    """A run of one-character steps, as jieba's accurate mode treats it."""
    if len(run) == 1:
        out.append(run)
    elif not freq.get(run):
        out.extend(jieba_hmm.cut(run))
    else:
        out.extend(run)
