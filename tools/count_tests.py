#!/usr/bin/env python3
"""Counts test results for ./test.sh and prints 'N passed, N failed, N skipped'.

Input 1: TSV of (config, bazel label, path of its test.xml). gtest cases are counted
one by one (a GTEST_SKIP'd case is 'skipped', which Bazel itself reports as passed).
A target with no test.xml (it failed to build, or crashed before writing one) counts as
one failure. Input 2: TSV of extra results (name, passed|failed|skipped, message), e.g.
fuzzer runs and the CUDA build. Exit status 1 when anything failed.
"""
import os
import sys
import xml.etree.ElementTree as ET


def count_xml(path):
    tree = ET.parse(path)
    passed = failed = skipped = 0
    failures = []
    cases = tree.getroot().iter("testcase")
    for case in cases:
        name = "%s.%s" % (case.get("classname", ""), case.get("name", ""))
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            failures.append(name)
        elif (case.get("result") == "skipped" or case.find("skipped") is not None
              or case.get("status") == "notrun"):
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped, failures


def main():
    passed = failed = skipped = 0
    problems = []
    if os.path.exists(sys.argv[1]):
        for line in open(sys.argv[1]):
            config, label, path = line.rstrip("\n").split("\t")
            if not os.path.exists(path):
                failed += 1
                problems.append("%s [%s]: no test.xml (build failure or crash)" % (label, config))
                continue
            try:
                p, f, s, names = count_xml(path)
            except ET.ParseError as e:
                failed += 1
                problems.append("%s [%s]: unreadable test.xml (%s)" % (label, config, e))
                continue
            if p + f + s == 0:
                failed += 1
                problems.append("%s [%s]: no test cases ran" % (label, config))
            passed += p
            failed += f
            skipped += s
            for n in names:
                problems.append("%s [%s]: %s" % (label, config, n))
    if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
        for line in open(sys.argv[2]):
            name, result, msg = (line.rstrip("\n").split("\t") + ["", ""])[:3]
            if result == "passed":
                passed += 1
            elif result == "skipped":
                skipped += 1
                print("skipped: %s %s" % (name, msg), file=sys.stderr)
            else:
                failed += 1
                problems.append("%s: %s" % (name, msg))
    for p in problems:
        print("FAILED: " + p, file=sys.stderr)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
