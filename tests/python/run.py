#!/usr/bin/python3
"""Run unittest modules of tests/python and print one "ok - " or "not ok - "
line per test, as the CLI tests do (tests/run.sh counts them).

    run.py MODULE...     (modules of this folder: test_hashing, test_client)
"""
import os
import sys
import traceback
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class Result(unittest.TestResult):
    def _name(self, test):
        return "python: %s.%s" % (type(test).__name__, test._testMethodName)

    def addSuccess(self, test):
        print("ok - " + self._name(test), flush=True)

    def _bad(self, test, err, what):
        print("not ok - %s (%s)" % (self._name(test), what), flush=True)
        for line in "".join(traceback.format_exception(*err)).splitlines():
            print("#   " + line)

    def addFailure(self, test, err):
        self._bad(test, err, "failed")

    def addError(self, test, err):
        self._bad(test, err, "error")

    def addSkip(self, test, reason):  # a skipped check is a defect here
        print("not ok - %s (skipped: %s)" % (self._name(test), reason), flush=True)


def main():
    suite = unittest.TestSuite()
    for m in sys.argv[1:]:
        suite.addTests(unittest.defaultTestLoader.loadTestsFromName(m))
    if not suite.countTestCases():
        print("not ok - python: no tests in %s" % " ".join(sys.argv[1:]))
        return 1
    r = Result()
    suite.run(r)
    return 0 if r.wasSuccessful() and not r.skipped else 1


if __name__ == "__main__":
    sys.exit(main())
