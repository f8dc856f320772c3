#!/usr/bin/python3
"""same_outputs.py A.json B.json: two prefill-bench reports of the same scenarios
hold bit-identical layer outputs (every run's output_checksums equal, none
missing). Prints each difference; exit 0 when identical, 1 when not, 2 on bad input."""
import json
import sys


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"{path}: cannot load JSON: {e}", file=sys.stderr)
        sys.exit(2)


def main():
    if len(sys.argv) != 3:
        print("usage: same_outputs.py A.json B.json", file=sys.stderr)
        return 2
    a, b = load(sys.argv[1]), load(sys.argv[2])
    ra, rb = a.get("runs", []), b.get("runs", [])
    if not ra or len(ra) != len(rb):
        print(f"runs: {len(ra)} against {len(rb)}")
        return 1
    bad = 0
    for x, y in zip(ra, rb):
        name = x["scenario"]["name"]
        ca, cb = x.get("output_checksums", []), y.get("output_checksums", [])
        if not ca or ca != cb or any(not c for c in ca):
            print(f"{name}: output checksums differ: {ca} against {cb}")
            bad += 1
        else:
            print(f"{name}: {len(ca)} layers bit-identical "
                  f"({x['kernels']['name']} {x['kernels']['path']} and {y['kernels']['name']} {y['kernels']['path']})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
