"""Runs unittest cases for deploy/'s Bazel tests and writes Bazel's test.xml.

Each case becomes a <testcase> in $XML_OUTPUT_FILE (a skip is <skipped/>), so
tools/count_tests.py counts cases, skips included, as it does for gtest. Exit status 1
when a case failed. Also: locating runfiles and the default model.
"""
import os
import re
import shutil
import sys
import time
import unittest
from xml.sax.saxutils import escape, quoteattr

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def runfiles_dir():
    for var in ("RUNFILES_DIR", "TEST_SRCDIR"):
        d = os.environ.get(var)
        if d and os.path.isdir(os.path.join(d, "weft")):
            return os.path.join(d, "weft")
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_model():
    """The default model's path ($WEFT_MODEL_DIR, then models/ beside tools/models.txt,
    as common/testing/model_path.h does), or None."""
    dirs = []
    if os.environ.get("WEFT_MODEL_DIR"):
        dirs.append(os.environ["WEFT_MODEL_DIR"])
    txt = os.path.join(runfiles_dir(), "tools", "models.txt")
    if os.path.exists(txt):
        dirs.append(os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(txt))), "models"))
    dirs.append("models")
    for d in dirs:
        p = os.path.join(d, MODEL_FILE)
        if os.path.exists(p):
            return os.path.realpath(p)
    return None


def another_model_overlay(tmp, name="beta"):
    """deploy/README.md's "Another model" overlay, as a user adds it: a copy of deploy/k8s
    under `tmp` with the README's example written to models/<name>/kustomization.yaml
    (the model renamed to `name`). Returns that directory."""
    here = os.path.dirname(os.path.abspath(__file__))
    readme = open(os.path.join(here, "README.md")).read()
    m = re.search(r"<!-- another-model [^>]*-->\s*```yaml\n(.*?)```", readme, re.S)
    if not m:
        raise AssertionError("deploy/README.md has no another-model example")
    k8s = os.path.join(tmp, "k8s")
    shutil.copytree(os.path.join(here, "k8s"), k8s)
    d = os.path.join(k8s, "models", name)
    os.makedirs(d)
    with open(os.path.join(d, "kustomization.yaml"), "w") as f:
        f.write(m.group(1).replace("name=beta", "name=" + name))
    return d


class _Result(unittest.TextTestResult):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.cases = []
        self._t0 = 0.0

    def startTest(self, test):
        self._t0 = time.time()
        super().startTest(test)

    def _record(self, test, kind, text=""):
        self.cases.append((test, kind, text, time.time() - self._t0))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "ok")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)


def main(module_name="__main__"):
    names = [a for a in sys.argv[1:] if not a.startswith("-")]
    module = sys.modules[module_name]
    suite = (unittest.defaultTestLoader.loadTestsFromNames(names, module) if names
             else unittest.defaultTestLoader.loadTestsFromModule(module))
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=_Result)
    result = runner.run(suite)
    xml_path = os.environ.get("XML_OUTPUT_FILE")
    if xml_path:
        lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<testsuites>",
                 '<testsuite name=%s tests="%d">' % (quoteattr(module_name), len(result.cases))]
        for test, kind, text, secs in result.cases:
            cls, _, name = test.id().rpartition(".")
            head = '<testcase classname=%s name=%s time="%.3f"' % (quoteattr(cls), quoteattr(name),
                                                                    secs)
            if kind == "ok":
                lines.append(head + "/>")
            elif kind == "skipped":
                lines.append(head + '><skipped message=%s/></testcase>' % quoteattr(text))
            else:
                lines.append(head + "><failure message=%s>%s</failure></testcase>"
                             % (quoteattr(text.splitlines()[-1] if text else kind), escape(text)))
        lines += ["</testsuite>", "</testsuites>", ""]
        with open(xml_path, "w") as f:
            f.write("\n".join(lines))
    sys.exit(0 if result.wasSuccessful() else 1)
