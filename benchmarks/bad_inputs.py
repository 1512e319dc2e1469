"""Run the generated bad-input corpus (``tests/bad_corpus.py``) through the ``flexpipe`` CLI in-process.

    .venv/bin/python benchmarks/bad_inputs.py [--slowest 10]

Prints the counts the issue's closing note asks for: cases tried, exit 2 with a message naming the
file or flag, right exit 0, anything else (must be 0), per class of bad input, and the slowest
refusals. Last line: ``slowest_refusal_s=<x>``.
"""
from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import bad_corpus  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slowest", type=int, default=5, help="list the N slowest refusals")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cases = bad_corpus.build(folder)
        files = sum(1 for p in folder.iterdir() if p.suffix == ".json" and p.name != "out.json")
        outcomes = [bad_corpus.run(c) for c in cases]
    counts = collections.Counter(o.verdict for o in outcomes)
    per = collections.defaultdict(collections.Counter)
    for o in outcomes:
        per[o.case.kind][o.verdict] += 1
    print(f"{'class':<22} {'tried':>6} {'exit 2':>7} {'exit 0':>7} {'other':>6}")
    for kind, c in sorted(per.items()):
        print(f"{kind:<22} {sum(c.values()):>6} {c['refused']:>7} {c['ok']:>7} {c['other']:>6}")
    print(f"files {files}; tried {len(outcomes)}; exit 2 with message {counts['refused']}; right exit 0 "
          f"{counts['ok']}; anything else {counts['other']}")
    for o in outcomes:
        if o.verdict == "other":
            print(f"  OTHER: {' '.join(o.case.argv)[:150]} -> rc {o.rc}: {o.stderr[:200]}")
    refused = sorted((o for o in outcomes if o.verdict == "refused"), key=lambda o: -o.seconds)
    for o in refused[:args.slowest]:
        print(f"  {o.seconds:7.3f} s  {' '.join(Path(a).name if '/' in a else a for a in o.case.argv)[:120]}")
    print(f"slowest_refusal_s={refused[0].seconds:.3f}")
    return 1 if counts["other"] else 0


if __name__ == "__main__":
    sys.exit(main())
