"""The fast jieba path gives jieba's own words, or it would change what trained models see."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHARED_DATA
from reltrain.data import segment
from reltrain.data.schema import Entity, Record
from reltrain.data.tokenize import Tokenizer

pytest.importorskip("rjieba")

jieba = segment._loaded_jieba()  # the tests compare with jieba.lcut, which loads it


def deepke_rows() -> list[dict]:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is not here")
    rows = []
    for name in ("train", "valid", "test"):
        with open(SHARED_DATA / f"{name}.csv", encoding="utf-8", newline="") as f:
            rows += list(csv.DictReader(f))
    return rows


def test_fast_path_is_on():
    assert segment._fast() is not None


def test_the_fast_path_leaves_jiebas_dictionary_unloaded():
    """Each prediction worker would otherwise hold jieba's 73 MB beside rjieba's."""
    text = "黄得功，本姓王，安徽合肥人。2014年任金山软件CEO"
    code = ("import json, sys, jieba; from reltrain.data import segment; "
            "words = segment.jieba_words(sys.argv[1]); "
            "print(json.dumps([words, jieba.dt.initialized, len(jieba.dt.FREQ)]))")
    out = subprocess.run([sys.executable, "-c", code, text], capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout) == [jieba.lcut(text), False, 0]


@pytest.mark.parametrize("route", ["rjieba's HMM where it agrees", "dictionary path alone"])
def test_every_deepke_sentence_and_entity_piece_as_jieba_cuts_it(route, monkeypatch):
    if route == "dictionary path alone":
        dictionary_path_only(monkeypatch)
    for row in deepke_rows():
        text = row["sentence"]
        h, t = int(row["head_offset"]), int(row["tail_offset"])
        bounds = sorted({0, len(text), h, h + len(row["head"]), t, t + len(row["tail"])})
        for piece in [text] + [text[a:b] for a, b in zip(bounds, bounds[1:])]:
            assert segment.jieba_words(piece) == jieba.lcut(piece), piece


def test_token_offsets_as_jieba_tokenize_gives_them():
    row = deepke_rows()[0]
    h, t = int(row["head_offset"]), int(row["tail_offset"])
    rec = Record(text=row["sentence"], head=Entity(row["head"], h, h + len(row["head"])),
                 tail=Entity(row["tail"], t, t + len(row["tail"])), relation=None,
                 source="test")
    cuts = {h, h + len(row["head"]), t, t + len(row["tail"])}
    bounds = sorted({0, len(rec.text), *cuts})
    expected = [(w, a + s, a + e) for a, b in zip(bounds, bounds[1:])
                for w, s, e in jieba.tokenize(rec.text[a:b]) if w.strip()]
    assert Tokenizer("jieba").pieces(rec.text, cuts) == expected


# Common characters, letters, digits, full-width forms, punctuation and spaces: the places where
# jieba's blocks, glued letters and HMM runs meet.
ALPHABET = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理府研质 ABCxyz0123456789ＡＢ１２.,-_%#&+。，、；：？！“”（）《》 \t"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=60))
def test_any_mix_of_characters_as_jieba_cuts_it(text):
    assert segment.jieba_words(text) == jieba.lcut(text)


def test_added_words_send_sentences_to_jieba(monkeypatch):
    monkeypatch.setattr(jieba.dt, "FREQ", dict(jieba.dt.FREQ))
    monkeypatch.setattr(jieba.dt, "total", jieba.dt.total)
    jieba.add_word("抗清英雄黄")  # rjieba does not know it
    text = "明朝末年抗清英雄黄得功"
    assert segment._fast() is None
    assert segment.jieba_words(text) == jieba.lcut(text)
    assert "抗清英雄黄" in segment.jieba_words(text)


# Characters by the states whose emission tables hold them (BMES, S, none, BS, ME, ...): drawn
# evenly from each such group, runs hit the HMM's ties and impossible paths, where its
# tie-breaks decide the words.
_EMIT = jieba.finalseg.emit_P
_GROUPS: dict[str, list[str]] = {}
for _c in map(chr, range(0x4E00, 0x9FD6)):
    _GROUPS.setdefault("".join(y for y in "BMES" if _c in _EMIT[y]), []).append(_c)
_RUN_CHARS = st.sampled_from(sorted(_GROUPS)).flatmap(lambda k: st.sampled_from(_GROUPS[k][:20]))


@settings(max_examples=800, deadline=None)
@given(st.lists(_RUN_CHARS | st.sampled_from(list("ab1")), min_size=1, max_size=12).map("".join))
def test_rjiebas_hmm_gives_jiebas_words_on_plain_blocks(block):
    """Blocks of Chinese characters, letters and digits are cut by rjieba's HMM: its ties and
    impossible paths decide as finalseg's."""
    assert segment._PLAIN(block)
    assert segment.jieba_words(block) == jieba.lcut(block)


def test_rjiebas_hmm_is_left_to_blocks_without_symbols():
    """Where rjieba parts from finalseg: after a letter or digit and a symbol."""
    for text in ("小说已于2014-08-13正式发布", "第1-3届", "a+1", "50%5", "1_2", "在理9.b二子"):
        assert not segment._PLAIN(text)
        assert segment.jieba_words(text) == jieba.lcut(text), text


def dictionary_path_only(monkeypatch) -> None:
    """Every block down rjieba's dictionary path, its unknown runs through jieba's HMM."""
    monkeypatch.setattr(segment, "_PLAIN", lambda block: None)


def test_changed_counts_and_deleted_words_send_sentences_to_jieba(monkeypatch):
    monkeypatch.setattr(jieba.dt, "FREQ", dict(jieba.dt.FREQ))
    monkeypatch.setattr(jieba.dt, "total", jieba.dt.total)
    monkeypatch.setattr(jieba.finalseg, "Force_Split_Words", set())
    text = "今天天气不错"
    jieba.suggest_freq(("今天", "天气"), tune=True)  # a known word's count, not a new word
    assert segment._fast() is None
    assert segment.jieba_words(text) == jieba.lcut(text)
    monkeypatch.setattr(jieba.dt, "total", segment._first_seen(jieba.dt)[1])
    jieba.del_word("不错")  # count 0 and forced apart in the HMM: the total is unchanged
    assert segment._fast() is None
    assert segment.jieba_words(text) == jieba.lcut(text)


# Real sentences for machines without ../shared/data: names and places jieba's dictionary lacks
# (the HMM's runs), numbers, letters and full-width punctuation.
SENTENCES = [
    "明朝末年抗清英雄黄得功，本姓王，安徽合肥人后改姓黄。",
    "欧阳震华出生于香港，1980年加入无线电视，主演过《创世纪》。",
    "张艺谋执导的电影《英雄》于2002年12月在北京首映，票房超过2.5亿元。",
    "司马迁撰写的《史记》记载了从黄帝到汉武帝约三千年的历史。",
    "钱钟书与杨绛于1935年结婚，婚后同赴英国牛津大学留学。",
    "诸葛亮躬耕于南阳卧龙岗，刘备三顾茅庐请他出山。",
    "小米公司创始人雷军毕业于武汉大学计算机系，曾任金山软件CEO。",
    "谷爱凌在北京冬奥会自由式滑雪女子大跳台比赛中夺得金牌。",
    "浙江省绍兴市柯桥区齐贤镇的羊山石佛寺始建于隋朝开皇年间。",
    "阿里巴巴集团的总部位于杭州市余杭区文一西路969号。",
    "鲁迅原名周树人，字豫才，浙江绍兴人，代表作有《呐喊》《彷徨》。",
    "郎平担任中国女排主教练期间，球队获得了2016年里约奥运会冠军。",
    "苏轼，字子瞻，号东坡居士，眉州眉山人，与父苏洵、弟苏辙合称三苏。",
    "华为技术有限公司成立于1987年，总部位于广东省深圳市龙岗区坂田街道。",
    "据新华社报道，嫦娥五号探测器于2020年11月24日在文昌航天发射场成功发射。",
]


@pytest.mark.parametrize("route", ["rjieba's HMM where it agrees", "dictionary path alone"])
def test_written_sentences_as_jieba_cuts_them(route, monkeypatch):
    if route == "dictionary path alone":
        dictionary_path_only(monkeypatch)
    for text in SENTENCES:
        assert segment.jieba_words(text) == jieba.lcut(text), text
