#!/usr/bin/env python3
"""Records what a moemem binary prints for every case of tests/data/regression/cases.jsonl.

REGRESSION FIXTURE (issue 11): the expected outputs were taken from the pre-refactor binary
(main at 53e8806) so that the one-scenario refactor can be checked byte for byte. Run from the
repository root: snapshot.py build/release/moemem > tests/data/regression/expected.jsonl
Timing fields of search (seconds, progress lines) are normalised the same way as in
tests/regression/test_regression.cpp.
"""
import json
import subprocess
import sys

exe = sys.argv[1]


def normalise(text):
    out = []
    i = 0
    key = '"seconds": '
    mark = " valid layouts evaluated on every stage in "
    while i < len(text):
        if text.startswith(key, i):
            out.append(key + "T")
            i += len(key)
            while i < len(text) and text[i] in "0123456789.e+-":
                i += 1
        elif text.startswith('"seconds":', i):
            out.append('"seconds":T')
            i += len('"seconds":')
            while i < len(text) and text[i] in "0123456789.e+-":
                i += 1
        elif text.startswith(mark, i):
            out.append(mark + "T")
            i += len(mark)
            while i < len(text) and text[i] in "0123456789.":
                i += 1
        elif text.startswith("\rsearching:", i):
            # progress lines (only after a second): up to and including the newline after them
            while i < len(text) and text[i] != "\n":
                i += 1
            i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out).lstrip("\n")


for line in open("tests/data/regression/cases.jsonl"):
    case = json.loads(line)
    p = subprocess.run([exe] + case["args"], capture_output=True)  # bytes: text mode would turn the progress line's \r into \n
    print(json.dumps({"id": case["id"], "code": p.returncode, "out": normalise(p.stdout.decode()), "err": normalise(p.stderr.decode())}))
