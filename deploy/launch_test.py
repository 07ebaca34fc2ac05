#!/usr/bin/python3
"""The manifests are what runs: deploy/launch.py starts an overlay of deploy/k8s as local
processes (the containers' own commands and args, Services as proxies, probes as the
kubelet runs them) and a Generate request is served through the public Service, with
the real binaries and the real model.

    launch_test.py --scheduler BIN --worker BIN --cli BIN

* cpu: the overlay as written (a scheduler, two single-rank CPU workers); the model
  volume is given the default model (as a volume filled beforehand: the initContainer
  runs and finds it in place, sha256 checked). Also: the scheduler's series carry the
  model label the HPA selects by; every container exits 0 on SIGTERM within its grace.
* gpu, lws: run on CPUs with the two substitutions printed below (--backend=cuda ->
  cpu, a smaller KV budget); everything else as written: a two-rank replica in one pod
  (gpu), a four-rank replica over a LeaderWorkerSet group of two pods (lws).
Probe paths the binaries do not serve yet (PENDING_PROBE_PATHS) answer 404 and count as
passing; the test fails as soon as one of them is served, so that the list is emptied
and every probe is then held to its answer.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "k8s"))
import launch  # noqa: E402
import render  # noqa: E402
import testlib  # noqa: E402

ARGS = None
# Served by the worker-lifecycle work (issue 16, items 1 and 4), not by this build yet.
PENDING_PROBE_PATHS = ()
ON_CPU = {"--backend=cuda": "--backend=cpu",
          "--kv_memory_bytes=4294967296": "--kv_memory_bytes=268435456"}


def scrape(address):
    text = urllib.request.urlopen("http://%s/metrics" % address, timeout=10).read().decode()
    series = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            series[key] = float(value)
    return series


def value(series, name, **labels):
    """Sum of `name`'s series whose labels include `labels`."""
    total, found = 0.0, False
    for key, v in series.items():
        m = re.match(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?$", key)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += v
            found = True
    return total if found else None


class LaunchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = testlib.find_model()

    def setUp(self):
        if self.model is None:
            self.skipTest("default model not found (tools/bootstrap.sh, or WEFT_MODEL_DIR)")
        self.tmp = tempfile.mkdtemp(prefix="launch-test-")
        # The model volume, filled beforehand (a link, so the model is not copied).
        self.models = os.path.join(self.tmp, "models")
        os.makedirs(self.models)
        os.symlink(self.model, os.path.join(self.models, os.path.basename(self.model)))
        self.launcher = None

    def tearDown(self):
        if self.launcher is not None and not self.launcher.stopping.is_set():
            self.launcher.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def launch(self, overlay, substitutions=None):
        objs = render.render(os.path.join(HERE, "k8s", overlay))
        bins = {"weft-scheduler": ARGS.scheduler, "weft-worker": ARGS.worker}
        for old, new in (substitutions or {}).items():
            print("launch_test: %s: substituting %s -> %s" % (overlay, old, new), file=sys.stderr)
        self.launcher = launch.Launcher(objs, bins, volumes={"models": self.models},
                                        substitutions=substitutions,
                                        state=os.path.join(self.tmp, "state"),
                                        probe_time_scale=0.1,
                                        pending_probe_paths=PENDING_PROBE_PATHS)
        self.launcher.start()
        self.launcher.wait_ready(timeout=180)
        return self.launcher

    def wait_replicas(self, n, timeout=120):
        addr = self.launcher.service_address("weft-smollm2-metrics", "metrics")
        end = time.time() + timeout
        last = None
        while time.time() < end:
            last = value(scrape(addr), "weft_replicas", model="smollm2")
            if last == n:
                return
            time.sleep(0.2)
        self.fail("weft_replicas is %s, want %d\n%s" % (last, n, self.launcher.logs()))

    def generate(self):
        """Eight greedy tokens through the public Service, with the weft CLI."""
        addr = self.launcher.service_address("weft-smollm2", "grpc")
        r = subprocess.run([ARGS.cli, "generate", "--server=" + addr, "--model=smollm2",
                            "--prompt=The capital of France is", "--max_tokens=8",
                            "--temperature=0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr + "\n" + self.launcher.logs())
        self.assertTrue(r.stdout.strip())
        self.assertIn("completion 8", r.stderr)
        return r.stdout

    def stop_and_check(self):
        L = self.launcher
        codes = L.stop()
        self.assertTrue(codes)
        self.assertEqual({k: v for k, v in codes.items() if v != 0}, {},
                         "every container exits 0 on SIGTERM\n" + L.logs())
        self.assertEqual(L.events_of("killed_after_grace"), [])
        for kind in ("liveness_failed", "startup_probe_failed", "container_exited", "pod_failed"):
            self.assertEqual(L.events_of(kind), [], kind)
        inits = L.events_of("init_exit")
        self.assertEqual(len(inits), len(L.pods), "one model-fetch initContainer per pod ran")
        self.assertTrue(all(d == "0" for _, _, _, d in inits))
        # The tripwire: a pending path that is now served must leave the pending list.
        for (who, path), statuses in sorted(L.http_answers.items()):
            if path in PENDING_PROBE_PATHS:
                self.assertEqual(statuses, {404},
                                 "%s now answers %s on %s: remove it from PENDING_PROBE_PATHS "
                                 "in deploy/launch_test.py" % (who, statuses, path))
            elif path in ("/startupz", "/readyz"):
                # Not started / not ready yet (a rank waiting for its group, a model still
                # loading) is a 503 the kubelet waits out; each must have turned 200.
                self.assertIn(200, statuses, "%s %s: %s" % (who, path, statuses))
                self.assertLessEqual(statuses, {200, 503}, "%s %s: %s" % (who, path, statuses))
            else:
                self.assertTrue(all(200 <= s < 400 for s in statuses),
                                "%s %s: %s" % (who, path, statuses))

    def test_cpu_overlay_serves_a_generation(self):
        L = self.launch("cpu")
        self.assertEqual(len(L.pods), 3)
        self.wait_replicas(2)
        text = self.generate()
        page = scrape(L.service_address("weft-smollm2-metrics", "metrics"))
        self.assertEqual(value(page, "weft_requests_status_total", code="OK", model="smollm2"), 1)
        self.assertEqual(value(page, "weft_generated_tokens_total", model="smollm2"), 8)
        # What the HPA and prometheus-adapter select: present, labelled with the model.
        for name in ("weft_requests_waiting", "weft_kv_usage_ratio"):
            self.assertIsNotNone(value(page, name, model="smollm2"), name)
        unlabelled = [k for k in page if k.startswith("weft_") and 'model="smollm2"' not in k]
        self.assertEqual(unlabelled, [])
        # The scheduler became ready (gRPC readiness) and the public Service routed to it.
        self.assertTrue(L.events_of("ready"))
        print("launch_test: cpu overlay generated %r; not run here: %s"
              % (text, ", ".join(L.not_run)), file=sys.stderr)
        self.stop_and_check()

    def test_gpu_overlay_on_cpus(self):
        L = self.launch("gpu", ON_CPU)
        self.assertEqual(len(L.pods), 2)
        self.wait_replicas(1)
        self.generate()
        page = scrape(L.service_address("weft-smollm2-metrics", "metrics"))
        pod = next(p.name for p in L.pods if p.name.startswith("weft-workers"))
        self.assertIsNotNone(value(page, "weft_steps_total", replica=pod),
                             "the replica is named after its pod")
        self.stop_and_check()

    def test_lws_overlay_on_cpus(self):
        L = self.launch("lws", ON_CPU)
        self.assertEqual(len(L.pods), 3)  # the scheduler, a leader and a worker pod
        self.wait_replicas(1)
        self.generate()
        page = scrape(L.service_address("weft-smollm2-metrics", "metrics"))
        key = next(p.labels["leaderworkerset.sigs.k8s.io/group-key"] for p in L.pods
                   if "leaderworkerset.sigs.k8s.io/group-key" in p.labels)
        self.assertIsNotNone(value(page, "weft_steps_total", replica=key),
                             "the replica is named after its LWS group")
        self.stop_and_check()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheduler", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--cli", required=True)
    ARGS, rest = ap.parse_known_args()
    for k in ("scheduler", "worker", "cli"):
        setattr(ARGS, k, os.path.abspath(getattr(ARGS, k)))
    sys.argv[1:] = rest
    testlib.main()
