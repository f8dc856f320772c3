#!/usr/bin/python3
"""validate_junit.py FILE [--dump]: checks that a JUnit XML report (prefill-bench
run --junit) is well-formed XML of the common JUnit shape that CI servers read
(Jenkins / GitLab / the Ant junit schema): <testsuites> of <testsuite> of
<testcase>, the required attributes and their types, at most one outcome per
testcase, and counts that equal the children. Uses only xml.etree (no lxml).
Prints every problem; exit 0 when valid, 1 on any problem, 2 on bad usage or an
unreadable file. --dump prints the parsed report as JSON on stdout (attribute
values and texts decoded), for tests that check the escaping round trip."""
import json
import re
import sys
import xml.etree.ElementTree as ET

TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")  # Ant schema: no time zone
OUTCOMES = {"failure", "error", "skipped"}


class Checker:
    def __init__(self, path):
        self.path = path
        self.problems = []

    def bad(self, where, what):
        self.problems.append(f"{self.path}: {where}: {what}")

    def count(self, el, where, name, required=True):
        v = el.get(name)
        if v is None:
            if required:
                self.bad(where, f"attribute '{name}' missing")
            return None
        if not re.fullmatch(r"\d+", v):
            self.bad(where, f"attribute '{name}' = '{v}': expected a non-negative integer")
            return None
        return int(v)

    def seconds(self, el, where, required):
        v = el.get("time")
        if v is None:
            if required:
                self.bad(where, "attribute 'time' missing")
            return
        try:
            if float(v) < 0:
                raise ValueError
        except ValueError:
            self.bad(where, f"attribute 'time' = '{v}': expected seconds >= 0")

    def text(self, el, where, name):
        v = el.get(name)
        if v is None or v == "":
            self.bad(where, f"attribute '{name}' missing or empty")
        return v

    def testcase(self, case, where):
        self.text(case, where, "name")
        self.text(case, where, "classname")
        self.seconds(case, where, required=False)
        outcomes = [c for c in case if c.tag in OUTCOMES]
        for c in case:
            if c.tag not in OUTCOMES | {"system-out", "system-err"}:
                self.bad(where, f"unexpected element <{c.tag}> in <testcase>")
        if len(outcomes) > 1:
            self.bad(where, "more than one of <failure>, <error>, <skipped>")
        for o in outcomes:
            if o.tag in ("failure", "error") and o.get("message") is None:
                self.bad(where + f"/{o.tag}", "attribute 'message' missing")
            if o.tag == "skipped" and len(o):
                self.bad(where + "/skipped", "<skipped> holds elements")
        return outcomes[0].tag if outcomes else "passed"

    def suite(self, suite, where):
        self.text(suite, where, "name")
        tests = self.count(suite, where, "tests")
        failures = self.count(suite, where, "failures")
        errors = self.count(suite, where, "errors")
        skipped = self.count(suite, where, "skipped", required=False)
        self.seconds(suite, where, required=True)
        ts = suite.get("timestamp")
        if ts is not None and not TIMESTAMP.match(ts):
            self.bad(where, f"attribute 'timestamp' = '{ts}': expected YYYY-MM-DDTHH:MM:SS")
        seen = {"passed": 0, "failure": 0, "error": 0, "skipped": 0}
        children = list(suite)
        for i, c in enumerate(children):
            if c.tag == "properties":
                if i != 0:
                    self.bad(where, "<properties> is not the first child")
                for p in c:
                    if p.tag != "property":
                        self.bad(where + "/properties", f"unexpected element <{p.tag}>")
                    elif p.get("name") is None or p.get("value") is None:
                        self.bad(where + "/properties", "<property> without name or value")
            elif c.tag == "testcase":
                name = c.get("name", "?")
                seen[self.testcase(c, f"{where}/testcase[{name}]")] += 1
            elif c.tag not in ("system-out", "system-err"):
                self.bad(where, f"unexpected element <{c.tag}> in <testsuite>")
        total = sum(seen.values())
        for attr, want in (("tests", total), ("failures", seen["failure"]), ("errors", seen["error"]),
                           ("skipped", seen["skipped"])):
            got = {"tests": tests, "failures": failures, "errors": errors, "skipped": skipped}[attr]
            if got is not None and got != want:
                self.bad(where, f"{attr}=\"{got}\" but it holds {want}")
        return total, seen


def dump(root):
    suites = []
    for s in root.iter("testsuite"):
        cases = []
        for c in s.iter("testcase"):
            entry = {"classname": c.get("classname"), "name": c.get("name"), "outcome": "passed"}
            for o in c:
                if o.tag in OUTCOMES:
                    entry.update(outcome=o.tag, message=o.get("message"), text=o.text or "")
            cases.append(entry)
        props = {p.get("name"): p.get("value") for p in s.iter("property")}
        suites.append({"name": s.get("name"), "attrib": dict(s.attrib), "properties": props,
                       "testcases": cases})
    return {"attrib": dict(root.attrib), "testsuites": suites}


def main():
    args = sys.argv[1:]
    want_dump = "--dump" in args
    args = [a for a in args if a != "--dump"]
    if len(args) != 1:
        print("usage: validate_junit.py FILE [--dump]", file=sys.stderr)
        return 2
    path = args[0]
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        print(f"{path}: cannot read: {e}", file=sys.stderr)
        return 2
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        print(f"{path}: not well-formed XML: {e}", file=sys.stderr)
        return 1
    chk = Checker(path)
    if not data.startswith(b"<?xml"):
        chk.bad("prolog", "no XML declaration")
    if root.tag != "testsuites":
        chk.bad("/", f"root element <{root.tag}>, expected <testsuites>")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for i, s in enumerate(root):
        if s.tag != "testsuite":
            chk.bad("/testsuites", f"unexpected element <{s.tag}>")
            continue
        total, seen = chk.suite(s, f"/testsuites/testsuite[{i}]")
        totals["tests"] += total
        totals["failures"] += seen["failure"]
        totals["errors"] += seen["error"]
        totals["skipped"] += seen["skipped"]
    for attr, want in totals.items():
        got = chk.count(root, "/testsuites", attr, required=attr != "skipped")
        if got is not None and got != want:
            chk.bad("/testsuites", f"{attr}=\"{got}\" but its suites hold {want}")
    chk.seconds(root, "/testsuites", required=False)
    for p in chk.problems:
        print(p, file=sys.stderr)
    if chk.problems:
        print(f"{path}: {len(chk.problems)} problem(s)", file=sys.stderr)
        return 1
    if want_dump:
        print(json.dumps(dump(root), ensure_ascii=False))
    else:
        print(f"{path}: valid JUnit XML: {len(root)} suites, {totals['tests']} tests, "
              f"{totals['failures']} failures, {totals['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
