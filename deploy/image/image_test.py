#!/usr/bin/python3
"""The images build and run (./test.sh --full): no Docker daemon needed.

    deploy/image/image_test.py [--out DIR] [--reuse]

1. deploy/image/build_image.py builds the images (cpu; gpu too when CUDA is installed
   here) as an OCI layout; --reuse takes the layout already in DIR.
2. Each image is unpacked with umoci (its root filesystem and OCI runtime config) and
   checked: the config's user is not root; `ldd` run inside the root filesystem resolves
   every library of every binary (the CUDA worker's cudart/cuBLAS/cuBLASLt/NCCL from the
   image's /usr/local/cuda/lib64).
3. In a private mount namespace (proc, tmpfs /tmp, /dev nodes, the model read-only on
   /models), as the image's user and with only the image's environment, chroot'ed:
   the CPU image's entrypoint (weft-scheduler, with the config's args, the OpenAI HTTP API
   on) and its weft-worker serve a generation asked by the image's weft CLI, and the same
   greedy completion asked over HTTP (POST /v1/completions); then the GPU image's
   CUDA-built weft-worker (`--helpfull` runs; no GPU here, so --backend=cpu) attaches to the
   same scheduler as a second replica with --metrics_port=0 (its /metrics, /startupz and
   /readyz are scraped) and serves a generation too. Everything stops on SIGTERM with exit
   code 0.
4. The labels org.opencontainers.image.version and .revision are what each binary's
   --version prints inside the image. Each image's SPDX SBOM (DIR/sbom-<image>.spdx.json) validates against SPDX 2.3's JSON
   schema (spdx-2.3-schema.json, python3-jsonschema) and lists every Debian package of
   the unpacked image's dpkg database with its version, and every Weft binary with the
   sha256 of the file in the image.
5. Reproducible: build_image.py again, with the first build's binaries and
   SOURCE_DATE_EPOCH and the base root filesystem made afresh (--no-cache: debootstrap
   and apt from the mirror again), into DIR-again:
   the same package set must give the same manifest digest for every image, and the
   same SBOM.
Needs root, debootstrap, umoci, skopeo, the Debian mirror, and the default model (skips,
exit 77, without them). Prints the durations and sizes; writes DIR/image_test.json.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
SKIP = 77


def log(*a):
    print("image_test:", *a, file=sys.stderr, flush=True)


def fail(msg):
    log("FAIL: " + msg)
    sys.exit(1)


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def model_dir():
    for d in (os.environ.get("WEFT_MODEL_DIR"), os.path.join(ROOT, "models")):
        if d and os.path.exists(os.path.join(d, MODEL)):
            return os.path.realpath(d)
    return None


class Rootfs:
    """An unpacked image: its root filesystem, mounted for running, and its config."""

    def __init__(self, layout, tag, bundle, models):
        self.tag = tag
        shutil.rmtree(bundle, ignore_errors=True)
        r = run(["umoci", "unpack", "--image", "%s:%s" % (layout, tag), bundle])
        if r.returncode != 0:
            fail("umoci unpack %s: %s" % (tag, r.stdout))
        self.root = os.path.join(bundle, "rootfs")
        cfg = json.load(open(os.path.join(bundle, "config.json")))
        proc = cfg["process"]
        self.args = proc["args"]
        self.uid, self.gid = proc["user"]["uid"], proc["user"]["gid"]
        self.env = proc["env"]
        self.cwd = proc.get("cwd", "/")
        # The image's own config (config.json above is umoci's runtime spec made from it).
        r = run(["skopeo", "inspect", "--config", "oci:%s:%s" % (layout, tag)])
        if r.returncode != 0:
            fail("skopeo inspect --config %s: %s" % (tag, r.stdout))
        self.image_config = json.loads(r.stdout)["config"]
        if self.uid == 0 or self.gid == 0:
            fail("%s runs as root (uid %d gid %d)" % (tag, self.uid, self.gid))
        # Mounts: only in this process's private mount namespace (see main()).
        for d in ("proc", "tmp", "dev", "models"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        self._mount(["-t", "proc", "proc", os.path.join(self.root, "proc")])
        self._mount(["-t", "tmpfs", "-o", "mode=1777", "tmpfs", os.path.join(self.root, "tmp")])
        self._mount(["-t", "tmpfs", "-o", "mode=755", "tmpfs", os.path.join(self.root, "dev")])
        for node in ("null", "zero", "random", "urandom"):
            target = os.path.join(self.root, "dev", node)
            open(target, "w").close()
            self._mount(["--bind", "/dev/" + node, target])
        os.makedirs(os.path.join(self.root, "dev/shm"), exist_ok=True)
        self._mount(["-t", "tmpfs", "-o", "mode=1777", "tmpfs", os.path.join(self.root, "dev/shm")])
        self._mount(["--bind", models, os.path.join(self.root, "models")])
        self._mount(["-o", "remount,bind,ro", os.path.join(self.root, "models")])

    @staticmethod
    def _mount(args):
        r = run(["mount", *args])
        if r.returncode != 0:
            fail("mount %s: %s" % (" ".join(args), r.stdout))

    def ldd(self, binary):
        """{library: resolved path} inside the root filesystem; fails on 'not found'."""
        r = run(["chroot", self.root, "/usr/bin/ldd", binary])
        if r.returncode != 0 or "not found" in r.stdout:
            fail("%s: ldd %s inside the image:\n%s" % (self.tag, binary, r.stdout))
        libs = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "=>":
                libs[parts[0]] = parts[2]
        return libs

    def popen(self, args, log_path):
        """Starts `args` chroot'ed, as the image's user, with only the image's env."""
        cmd = ["chroot", "--userspec=%d:%d" % (self.uid, self.gid), self.root,
               "/usr/bin/env", "-i", *self.env, *args]
        logf = open(log_path, "wb")
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        p.log_path = log_path
        return p

    def run_as_user(self, args, timeout, stderr=subprocess.STDOUT):
        cmd = ["chroot", "--userspec=%d:%d" % (self.uid, self.gid), self.root,
               "/usr/bin/env", "-i", *self.env, *args]
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True,
                              timeout=timeout)

    def read_json(self, path_in_image, timeout):
        path = os.path.join(self.root, path_in_image.lstrip("/"))
        end = time.time() + timeout
        while time.time() < end:
            if os.path.exists(path):
                return json.load(open(path))
            time.sleep(0.2)
        return None


def check_dockerfile(img, fs):
    """The committed Dockerfile.<img> (its package list is checked by build_image.py)
    gives the image the same user, environment, working directory and entrypoint."""
    text = open(os.path.join(ROOT, "deploy/image/Dockerfile." + img)).read()
    env = [l.split(" ", 1)[1] for l in text.splitlines() if l.startswith("ENV ")]
    user = next(l.split()[1] for l in text.splitlines() if l.startswith("USER "))
    workdir = next(l.split()[1] for l in text.splitlines() if l.startswith("WORKDIR "))
    entry = json.loads(next(l.split(" ", 1)[1] for l in text.splitlines()
                            if l.startswith("ENTRYPOINT ")))
    c = fs.image_config
    want = {"env": c.get("Env"), "user": c.get("User"), "workdir": c.get("WorkingDir"),
            "entrypoint": c.get("Entrypoint")}
    got = {"env": env, "user": user, "workdir": workdir, "entrypoint": entry}
    if got != want:
        fail("deploy/image/Dockerfile.%s does not describe the image: %s vs the image's %s"
             % (img, got, want))


def check_sbom(img, fs, path):
    """The SBOM validates (SPDX 2.3 schema), names every package of the image's dpkg
    database with its version, and each Weft binary with the sha256 of the image's file."""
    import hashlib
    import jsonschema
    sys.path.insert(0, os.path.join(ROOT, "deploy", "image"))
    import sbom
    doc = json.load(open(path))
    schema = json.load(open(os.path.join(ROOT, "deploy", "image", "spdx-2.3-schema.json")))
    try:
        jsonschema.validate(doc, schema)
    except jsonschema.ValidationError as e:
        fail("%s: %s is not SPDX 2.3: %s at %s" % (img, path, e.message, list(e.absolute_path)))
    ids = [p["SPDXID"] for p in doc["packages"]]
    if len(ids) != len(set(ids)):
        fail("%s: SPDX ids repeat" % img)
    for r in doc["relationships"]:
        if r["relatedSpdxElement"] not in ids:
            fail("%s: a relationship names %s, no package" % (img, r["relatedSpdxElement"]))
    listed = {p["name"]: p for p in doc["packages"]}
    installed = sbom.dpkg_status(os.path.join(fs.root, "var/lib/dpkg/status"))
    for f in installed:
        if listed.get(f["Package"], {}).get("versionInfo") != f["Version"]:
            fail("%s: the SBOM lacks %s %s" % (img, f["Package"], f["Version"]))
    for b in ("weft-scheduler", "weft-worker", "weft"):
        entry = listed.get("/usr/local/bin/" + b)
        digest = hashlib.sha256(open(os.path.join(fs.root, "usr/local/bin", b), "rb").read())
        if not entry or entry["checksums"][0]["checksumValue"] != digest.hexdigest():
            fail("%s: the SBOM's %s is not the image's file" % (img, b))
    log("%s: SBOM valid (SPDX 2.3): %d Debian packages as installed, %d files with sha256"
        % (img, len(installed), len(listed) - len(installed) - 1))


def check_labels(img, fs):
    """The image's version and revision labels are what its binaries' --version says."""
    labels = fs.image_config.get("Labels") or {}
    for b in ("weft-scheduler", "weft-worker", "weft"):
        out = fs.run_as_user(["/usr/local/bin/" + b, "--version"], 60,
                             stderr=subprocess.DEVNULL).stdout.strip()
        want = "%s %s (revision %s)" % (b, labels.get("org.opencontainers.image.version"),
                                        labels.get("org.opencontainers.image.revision"))
        if out != want:
            fail("%s: %s --version says %r, the labels %r" % (img, b, out, want))
    log("%s: labels version %s, revision %s, as every binary's --version says"
        % (img, labels["org.opencontainers.image.version"],
           labels["org.opencontainers.image.revision"]))


def check_reproducible(a, images, report):
    """A second build (same binaries, base root filesystem made afresh) gives the same
    digest for each image: returns its report."""
    again = a.out.rstrip("/") + "-again"
    shutil.rmtree(again, ignore_errors=True)
    # The same inputs: the first build's binaries and SOURCE_DATE_EPOCH (a commit or a
    # rebuild meanwhile must not pass for irreproducibility).
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(report["source_date_epoch"]))
    r = subprocess.call([sys.executable, os.path.join(ROOT, "deploy/image/build_image.py"),
                         "--out", again, "--images", ",".join(images), "--binaries-from",
                         a.out, "--no-cache"], env=env)
    if r != 0:
        fail("the second build_image.py failed (exit %d)" % r)
    second = json.load(open(os.path.join(again, "report.json")))
    for img in images:
        one, two = report["images"][img], second["images"][img]
        pkgs = lambda rep: sorted((p["name"], p.get("versionInfo")) for p in json.load(
            open(rep["sbom"]))["packages"])
        if pkgs(one) != pkgs(two):
            fail("%s: the second build installed another package set (the mirror moved since "
                 "the cached base was made?): %s" % (img, sorted(set(pkgs(one)) ^ set(pkgs(two)))))
        if one["digest"] != two["digest"]:
            fail("%s: not reproducible: %s then %s from the same package set (layers %s vs %s)"
                 % (img, one["digest"], two["digest"], [l["digest"] for l in one["layers"]],
                    [l["digest"] for l in two["layers"]]))
        if open(one["sbom"], "rb").read() != open(two["sbom"], "rb").read():
            fail("%s: the SBOMs of the two builds differ" % img)
        log("%s: reproducible: %s from both builds (the second's base made afresh, not from "
            "the cache)" % (img, one["digest"]))
    return second


def tail(p, n=3000):
    try:
        return open(p.log_path, "rb").read()[-n:].decode(errors="replace")
    except OSError:
        return ""


def metrics(port):
    return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()


def http_status(port, path):
    try:
        return urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code


def http_completion(port, prompt):
    """POST /v1/completions on the scheduler's HTTP API: 8 greedy tokens; returns the text."""
    body = json.dumps({"model": "smollm2", "prompt": prompt, "max_tokens": 8,
                       "temperature": 0}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        answer = json.loads(r.read())
    if answer.get("object") != "text_completion" or answer["usage"]["completion_tokens"] != 8:
        fail("POST /v1/completions answered %s" % answer)
    return answer["choices"][0]["text"]


def metric_value(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def generate(img, port, prompt, procs):
    """The image's own CLI asks for 8 greedy tokens; returns its output."""
    end = time.time() + 120
    while time.time() < end:
        r = img.run_as_user(["/usr/local/bin/weft", "health", "--server=127.0.0.1:%d" % port], 30)
        if r.returncode == 0 and "NOT_SERVING" not in r.stdout:
            break
        time.sleep(0.5)
    else:
        fail("the scheduler never became SERVING:\n" + "\n".join(tail(p) for p in procs))
    r = img.run_as_user(["/usr/local/bin/weft", "generate", "--server=127.0.0.1:%d" % port,
                         "--prompt=" + prompt, "--max_tokens=8", "--temperature=0"], 120,
                        stderr=subprocess.PIPE)
    if r.returncode != 0 or not r.stdout.strip():
        fail("weft generate (rc %d): %s%s\n%s" % (r.returncode, r.stdout, r.stderr,
                                                "\n".join(tail(p) for p in procs)))
    return r.stdout.strip()


def stop(procs, grace=60):
    codes = {}
    for name, p in procs.items():
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    end = time.time() + grace
    for name, p in procs.items():
        try:
            codes[name] = p.wait(timeout=max(0.1, end - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            codes[name] = "killed after %d s" % grace
    return codes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "image"))
    ap.add_argument("--reuse", action="store_true", help="use the OCI layout already in --out")
    a = ap.parse_args()

    if os.environ.get("WEFT_IMAGE_TEST_NS") != "1":
        # Everything below mounts things and starts servers: do it in private mount and
        # PID namespaces, which disappear (mounts and processes) when this one exits.
        missing = [t for t in ("debootstrap", "umoci", "skopeo", "unshare", "chroot")
                   if not shutil.which(t)]
        if os.geteuid() != 0 or missing:
            log("SKIP: needs root and %s (missing: %s)" % ("debootstrap umoci skopeo", missing))
            return SKIP
        if model_dir() is None:
            log("SKIP: the default model is not in models/ (tools/bootstrap.sh)")
            return SKIP
        env = dict(os.environ, WEFT_IMAGE_TEST_NS="1")
        return subprocess.call(["unshare", "--mount", "--propagation", "private", "--pid", "--fork",
                                sys.executable,
                                os.path.abspath(__file__), *sys.argv[1:]], env=env)

    t0 = time.time()
    have_cuda = shutil.which("nvcc") is not None or os.path.exists("/usr/local/cuda/bin/nvcc")
    images = ["cpu", "gpu"] if have_cuda else ["cpu"]
    if not have_cuda:
        log("no CUDA installation here: the gpu image is not built (cpu only)")
    os.makedirs(a.out, exist_ok=True)
    if not a.reuse:
        r = subprocess.call([sys.executable, os.path.join(ROOT, "deploy/image/build_image.py"),
                             "--out", a.out, "--images", ",".join(images)])
        if r != 0:
            fail("build_image.py failed (exit %d)" % r)
    t_build = time.time() - t0
    report = json.load(open(os.path.join(a.out, "report.json")))
    layout = os.path.join(a.out, "oci")
    models = model_dir()
    logs = os.path.join(a.out, "logs")
    os.makedirs(logs, exist_ok=True)

    imgs = {img: Rootfs(layout, img, os.path.join(a.out, "bundle-" + img), models)
            for img in images}
    for img, fs in imgs.items():
        for b in ("weft-scheduler", "weft-worker", "weft"):
            libs = fs.ldd("/usr/local/bin/" + b)
            log("%s: ldd /usr/local/bin/%s inside the image: %d libraries, all found"
                % (img, b, len(libs)))
            if img == "gpu" and b == "weft-worker":
                for lib in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13",
                            "libnccl.so.2"):
                    where = libs.get(lib, "")
                    if not where.startswith("/usr/local/cuda"):
                        fail("gpu: %s resolves to %r, not the image's /usr/local/cuda"
                             % (lib, where))
                log("gpu: the CUDA worker's cudart, cuBLAS, cuBLASLt and NCCL resolve in "
                    "/usr/local/cuda/lib64 of the image")
            if img == "cpu" and any("cuda" in p or "nccl" in p for p in libs.values()):
                fail("cpu: %s links CUDA" % b)
        check_dockerfile(img, fs)
        check_sbom(img, fs, report["images"][img]["sbom"])
        check_labels(img, fs)
        if not os.path.isdir(os.path.join(fs.root, "usr/share/doc")):
            fail("%s: no /usr/share/doc (copyright files)" % img)
        if img == "gpu" and not os.listdir(os.path.join(fs.root, "usr/share/doc/nvidia-cuda")):
            fail("gpu: no CUDA licence files in /usr/share/doc/nvidia-cuda")

    cpu = imgs["cpu"]
    procs = {}
    t_run = time.time()
    try:
        # The CPU image's entrypoint, as `docker run weft-cpu ARGS` would start it.
        sched_args = cpu.args + ["--model=/models/" + MODEL, "--model_name=smollm2",
                                 "--host=127.0.0.1", "--port=0", "--worker_port=0",
                                 "--metrics_port=0", "--http_port=0",
                                 "--ports_file=/tmp/scheduler.json"]
        if cpu.args[0] != "/usr/local/bin/weft-scheduler":
            fail("cpu: entrypoint is %s, expected /usr/local/bin/weft-scheduler" % cpu.args)
        procs["scheduler"] = cpu.popen(sched_args, os.path.join(logs, "scheduler.log"))
        ports = cpu.read_json("/tmp/scheduler.json", 60)
        if ports is None:
            fail("the scheduler wrote no ports file:\n" + tail(procs["scheduler"]))
        procs["cpu-worker"] = cpu.popen(
            ["/usr/local/bin/weft-worker", "--scheduler=127.0.0.1:%d" % ports["worker_port"],
             "--model=/models/" + MODEL, "--replica=image-cpu", "--num_kv_blocks=128",
             "--threads=2"], os.path.join(logs, "cpu-worker.log"))
        text = generate(cpu, ports["port"], "The capital of France is", list(procs.values()))
        log("cpu image generated: %r" % text)
        http_text = http_completion(ports["http_port"], "The capital of France is")
        if http_text.strip() != text.strip():
            fail("the HTTP API completed %r, the gRPC API %r" % (http_text, text))
        log("cpu image: POST /v1/completions completed the same: %r" % http_text)
        if "gpu" in imgs:
            gpu = imgs["gpu"]
            r = gpu.run_as_user(["/usr/local/bin/weft-worker", "--helpfull"], 60)
            if "--backend" not in r.stdout or "--cuda_device" not in r.stdout:
                fail("gpu: weft-worker --helpfull did not run:\n" + r.stdout[-2000:])
            log("gpu: the CUDA worker's --helpfull runs inside the image")
            procs["gpu-worker"] = gpu.popen(
                ["/usr/local/bin/weft-worker", "--scheduler=127.0.0.1:%d" % ports["worker_port"],
                 "--model=/models/" + MODEL, "--replica=image-gpu", "--backend=cpu",
                 "--num_kv_blocks=128", "--threads=2", "--metrics_port=0",
                 "--ports_file=/tmp/gpu-worker.json"], os.path.join(logs, "gpu-worker.log"))
            wports = gpu.read_json("/tmp/gpu-worker.json", 120)
            if wports is None or wports.get("metrics_port", -1) <= 0:
                fail("the CUDA worker wrote no metrics port (%s):\n%s"
                     % (wports, tail(procs["gpu-worker"])))
            end = time.time() + 120
            while time.time() < end:
                if metric_value(metrics(ports["metrics_port"]), "weft_replicas") == 2:
                    break
                if procs["gpu-worker"].poll() is not None:
                    fail("the gpu image's worker exited:\n" + tail(procs["gpu-worker"]))
                time.sleep(0.5)
            else:
                fail("the gpu image's worker never joined as a second replica:\n" +
                     tail(procs["gpu-worker"]))
            # The CUDA-built worker's own HTTP server (--metrics_port=0: what issue 16's
            # civetweb thread-stack crash broke): its series and probes answer.
            end = time.time() + 60
            while http_status(wports["metrics_port"], "/readyz") != 200:
                if time.time() > end:
                    fail("the CUDA worker's /readyz never turned 200")
                time.sleep(0.2)
            wpage = metrics(wports["metrics_port"])
            for path in ("/livez", "/startupz"):
                if http_status(wports["metrics_port"], path) != 200:
                    fail("the CUDA worker's %s is not 200" % path)
            if metric_value(wpage, "weft_worker_attached") != 1:
                fail("the CUDA worker's /metrics has no weft_worker_attached 1:\n" + wpage[:2000])
            log("gpu: the CUDA worker serves /metrics (%d series), /livez, /startupz, /readyz "
                "on --metrics_port=0" % sum(1 for l in wpage.splitlines()
                                            if l and not l.startswith("#")))
            # Stop the CPU replica so the next generation must run on the GPU image's worker.
            os.killpg(procs["cpu-worker"].pid, signal.SIGTERM)
            procs["cpu-worker"].wait(timeout=60)
            end = time.time() + 60
            while metric_value(metrics(ports["metrics_port"]), "weft_replicas") != 1:
                if time.time() > end:
                    fail("the CPU replica did not leave")
                time.sleep(0.5)
            text2 = generate(cpu, ports["port"], "The capital of France is", list(procs.values()))
            if text2 != text:
                fail("the CUDA-built worker (--backend=cpu) generated %r, the CPU one %r"
                     % (text2, text))
            log("gpu image's worker (--backend=cpu) generated the same: %r" % text2)
        page = metrics(ports["metrics_port"])
        ok = sum(float(l.rsplit(" ", 1)[1]) for l in page.splitlines()
                 if l.startswith("weft_requests_status_total{") and 'code="OK"' in l)
        want = (2 if "gpu" in imgs else 1) + 1  # and the HTTP completion (one counter for both)
        if ok != want:
            fail("weft_requests_status_total{code=OK} is %s, expected %d" % (ok, want))
    finally:
        codes = stop(procs)
    bad = {k: v for k, v in codes.items() if v != 0}
    if bad:
        fail("exit codes after SIGTERM: %s" % codes)
    t_run = time.time() - t_run
    t_again = time.time()
    second = check_reproducible(a, images, report)
    t_again = time.time() - t_again
    summary = {"build_s": round(t_build, 1), "run_s": round(t_run, 1),
               "second_build_s": round(t_again, 1),
               "digests": {i: report["images"][i]["digest"] for i in images},
               "second_digests": {i: second["images"][i]["digest"] for i in images},
               "total_s": round(time.time() - t0, 1),
               "base_cached": {i: report["images"][i].get("base_cached") for i in images},
               "sizes_mb": {i: {"compressed": round(report["images"][i]["compressed_bytes"] / 1e6,
                                                    1),
                                "unpacked": round(report["images"][i]["uncompressed_bytes"] / 1e6,
                                                  1)}
                            for i in images},
               "packages": {i: report["images"][i]["packages"] for i in images},
               "exit_codes": codes}
    with open(os.path.join(a.out, "image_test.json"), "w") as f:
        json.dump(summary, f, indent=1)
    log("PASS: build %.0f s (base %s), checks and runs %.0f s, the reproducibility build "
        "%.0f s, total %.0f s; sizes %s; digests %s" % (
            t_build, summary["base_cached"], t_run, t_again, summary["total_s"],
            summary["sizes_mb"], summary["digests"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
