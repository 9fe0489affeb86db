#!/usr/bin/env python3
"""Lists (and with --write, re-records) the regression cases whose output changed.

REGRESSION FIXTURE (issue 11). An intentional change of moemem's output re-records only the
cases it changes, and its commit names them and says why. Run from the repository root:
  tests/regression/rerecord.py build/release/moemem            # list changed ids
  tests/regression/rerecord.py build/release/moemem --write    # and update expected.jsonl
"""
import json
import os
import subprocess
import sys

sys.argv, args = sys.argv[:2], sys.argv[2:]
here = os.path.dirname(os.path.abspath(__file__))
snapshot = {}
with open(os.path.join(here, "snapshot.py")) as f:
    src = f.read()
exec(src.split("\nfor line in open")[0], snapshot)  # defines normalise (and exe)
exe = sys.argv[1]
cases = [json.loads(l) for l in open("tests/data/regression/cases.jsonl")]
expected = [json.loads(l) for l in open("tests/data/regression/expected.jsonl")]
changed = []
for case, old in zip(cases, expected):
    p = subprocess.run([exe] + case["args"], capture_output=True)  # bytes: text mode would turn the progress line's \r into \n
    new = {"id": case["id"], "code": p.returncode, "out": snapshot["normalise"](p.stdout.decode()),
           "err": snapshot["normalise"](p.stderr.decode())}
    if new != old:
        changed.append(case["id"])
        old.clear()
        old.update(new)
print(f"{len(changed)} of {len(cases)} cases changed: {' '.join(changed)}")
if "--write" in args:
    with open("tests/data/regression/expected.jsonl", "w") as f:
        for e in expected:
            f.write(json.dumps(e) + "\n")
