"""jieba's HMM for unknown runs of Chinese characters, the same words as ``jieba.finalseg.cut`` to
the bit, with the four states as local variables instead of a general Viterbi, for the blocks
rjieba's HMM would cut otherwise (``segment``; ``tests/test_segment.py`` compares every run of
deepke-zh)."""

from __future__ import annotations

from functools import lru_cache


def cut(run: str) -> list[str]:
    """``list(jieba.finalseg.cut(run))``."""
    return _cut()(run)


@lru_cache(maxsize=1)
def _cut():
    """``cut``, built once around finalseg's tables (locals are what makes it fast); finalseg's
    own ``cut`` if its HMM is not the four-state one this search was written for."""
    from jieba import finalseg

    if finalseg.PrevStatus != {"B": "ES", "M": "MB", "S": "SE", "E": "BM"}:
        return lambda run: list(finalseg.cut(run))
    start, trans, emit, low = finalseg.start_P, finalseg.trans_P, finalseg.emit_P, finalseg.MIN_FLOAT
    sB, sM, sE, sS = start["B"], start["M"], start["E"], start["S"]
    tEB, tSB, tMM, tBM = trans["E"]["B"], trans["S"]["B"], trans["M"]["M"], trans["B"]["M"]
    tSS, tES, tBE, tME = trans["S"]["S"], trans["E"]["S"], trans["B"]["E"], trans["M"]["E"]
    eB, eM, eE, eS = (emit[y].get for y in "BMES")
    # finalseg's own split: its Viterbi only ever sees runs of re_han's characters.
    han, blocks, skip = finalseg.re_han.fullmatch, finalseg.re_han.split, finalseg.re_skip.split
    starts_han = finalseg.re_han.match

    def fast_cut(run: str) -> list[str]:
        if finalseg.Force_Split_Words:
            return list(finalseg.cut(run))  # words forced apart: finalseg's own way
        if han(run):
            return viterbi_words(run)
        out = []  # with letters or digits: split as finalseg.cut splits it
        for block in blocks(run):
            if starts_han(block):
                out += viterbi_words(block)
            else:
                out += [part for part in skip(block) if part]
        return out

    def viterbi_words(run: str) -> list[str]:
        c = run[0]
        vB, vM, vE, vS = sB + eB(c, low), sM + eM(c, low), sE + eE(c, low), sS + eS(c, low)
        back = []  # per character after the first: the previous state of B, M, E and S
        for c in run[1:]:
            # Each state's two predecessors in PrevStatus order; on equal probabilities the
            # later letter, as max over (probability, state) tuples picks.
            em = eB(c, low)
            a, b = vE + tEB + em, vS + tSB + em
            nB, pB = (b, 3) if b >= a else (a, 2)
            em = eM(c, low)
            a, b = vM + tMM + em, vB + tBM + em
            nM, pM = (a, 1) if a >= b else (b, 0)
            em = eS(c, low)
            a, b = vS + tSS + em, vE + tES + em
            nS, pS = (a, 3) if a >= b else (b, 2)
            em = eE(c, low)
            a, b = vB + tBE + em, vM + tME + em
            nE, pE = (b, 1) if b >= a else (a, 0)
            vB, vM, vE, vS = nB, nM, nE, nS
            back.append((pB, pM, pE, pS))
        return _words(run, back, 3 if vS >= vE else 2)  # the path ends in S or E

    return fast_cut


def _words(run: str, back: list[tuple[int, int, int, int]], state: int) -> list[str]:
    """The best path, ending in ``state`` (0..3: B, M, E, S), read back through ``back``, then
    into words as finalseg.__cut reads it (also any path its ties could give: a trailing B or M
    is one word, an E after an S runs from the last B or the start)."""
    states = [state]
    for step in reversed(back):
        state = step[state]
        states.append(state)
    states.reverse()
    out, begin, nexti = [], 0, 0
    for i, state in enumerate(states):
        if state == 0:
            begin = i
        elif state == 2:
            out.append(run[begin:i + 1])
            nexti = i + 1
        elif state == 3:
            out.append(run[i])
            nexti = i + 1
    if nexti < len(run):
        out.append(run[nexti:])
    return out
