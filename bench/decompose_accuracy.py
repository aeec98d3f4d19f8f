"""How well does ``decompose`` split the hand-labelled corpus? Printed per kind and language.

A prompt counts as an exact split when the parts found are, in order, exactly the labelled
parts (whitespace-normalised). Dependencies are scored on what execution uses: a labelled
edge i -> j is kept when j waits for i directly or through other parts; an extra edge makes
a part wait needlessly (costs time, not quality).

Run from the repository root::

    python bench/decompose_accuracy.py [--corpus tests/data/decompose_corpus.jsonl] [-v]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from splitter import decompose

DEFAULT = Path(__file__).resolve().parent.parent / "tests" / "data" / "decompose_corpus.jsonl"


def _norm(text: str) -> str:
    return " ".join(text.split())


def closure(edges: dict[int, set[int]]) -> set[tuple[int, int]]:
    """Every (ancestor, descendant) pair of a dependency map {part: parts it needs}."""
    pairs: set[tuple[int, int]] = set()
    for j in edges:
        stack, seen = list(edges[j]), set()
        while stack:
            i = stack.pop()
            if i not in seen:
                seen.add(i)
                pairs.add((i, j))
                stack.extend(edges.get(i, ()))
    return pairs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT)
    parser.add_argument("-v", "--verbose", action="store_true", help="show every miss")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in args.corpus.read_text("utf-8").splitlines() if line]
    exact: Counter[str] = Counter()
    total: Counter[str] = Counter()
    by_lang: Counter[str] = Counter()
    lang_total: Counter[str] = Counter()
    singles_split = kept = labelled = extra = 0
    misses = []
    for row in rows:
        d = decompose(row["prompt"])
        found = [_norm(p.text) for p in d.parts]
        ok = found == [_norm(p) for p in row["parts"]]
        total[row["kind"]] += 1
        lang_total[row["lang"]] += 1
        exact[row["kind"]] += ok
        by_lang[row["lang"]] += ok
        if row["kind"] == "single" and len(d.parts) > 1:
            singles_split += 1
        if not ok:
            misses.append((row["id"], row["parts"], [p.text for p in d.parts]))
            continue
        truth = closure({int(k) - 1: {v - 1 for v in vs} for k, vs in row["depends_on"].items()})
        got = closure({j: set(p.depends_on) for j, p in enumerate(d.parts)})
        labelled += len(truth)
        kept += len(truth & got)
        extra += len(got - truth)
    n_ok = sum(exact.values())
    print(f"corpus: {args.corpus.name}, {len(rows)} prompts")
    print(f"{'kind':<12}{'exact':>8}{'of':>5}")
    for kind in sorted(total):
        print(f"{kind:<12}{exact[kind]:>8}{total[kind]:>5}")
    langs = ", ".join(f"{k} {by_lang[k]}/{lang_total[k]}" for k in sorted(lang_total))
    print(f"by language: {langs}")
    print(f"exact splits: {n_ok}/{len(rows)} = {n_ok / len(rows):.1%} (target >= 95%)")
    print(f"single-question prompts split: {singles_split} (target 0)")
    print(
        f"dependencies (exactly split prompts): {kept}/{labelled} labelled kept "
        f"(directly or through another part), {extra} extra waits"
    )
    for pid, want, got_parts in misses if args.verbose else misses[:0]:
        print(f"\nMISS {pid}\n  want {want}\n  got  {got_parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
