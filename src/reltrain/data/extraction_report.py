"""What ``reltrain inspect`` says about a file of the extraction task: sentences, entity mentions
and relations by type, nested or overlapping mentions, pairs that carry several relations, what
a string format could not place, validation sentences that are also training sentences, and the
bad rows (counted, the first few named)."""

from __future__ import annotations

from collections import Counter

from reltrain.data.extraction import KINDS, detect, iter_annotated
from reltrain.data.report import BAD_ROWS_NAMED
from reltrain.runtime.errors import DataError


def extraction_report(files: dict[str, str], encoding: str = "utf-8") -> dict:
    """The report of ``files`` (split -> path, ``train`` first)."""
    splits, texts = {}, {}
    for name, path in files.items():
        kind = detect(path, encoding)
        split = {"file": str(path), "format": KINDS[kind], "sentences": 0, "entities": Counter(),
                 "relations": Counter(), "triples": 0, "overlapping_mentions": 0,
                 "pairs_with_several_relations": 0,
                 "strings_not_found": 0, "compound_objects": 0, "bad_rows": 0, "bad_examples": []}
        seen = texts.setdefault(name, set())
        for _, build in iter_annotated(path, encoding, kind=kind):
            try:
                parsed = build()
            except DataError as exc:
                split["bad_rows"] += 1
                if len(split["bad_examples"]) < BAD_ROWS_NAMED:
                    split["bad_examples"].append(str(exc))
                continue
            split["strings_not_found"] += parsed.unmatched
            split["compound_objects"] += parsed.compound
            for sentence in parsed.sentences:
                _count(split, sentence)
                seen.add(sentence.text.strip())
        split["entities"] = dict(split["entities"].most_common())
        split["relations"] = dict(split["relations"].most_common())
        splits[name] = split
    report: dict = {"task": "extract", "splits": splits}
    if "train" in texts:
        report["sentences_in_train"] = {name: len(keys & texts["train"])
                                        for name, keys in texts.items() if name != "train"}
    return report


def _count(split: dict, sentence) -> None:
    ents = sentence.entities
    split["sentences"] += 1
    split["entities"].update(e.type for e in ents)
    split["relations"].update(r.type for r in sentence.relations)
    split["overlapping_mentions"] += sum(1 for i, a in enumerate(ents) for b in ents[i + 1:]
                                         if a.start < b.end and b.start < a.end)
    if sentence.strings:  # DuIE: a triple links every mention of its subject and its object
        text = sentence.text
        split["triples"] += len({(text[ents[r.head].start:ents[r.head].end], r.type,
                                  text[ents[r.tail].start:ents[r.tail].end])
                                 for r in sentence.relations})
    pairs = Counter((r.head, r.tail) for r in sentence.relations)
    split["pairs_with_several_relations"] += sum(1 for n in pairs.values() if n > 1)


def extraction_lines(report: dict) -> list[str]:
    """The report as lines for people."""
    lines = []
    for name, s in report["splits"].items():
        ents = ", ".join(f"{k} {v}" for k, v in list(s["entities"].items())[:8])
        rels = ", ".join(f"{k} {v}" for k, v in list(s["relations"].items())[:8])
        more = f", ... ({len(s['relations'])} relations)" if len(s["relations"]) > 8 else ""
        lines.append(f"{name}: {s['file']} ({s['format']}): {s['sentences']} sentences; "
                     f"{sum(s['entities'].values())} entity mentions ({ents}); "
                     f"{sum(s['relations'].values())} relations ({rels}{more})"
                     + (f"; {s['triples']} string triples" if s["triples"] else ""))
        notes = [f"{s[key]} {what}" for key, what in (
            ("overlapping_mentions", "pairs of nested or overlapping mentions"),
            ("pairs_with_several_relations", "pairs with several relations"),
            ("strings_not_found", "triples whose subject or object string is not in its text "
                                  "(left out)"),
            ("compound_objects", "compound objects (their @value kept)")) if s[key]]
        if s["bad_rows"]:
            notes.append(f"{s['bad_rows']} row(s) cannot be read; first: "
                         + "; ".join(s["bad_examples"]))
        lines += [f"  {note}" for note in notes]
    for name, n in report.get("sentences_in_train", {}).items():
        if n:
            lines.append(f"  {n} sentence(s) of {name} are also in train")
    return lines
