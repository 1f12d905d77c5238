#!/usr/bin/env python3
"""Per test file, how many of llama-server's tests pass on each server.

  tally.py LLAMA_SERVER.xml RECLAIM.xml [RECLAIM-RETRY.xml] [--gaps FILE] [--known FILE]

Reads the pytest JUnit reports (a test retried on reclaim passes there if it
passed in either report). A test that passes on llama-server and
fails on reclaim is a gap, unless deliberate.txt names it (a difference on
purpose, with its reason); one that fails on both is counted apart (most
assert a trained model's words, which random weights cannot say). With
--gaps, the gaps' names are written one a line. With --known (the gaps
still to close, one a line), a gap not in it is new: named on stdout, and
the exit status is 3; a known gap that now passes is said, to take it off.
"""
import fnmatch
import os
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def outcomes(path):
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if "skipped" in kinds:
            out[name] = "skipped"
        elif kinds & {"failure", "error"}:
            out[name] = "failed"
        else:
            out[name] = "passed"
    return out


def deliberate():
    """deliberate.txt's (pattern, reason) pairs."""
    rules = []
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "deliberate.txt")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                pattern, _, reason = line.partition(" ")
                rules.append((pattern, reason.strip()))
    return rules


def on_purpose(name, rules):
    """The rule that names the test `FILE::TEST`, or None."""
    short = name.split(".", 1)[-1]  # unit.test_basic::x -> test_basic::x
    return next((r for r in rules if fnmatch.fnmatchcase(short, r[0])), None)


def main():
    args = sys.argv[1:]
    opts = {}
    for flag in ("--gaps", "--known"):
        if flag in args:
            i = args.index(flag)
            opts[flag] = args[i + 1]
            del args[i:i + 2]
    gaps_file = opts.get("--gaps")
    ls, rc = outcomes(args[0]), outcomes(args[1])
    for retry in args[2:]:
        for name, outcome in outcomes(retry).items():
            if outcome == "passed" and name in rc:
                rc[name] = "passed"
    rows = defaultdict(lambda: defaultdict(int))
    gaps, rules, used = [], deliberate(), defaultdict(int)
    # Only the tests both reports ran: a run of some files against one
    # target, compared with the other's whole report, says nothing of the rest.
    for name in sorted(set(ls) & set(rc)):
        file = name.split("::")[0].rsplit(".", 1)[-1]
        a, b = ls[name], rc[name]
        row = rows[file]
        row["tests"] += 1
        row["llama-server"] += a == "passed"
        row["reclaim"] += b == "passed"
        row["both"] += a == "passed" and b == "passed"
        row["reclaim only"] += a != "passed" and b == "passed"
        row["neither"] += a == "failed" and b == "failed"
        if a == "passed" and b != "passed":
            rule = on_purpose(name, rules)
            if rule:
                row["on purpose"] += 1
                used[rule] += 1
            else:
                row["gap"] += 1
                gaps.append(name)
    cols = ["tests", "llama-server", "reclaim", "both", "gap", "on purpose", "reclaim only", "neither"]
    print(f"{'file':28}" + "".join(f"{c:>13}" for c in cols))
    total = defaultdict(int)
    for file in sorted(rows):
        print(f"{file:28}" + "".join(f"{rows[file][c]:>13}" for c in cols))
        for c in cols:
            total[c] += rows[file][c]
    print(f"{'all':28}" + "".join(f"{total[c]:>13}" for c in cols))
    for (pattern, reason), n in sorted(used.items()):
        print(f"on purpose: {n} x {pattern}: {reason}")
    if gaps_file:
        with open(gaps_file, "w") as f:
            f.write("".join(g + "\n" for g in gaps))
    if "--known" in opts:
        with open(opts["--known"]) as f:
            known = {line.strip() for line in f if line.strip() and not line.startswith("#")}
        for g in sorted(known - set(gaps)):
            if ls.get(g) == "passed" and rc.get(g) == "passed":
                print(f"closed (passes on both now; take it off {os.path.basename(opts['--known'])}): {g}")
        new = [g for g in gaps if g not in known]
        for g in new:
            print(f"new gap (passes on llama-server, fails on reclaim): {g}")
        if new:
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
