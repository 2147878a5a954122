"""Generate the small English example bundled in src/reltrain/example_data/.

Sentences come from templates over invented names, so the data is free to ship. It is made to
teach something in a few epochs, not to be solved in one:
- paraphrases: each relation has templates that only the validation and test splits use;
- near misses: "no_relation" sentences that carry a relation's cue words ("was never hired
  by", "wrote a review of") for every pair of entity kinds, so neither the words nor the kinds
  of the two entities give the answer away;
- distractors: sentences with three entities, one row per pair, so the same sentence asks for
  different relations (and for none) depending on which two entities are marked;
- the same pair of names with different relations in different sentences;
- the head before or after the tail, and an entity's text repeated elsewhere in the sentence,
  so the character offsets (not string search) must locate the entities.

The same names and templates make the example of ``task=extract`` (``extract_*.jsonl``, reltrain's
own JSON lines: every entity of a sentence typed, every relation among them), with sentences of
two entities and one relation, of two and none (near misses), of three and two relations, and of
one pair that carries two relations (born and still living in a city).

    python examples/make_example_data.py        # rewrites the bundled files (deterministic)
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "reltrain" / "example_data"

FIRST = ["Alice", "Bruno", "Chen", "Dara", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas",
         "Kemal", "Lena", "Mateo", "Nadia", "Oskar", "Priya", "Quinn", "Rosa", "Sven", "Tara"]
LAST = ["Abara", "Bellweather", "Castell", "Drummond", "Ekwueme", "Fairlie", "Gorski", "Halloran",
        "Ivanova", "Jaramillo", "Kowal", "Lindqvist", "Moreau", "Nakamura", "Okafor", "Petrov"]
CITY = ["Avonlea", "Brightwater", "Corrin", "Dunmore", "Eastvale", "Fallowmere", "Glenhaven",
        "Highmoor", "Ironbridge", "Juniper Falls", "Kestrel Bay", "Lowmarsh", "Millbrook"]
COUNTRY = ["Norland", "Ostravia", "Pellucia", "Quarmia", "Rivenia", "Sundara", "Tolvania"]
ORG = ["Acme Robotics", "Bluefin Labs", "Cobalt Systems", "Delta Foods", "Evergreen Bank",
       "Fjord Media", "Granite Works", "Helix Pharma", "Ion Motors", "Juno Airlines"]
WORK = ["The Silent Harbor", "Winter Lights", "A Map of Salt", "The Glass Orchard",
        "Echoes of Tin", "Northern Rain", "The Last Ferry", "Paper Moons", "Iron Tides"]

# relation -> (head kind, tail kind, templates seen in training, templates held out for
# validation and test)
RELATIONS = {
    "born_in": ("person", "city", [
        "{h} was born in {t} in the spring of that year .",
        "Born in {t} , {h} later moved abroad .",
        "{t} is the birthplace of {h} , who grew up near the harbour .",
        "{h} , a native of {t} , studied law .",
    ], ["{h} came into the world in {t} .", "{t} , where {h} was born , is a quiet town ."]),
    "works_for": ("person", "org", [
        "{h} works as an engineer at {t} .",
        "{t} hired {h} as its new chief analyst .",
        "{h} joined {t} after leaving university .",
        "At {t} , {h} leads the research team .",
    ], ["{h} is employed by {t} .", "{t} pays {h} to run its laboratory ."]),
    "founded_by": ("org", "person", [
        "{h} was founded by {t} in a small garage .",
        "{t} started {h} with two friends .",
        "{t} , the founder of {h} , gave a speech .",
        "The company {h} was set up by {t} .",
    ], ["{t} created {h} twenty years ago .", "{h} owes its existence to {t} ."]),
    "capital_of": ("city", "country", [
        "{h} is the capital of {t} .",
        "The government of {t} sits in {h} .",
        "{t} moved its capital to {h} last century .",
        "{h} , capital city of {t} , hosted the summit .",
    ], ["{t} is governed from {h} .", "The parliament of {t} meets in {h} ."]),
    "located_in": ("org", "city", [
        "{h} has its headquarters in {t} .",
        "The offices of {h} are in {t} .",
        "In {t} , {h} opened a new building .",
        "{t} is home to {h} and several other firms .",
    ], ["{h} is based in {t} .", "Staff of {h} commute to its site in {t} ."]),
    "author_of": ("person", "work", [
        "{h} wrote {t} while living by the sea .",
        "{t} is a novel by {h} .",
        "The book {t} was written by {h} .",
        "{h} published {t} to wide acclaim .",
    ], ["{h} is the author of {t} .", "{t} , the debut of {h} , sold well ."]),
    "married_to": ("person", "person", [
        "{h} is married to {t} .",
        "{h} and {t} married in a quiet ceremony .",
        "{t} , the wife of {h} , attended the gala .",
        "{h} met {t} , whom he later married .",
    ], ["{h} and {t} are husband and wife .", "{t} has been the spouse of {h} for years ."]),
}

# Near misses: the cue words of a relation, but no relation between the two entities; for
# every pair of kinds that a relation has, so the kinds do not give the answer away.
NEAR_MISSES = {
    ("person", "city"): ["{h} was not born in {t} , whatever the papers say .",
                         "{h} visited {t} once on a business trip .",
                         "{h} has never been to {t} .", "A friend of {h} was born in {t} ."],
    ("person", "org"): ["{h} was never hired by {t} .", "{h} wrote a letter to {t} .",
                        "{t} turned down the application of {h} ."],
    ("org", "person"): ["{h} was not founded by {t} , who only invested .",
                        "{t} bought shares of {h} .", "{t} criticised {h} on television ."],
    ("city", "country"): ["{h} is not the capital of {t} .", "{h} lies near the border of {t} .",
                          "Trains from {h} to {t} run every hour ."],
    ("org", "city"): ["{h} has no office in {t} .", "{h} sponsored a festival in {t} .",
                      "{t} fined {h} for pollution ."],
    ("person", "work"): ["{h} wrote a review of {t} .", "{h} never read {t} .",
                         "{t} was translated by {h} ."],
    ("person", "person"): ["{h} is not married to {t} .", "{h} met {t} at a conference .",
                           "{h} and {t} were married to other people ."],
}
HELD_OUT_NEAR_MISSES = {
    ("person", "city"): ["{h} spent a holiday in {t} ."],
    ("person", "org"): ["{h} applied to {t} but was refused ."],
    ("org", "person"): ["{t} once worked as a cleaner at {h} ."],
    ("city", "country"): ["{h} is the second city of {t} ."],
    ("org", "city"): ["{h} moved out of {t} last year ."],
    ("person", "work"): ["{h} reviewed {t} harshly ."],
    ("person", "person"): ["{h} divorced {t} long ago ."],
}

# Three entities, one row per marked pair: (kinds of a, b, c; template; relation of each pair).
DISTRACTORS = [
    (("person", "org", "city"), "{a} , who works for {b} , was born in {c} .",
     {("a", "b"): "works_for", ("a", "c"): "born_in", ("b", "c"): "no_relation"}),
    (("person", "person", "city"), "{a} is married to {b} , who was born in {c} .",
     {("a", "b"): "married_to", ("b", "c"): "born_in", ("a", "c"): "no_relation"}),
    (("org", "person", "city"), "{a} , founded by {b} , has its headquarters in {c} .",
     {("a", "b"): "founded_by", ("a", "c"): "located_in", ("b", "c"): "no_relation"}),
    (("person", "work", "org"), "{a} wrote {b} while working for {c} .",
     {("a", "b"): "author_of", ("a", "c"): "works_for", ("b", "c"): "no_relation"}),
    (("city", "country", "person"), "{c} was born in {a} , the capital of {b} .",
     {("a", "b"): "capital_of", ("c", "a"): "born_in", ("c", "b"): "no_relation"}),
]


def name(kind: str, rng: random.Random) -> str:
    if kind == "person":
        return f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    return rng.choice({"city": CITY, "country": COUNTRY, "org": ORG, "work": WORK}[kind])


def distinct_names(kinds, rng: random.Random) -> list[str]:
    while True:
        names = [name(kind, rng) for kind in kinds]
        if len(set(names)) == len(names):
            return names


def fill(template: str, values: dict[str, str]) -> tuple[str, dict[str, tuple[int, int]]]:
    """The template with ``{key}`` replaced, and the character span of each key's value."""
    text, spans = "", {}
    rest = template
    while "{" in rest:
        before, _, after = rest.partition("{")
        key, _, rest = after.partition("}")
        text += before
        spans[key] = (len(text), len(text) + len(values[key]))
        text += values[key]
    return text + rest, spans


def row(text: str, spans: dict, head: str, tail: str, relation: str) -> dict:
    (hs, he), (ts, te) = spans[head], spans[tail]
    return {"text": text, "h": {"name": text[hs:he], "pos": [hs, he]},
            "t": {"name": text[ts:te], "pos": [ts, te]}, "relation": relation}


def pair_row(template: str, kinds: tuple[str, str], relation: str, rng: random.Random,
             names: list[str] | None = None) -> dict:
    h, t = names or distinct_names(kinds, rng)
    if rng.random() < 0.15:  # the head's text occurs again before the real mention
        template = "Not this {x} : " + template
    text, spans = fill(template, {"h": h, "t": t, "x": h.split()[0]})
    return row(text, spans, "h", "t", relation)


def make(n: int, rng: random.Random, held_out: bool) -> list[dict]:
    """About ``n`` rows: relations, near misses and distractor sentences in turn; with
    ``held_out`` a third of the templates drawn are the ones training never sees."""
    rows, relations = [], list(RELATIONS)
    while len(rows) < n:
        for relation in relations:
            hk, tk, seen, unseen = RELATIONS[relation]
            pool = unseen if held_out and rng.random() < 1 / 3 else seen
            rows.append(pair_row(rng.choice(pool), (hk, tk), relation, rng))
        for kinds in rng.sample(list(NEAR_MISSES), 4):
            pool = (HELD_OUT_NEAR_MISSES if held_out and rng.random() < 1 / 3 else NEAR_MISSES)[kinds]
            rows.append(pair_row(rng.choice(pool), kinds, "no_relation", rng))
        kinds, template, pairs = rng.choice(DISTRACTORS)
        text, spans = fill(template, dict(zip("abc", distinct_names(kinds, rng))))
        rows += [row(text, spans, h, t, rel) for (h, t), rel in pairs.items()]
        # One pair of names with another relation in another sentence.
        relation = rng.choice(relations)
        hk, tk, seen, _ = RELATIONS[relation]
        names = distinct_names((hk, tk), rng)
        rows.append(pair_row(rng.choice(seen), (hk, tk), relation, rng, names))
        rows.append(pair_row(rng.choice(NEAR_MISSES[(hk, tk)]), (hk, tk), "no_relation", rng,
                             names))
    rows = rows[:n]
    rng.shuffle(rows)
    return rows


TWO_ON_ONE_PAIR = (("person", "city"), ["{h} was born in {t} and still lives there .",
                                         "{h} , born in {t} , has lived there ever since ."],
                   ["{h} never left {t} , the town of {h2} birth ."], ("born_in", "lives_in"))


def sentence(template: str, kinds: dict[str, str], links, rng: random.Random) -> dict:
    """One sentence of the extraction example: ``kinds`` names each slot's kind, ``links``
    (head slot, tail slot, relation) its relations."""
    values = dict(zip(kinds, distinct_names(list(kinds.values()), rng)))
    values["h2"] = "her"
    text, spans = fill(template, values)
    slots = list(kinds)
    return {"text": text,
            "entities": [{"start": spans[k][0], "end": spans[k][1], "type": kinds[k]} for k in slots],
            "relations": [{"head": slots.index(h), "tail": slots.index(t), "type": r}
                          for h, t, r in links]}


def make_extraction(n: int, rng: random.Random, held_out: bool) -> list[dict]:
    """About ``n`` sentences for task=extract, the template kinds in turn."""
    rows = []
    while len(rows) < n:
        for relation, (hk, tk, seen, unseen) in RELATIONS.items():
            pool = unseen if held_out and rng.random() < 1 / 3 else seen
            rows.append(sentence(rng.choice(pool), {"h": hk, "t": tk}, [("h", "t", relation)], rng))
        for kinds in rng.sample(list(NEAR_MISSES), 3):
            rows.append(sentence(rng.choice(NEAR_MISSES[kinds]), dict(zip("ht", kinds)), [], rng))
        kinds, template, pairs = rng.choice(DISTRACTORS)
        links = [(h, t, r) for (h, t), r in pairs.items() if r != "no_relation"]
        rows.append(sentence(template, dict(zip("abc", kinds)), links, rng))
        pair, seen, unseen, both = TWO_ON_ONE_PAIR
        pool = unseen if held_out and rng.random() < 1 / 3 else seen
        rows.append(sentence(rng.choice(pool), dict(zip("ht", pair)),
                             [("h", "t", r) for r in both], rng))
    rows = rows[:n]
    rng.shuffle(rows)
    return rows


def main() -> None:
    rng = random.Random(7)
    OUT.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 1200), ("valid", 240), ("test", 240)):
        with open(OUT / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for one in make(n, rng, held_out=split != "train"):
                f.write(json.dumps(one, ensure_ascii=False) + "\n")
    for split, n in (("train", 600), ("valid", 120), ("test", 120)):
        with open(OUT / f"extract_{split}.jsonl", "w", encoding="utf-8") as f:
            for one in make_extraction(n, rng, held_out=split != "train"):
                f.write(json.dumps(one, ensure_ascii=False) + "\n")
    (OUT / "labels.txt").write_text("\n".join([*RELATIONS, "no_relation"]) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
