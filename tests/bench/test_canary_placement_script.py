"""The canary-placement benchmark script (issue #19), run as a real subprocess at a tiny
size on the bundled simulator, on virtual time."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench_support import RunBench

ROW = re.compile(r"^(beside|after|auto)\s+(\d+)\s+(\S+)\s+(beside|after|none)\s", re.M)


def test_each_placement_sends_its_canary_where_it_says_and_every_question_is_answered(
    tmp_path: Path, run_bench: RunBench
) -> None:
    """One round of the three placements: a row each, the canary beside or after as pinned
    (auto: after, where the simulator's replies all read back and its per-slot cache serves
    the document), the after canary served the document from the cache, the medians and
    ratios printed, every question answered."""
    out = tmp_path / "placement.json"
    proc = run_bench("canary_placement.py", "--rounds", "1", "--json", str(out))
    rows = {placement: where for placement, _, _, where in ROW.findall(proc.stdout)}
    assert rows == {"beside": "beside", "after": "after", "auto": "after"}, proc.stdout
    assert re.search(r"^ratios: checked beside/after \d+\.\d\d, wall", proc.stdout, re.M)
    batches = {b["placement"]: b for b in json.loads(out.read_text())}
    assert all(b["answered"] == b["asked"] == 3 for b in batches.values())
    assert batches["after"]["canary_cached"] > 1_000  # the document, from the freed slot
    assert batches["beside"]["canary_cached"] < 100  # the system prompt's few tokens
    assert batches["after"]["checked"] < batches["beside"]["checked"]
