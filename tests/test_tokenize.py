import pytest

from reltrain.data.schema import Entity, Record
from reltrain.data.tokenize import Tokenizer, truncate


def rec(text, h, t, tokens=None):
    (hs, he), (ts, te) = h, t
    return Record(text, Entity(text[hs:he], hs, he), Entity(text[ts:te], ts, te), "r", "x:1", tokens)


def span_text(tok, span):
    return tok.tokens[span[0]:span[1]]


@pytest.mark.parametrize("kind", ["jieba", "char"])
def test_zh_entity_occurring_twice_uses_the_offset(kind):
    text = "张玲导演说，张玲很满意《红楼》的拍摄"
    out = Tokenizer(kind)(rec(text, (12, 14), (6, 8)), max_len=100)
    assert "".join(span_text(out, out.tail)) == "张玲"
    assert out.tail[0] > 1  # the second 张玲, not the first at position 0
    assert "".join(span_text(out, out.head)) == "红楼"


def test_jieba_token_never_straddles_an_entity_edge():
    text = "清水秋风创作了逐风行"  # jieba alone would glue entity and neighbours
    out = Tokenizer("jieba")(rec(text, (7, 10), (0, 4)), max_len=100)
    assert "".join(span_text(out, out.head)) == "逐风行"
    assert "".join(span_text(out, out.tail)) == "清水秋风"


def test_english_head_after_tail_adjacent_and_lowercase():
    text = "Paris France is where Ann lives"
    out = Tokenizer("word", lowercase=True)(rec(text, (6, 12), (0, 5)), max_len=100)
    assert span_text(out, out.head) == ["france"] and span_text(out, out.tail) == ["paris"]
    assert out.tail[1] == out.head[0]  # adjacent spans


def test_nested_and_overlapping_entities():
    text = "The University of Oslo Press printed it"
    out = Tokenizer("word")(rec(text, (4, 22), (18, 28)), max_len=100)  # overlap on "Oslo"
    assert span_text(out, out.head) == ["University", "of", "Oslo"]
    assert span_text(out, out.tail) == ["Oslo", "Press"]
    nested = Tokenizer("word")(rec(text, (4, 28), (18, 22)), max_len=100)
    assert span_text(nested, nested.tail) == ["Oslo"]


def test_pretokenized_tokens_are_kept():
    tokens = ("New", "York", "is", "big")
    text = " ".join(tokens)
    out = Tokenizer("word", lowercase=True)(rec(text, (0, 8), (12, 15), tokens), max_len=100)
    assert out.tokens == ["new", "york", "is", "big"] and out.head == (0, 2) and out.tail == (3, 4)


def test_truncate_centres_on_entities_and_never_cuts_one():
    tokens = [f"w{i}" for i in range(100)]
    out = truncate(tokens, (60, 62), (70, 71), max_len=20)
    assert len(out.tokens) == 20 and out.truncated
    assert out.tokens[out.head[0]:out.head[1]] == ["w60", "w61"]
    assert out.tokens[out.tail[0]:out.tail[1]] == ["w70"]
    wide = truncate(tokens, (5, 6), (90, 92), max_len=20)  # entities further apart than max_len
    assert wide.tokens[wide.head[0]] == "w5" and wide.tokens[wide.tail[1] - 1] == "w91"
    end = truncate(tokens, (97, 98), (99, 100), max_len=20)
    assert len(end.tokens) == 20 and end.tokens[end.tail[0]] == "w99"
    short = truncate(tokens[:10], (0, 1), (2, 3), max_len=20)
    assert not short.truncated and short.tokens == tokens[:10]
