"""jieba's words (accurate mode, HMM on), faster, as the models were trained on jieba's words:
``rjieba``'s own cut for blocks of Chinese characters, letters and digits; for a block with one of
jieba's symbols, rjieba's dictionary path with unknown runs through jieba's own HMM. Where that
path cannot be read back, or with jieba's dictionary changed, jieba segments."""

from __future__ import annotations

import logging
import re
from functools import lru_cache

from reltrain.data.private import default_cache_dir, owned_privately


@lru_cache(maxsize=1)
def _jieba():
    """jieba, imported and quietened once (setLogLevel clears logging's caches, so calling it per
    sentence was costly). Its dictionary is not loaded here: the fast path asks rjieba's, and
    jieba's would be a second large table in every process (docs/benchmarks.md)."""
    import jieba

    import jieba.finalseg  # the HMM, called per unknown run: imported once here

    jieba.setLogLevel(logging.WARNING)
    # jieba's default cache is /tmp/jieba.cache, loaded whoever wrote it: another user could plant
    # a segmentation there. This user's own folder instead.
    jieba.dt.tmp_dir = _private_folder()
    return jieba


def _loaded_jieba():
    """jieba with its dictionary loaded, by jieba itself (its cache in reltrain's folder), for the
    text jieba segments: only where rjieba cannot (a changed dictionary, forced splits), so a
    faster load would serve the rare case."""
    jieba = _jieba()
    jieba.initialize()  # a no-op once loaded
    return jieba


def _private_folder() -> str:
    """``$XDG_CACHE_HOME/reltrain/jieba``, made private to this user; a fresh temporary folder
    where that cannot be had (it is then rebuilt at each start, a second)."""
    import tempfile

    folder = default_cache_dir() / "jieba"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if owned_privately(folder):
            return str(folder)
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="reltrain-jieba-")


@lru_cache(maxsize=1)
def _first_seen(dt) -> tuple[int, int]:
    """The size and total count of jieba's dictionary when reltrain first saw it loaded."""
    return len(dt.FREQ), dt.total


def _fast():
    """rjieba while jieba's dictionary is its own and unchanged; a custom dictionary, an added or
    deleted word or a new count, none of which rjieba would know, sends every sentence to jieba.
    Changing a word loads jieba's dictionary first, so one never loaded is unchanged."""
    import rjieba  # its dictionary is jieba's packaged one

    jieba = _jieba()
    dt = jieba.dt
    if (dt.dictionary != jieba.DEFAULT_DICT or jieba.finalseg.Force_Split_Words
            or (dt.initialized and (len(dt.FREQ), dt.total) != _first_seen(dt))):
        return None
    return rjieba


# Blocks of Chinese characters (finalseg's range), letters and digits alone: there rjieba's HMM
# gives finalseg's words (the same tables, sums and tie-breaks; tests/test_segment.py). With one of
# jieba's symbols it may not: "5-10" is one word to rjieba, "5", "-", "10" to finalseg, and random
# blocks with a "." part too. Such blocks (one in a hundred of deepke-zh's) take rjieba's
# dictionary path and jieba's own HMM.
_PLAIN = re.compile(r"[\u4E00-\u9FD5a-zA-Z0-9]+").fullmatch


def jieba_words(text: str) -> list[str]:
    """``jieba.lcut(text)``, faster."""
    fast = _fast()
    if fast is None:
        return _loaded_jieba().lcut(text)
    jieba = _jieba()
    han, skip = jieba.re_han_default, jieba.re_skip_default
    out: list[str] = []
    for block in han.split(text):
        if not block:
            continue
        if han.match(block):
            if _PLAIN(block):  # all of rjieba's own cut is jieba's
                out += fast.cut(block, True)
                continue
            words = _block_words(block, fast)
            out.extend(words if words is not None else _loaded_jieba().dt.cut(block))
        else:  # jieba.Tokenizer.cut's handling of what is not a word block
            for part in skip.split(block):
                if skip.match(part):
                    out.append(part)
                else:
                    out.extend(part)
    return out


def _block_words(block: str, fast) -> list[str] | None:
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
            if fast.has_word(word):  # jieba's packaged dictionary has none
                return None  # a dictionary word or glued single steps: ambiguous
            run += word
            continue
        if run:
            _flush(run, out, fast)
            run = ""
        out.append(word)
    if run:
        _flush(run, out, fast)
    return out


def _flush(run: str, out: list[str], fast) -> None:
    """A run of one-character steps, as jieba's accurate mode treats it."""
    if len(run) == 1:
        out.append(run)
    elif not fast.has_word(run):  # a word of jieba's: count >= 1, as rjieba.has_word
        out.extend(_jieba().finalseg.cut(run))
    else:
        out.extend(run)
