"""Generate the small English example bundled in src/reltrain/example_data/.

Sentences come from templates over invented names, so the data is free to ship. Templates put
the head before or after the tail, and some repeat an entity's text elsewhere in the sentence,
so the character offsets (not string search) must locate the entities.

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

# relation -> (head kind, tail kind, templates with {h} and {t})
RELATIONS = {
    "born_in": ("person", "city", [
        "{h} was born in {t} in the spring of that year .",
        "Born in {t} , {h} later moved abroad .",
        "{t} is the birthplace of {h} , who grew up near the harbour .",
        "{h} , a native of {t} , studied law .",
    ]),
    "works_for": ("person", "org", [
        "{h} works as an engineer at {t} .",
        "{t} hired {h} as its new chief analyst .",
        "{h} joined {t} after leaving university .",
        "At {t} , {h} leads the research team .",
    ]),
    "founded_by": ("org", "person", [
        "{h} was founded by {t} in a small garage .",
        "{t} started {h} with two friends .",
        "{t} , the founder of {h} , gave a speech .",
        "The company {h} was set up by {t} .",
    ]),
    "capital_of": ("city", "country", [
        "{h} is the capital of {t} .",
        "The government of {t} sits in {h} .",
        "{t} moved its capital to {h} last century .",
        "{h} , capital city of {t} , hosted the summit .",
    ]),
    "located_in": ("org", "city", [
        "{h} has its headquarters in {t} .",
        "The offices of {h} are in {t} .",
        "In {t} , {h} opened a new building .",
        "{t} is home to {h} and several other firms .",
    ]),
    "author_of": ("person", "work", [
        "{h} wrote {t} while living by the sea .",
        "{t} is a novel by {h} .",
        "The book {t} was written by {h} .",
        "{h} published {t} to wide acclaim .",
    ]),
    "married_to": ("person", "person", [
        "{h} is married to {t} .",
        "{h} and {t} married in a quiet ceremony .",
        "{t} , the wife of {h} , attended the gala .",
        "{h} met {t} , whom he later married .",
    ]),
    "no_relation": ("person", "city", [
        "{h} visited {t} once on a business trip .",
        "{h} has never been to {t} .",
        "{t} was mentioned by {h} in an interview .",
        "A friend of {h} lives in {t} .",
    ]),
}


def name(kind: str, rng: random.Random) -> str:
    if kind == "person":
        return f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    return rng.choice({"city": CITY, "country": COUNTRY, "org": ORG, "work": WORK}[kind])


def make(n: int, rng: random.Random) -> list[dict]:
    rows = []
    for i in range(n):
        relation = list(RELATIONS)[i % len(RELATIONS)]
        hk, tk, templates = RELATIONS[relation]
        h, t = name(hk, rng), name(tk, rng)
        while t == h:
            t = name(tk, rng)
        template = rng.choice(templates)
        if rng.random() < 0.15:  # the head's text occurs again before the real mention
            template = f"Not this {{x}} : " + template
        text = template.replace("{x}", h.split()[0])
        hs, ts = text.index("{h}"), text.index("{t}")
        # Fill the later placeholder first so the earlier one's offset stays valid.
        for key, value in sorted([("{h}", h), ("{t}", t)], key=lambda kv: -text.index(kv[0])):
            text = text.replace(key, value, 1)
        if hs < ts:
            ts += len(h) - 3
        else:
            hs += len(t) - 3
        assert text[hs:hs + len(h)] == h and text[ts:ts + len(t)] == t
        rows.append({"text": text, "h": {"name": h, "pos": [hs, hs + len(h)]},
                     "t": {"name": t, "pos": [ts, ts + len(t)]}, "relation": relation})
    rng.shuffle(rows)
    return rows


def main() -> None:
    rng = random.Random(7)
    OUT.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 1200), ("valid", 240), ("test", 240)):
        with open(OUT / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for row in make(n, rng):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    (OUT / "labels.txt").write_text("\n".join(RELATIONS) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
