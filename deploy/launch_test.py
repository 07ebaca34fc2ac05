#!/usr/bin/python3
"""The manifests are what runs: deploy/launch.py starts an overlay of deploy/k8s as local
processes (the containers' own commands and args, Services as proxies, probes as the
kubelet runs them) and a Generate request is served through the public Service, with
the real binaries and the real model.

    launch_test.py --scheduler BIN --worker BIN --cli BIN

* cpu: the overlay as written (a scheduler, two single-rank CPU workers); the model
  volume is given the default model (as a volume filled beforehand: the initContainer
  runs and finds it in place, sha256 checked). The OpenAI HTTP API answers through the
  same public Service (port http: GET /v1/models, POST /v1/completions with the same
  greedy text as the gRPC call). Also: the scheduler's series carry the model label the
  HPA selects by; every container exits 0 on SIGTERM within its grace.
* gpu, lws: run on CPUs with the two substitutions printed below (--backend=cuda ->
  cpu, a smaller KV budget); everything else as written: a two-rank replica in one pod
  (gpu), a four-rank replica over a LeaderWorkerSet group of two pods (lws).
* cpu-secure (cpu + the edge's tls and auth components): the Certificates issued by a
  CA made here with openssl (launch.dev_certificates, as cert-manager would), a tokens
  file as the Secret weft-api-tokens. The scheduler becomes ready by its exec probe
  (`weft health` over TLS); the CLI over TLS with a token generates through the public
  Service, and so does HTTPS POST /v1/completions with the token; no token, a wrong
  token or plaintext is refused (UNAUTHENTICATED / 401 / no TLS handshake); stray
  workers (no certificate; a certificate from another CA) cannot attach and the replicas
  are untouched.
* gpu-secure on CPUs: both rank containers of the TP pod got the worker certificate
  (the replica forms over mutual TLS and serves).
Every probe is held to its answer (the kubelet's rules: 200-399, SERVING, exit 0).
"""
import argparse
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "k8s"))
import launch  # noqa: E402
import render  # noqa: E402
import testlib  # noqa: E402

ARGS = None
PROMPT = "The capital of France is"
TOKEN = "launch-test-token-1"
ON_CPU = {"--backend=cuda": "--backend=cpu",
          "--gpu_memory_utilization=0.9": "--kv_memory_bytes=268435456"}


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

    def launch(self, overlay, substitutions=None, secrets=None):
        objs = render.render(os.path.join(HERE, "k8s", overlay))
        bins = {"weft-scheduler": ARGS.scheduler, "weft-worker": ARGS.worker, "weft": ARGS.cli}
        for old, new in (substitutions or {}).items():
            print("launch_test: %s: substituting %s -> %s" % (overlay, old, new), file=sys.stderr)
        self.launcher = launch.Launcher(objs, bins, volumes={"models": self.models},
                                        substitutions=substitutions,
                                        state=os.path.join(self.tmp, "state"),
                                        probe_time_scale=0.1, secrets=secrets)
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

    def cli(self, *flags):
        """The weft CLI's generate through the public Service: (exit code, stdout, stderr)."""
        addr = self.launcher.service_address("weft-smollm2", "grpc")
        r = subprocess.run([ARGS.cli, "generate", "--server=" + addr, "--model=smollm2",
                            "--prompt=" + PROMPT, "--max_tokens=8", "--temperature=0", *flags],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        return r.returncode, r.stdout, r.stderr

    def generate(self, *flags):
        """Eight greedy tokens through the public Service, with the weft CLI."""
        code, out, err = self.cli(*flags)
        self.assertEqual(code, 0, err + "\n" + self.launcher.logs())
        self.assertTrue(out.strip())
        self.assertIn("completion 8", err)
        return out

    def http(self, method, path, body=None, scheme="http", token=None, context=None):
        """(status, JSON answer) of the OpenAI HTTP API through the public Service."""
        addr = self.launcher.service_address("weft-smollm2", "http")
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = "Bearer " + token
        req = urllib.request.Request("%s://%s%s" % (scheme, addr, path), method=method,
                                     data=json.dumps(body).encode() if body else None,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=120, context=context) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def complete(self, **kw):
        """POST /v1/completions, 8 greedy tokens: the completion's text."""
        status, answer = self.http("POST", "/v1/completions",
                                   {"model": "smollm2", "prompt": PROMPT, "max_tokens": 8,
                                    "temperature": 0}, **kw)
        self.assertEqual(status, 200, "%s\n%s" % (answer, self.launcher.logs()))
        self.assertEqual(answer["object"], "text_completion")
        self.assertEqual(answer["model"], "smollm2")
        self.assertEqual(answer["usage"]["completion_tokens"], 8)
        return answer["choices"][0]["text"]

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
        for (who, path), statuses in sorted(L.http_answers.items()):
            if path in ("/startupz", "/readyz"):
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
        # The OpenAI HTTP API through the same Service (port http, 8000 in the cluster).
        status, models = self.http("GET", "/v1/models")
        self.assertEqual(status, 200, models)
        self.assertEqual([m["id"] for m in models["data"]], ["smollm2"])
        self.assertEqual(self.complete().strip(), text.strip())
        page = scrape(L.service_address("weft-smollm2-metrics", "metrics"))
        self.assertEqual(value(page, "weft_requests_status_total", code="OK", model="smollm2"), 2)
        self.assertEqual(value(page, "weft_generated_tokens_total", model="smollm2"), 16)
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

    # --- the secure overlays: cert-manager's Secrets made here, tokens ------------------------

    def secure_secrets(self, overlay):
        """The Secrets a secure overlay mounts, as the cluster would hold them: every
        Certificate issued (launch.dev_certificates: a CA made now with openssl) and
        weft-api-tokens (key "tokens": one token a line, comments allowed)."""
        objs = render.render(os.path.join(HERE, "k8s", overlay))
        secrets = launch.dev_certificates(objs, os.path.join(self.tmp, "certificates"))
        self.assertEqual(sorted(secrets), ["weft-smollm2-attach-tls", "weft-smollm2-public-tls",
                                           "weft-smollm2-worker-tls"])
        tokens = os.path.join(self.tmp, "api-tokens")
        os.makedirs(tokens)
        with open(os.path.join(tokens, "tokens"), "w") as f:
            f.write("# weft-api-tokens for launch_test\n%s\n" % TOKEN)
        secrets["weft-api-tokens"] = tokens
        # What a client holds: the token, and the CA that signed the public certificate.
        self.token_file = os.path.join(self.tmp, "client-token")
        with open(self.token_file, "w") as f:
            f.write(TOKEN + "\n")
        self.ca = os.path.join(secrets["weft-smollm2-public-tls"], "ca.crt")
        return secrets

    def assert_exec_readiness_over_tls(self):
        """The scheduler's readiness came from its exec probe (`weft health` over TLS),
        which failed before a replica attached and passed after."""
        L = self.launcher
        sched = [k for k in L.exec_answers if k.startswith("weft-scheduler-smollm2")]
        self.assertEqual(len(sched), 1, L.exec_answers)
        self.assertIn(0, L.exec_answers[sched[0]])
        self.assertTrue(any(who == sched[0] for _, _, who, _ in L.events_of("ready")))

    def test_cpu_secure_overlay_tls_tokens_and_stray_workers(self):
        secrets = self.secure_secrets("cpu-secure")
        L = self.launch("cpu-secure", secrets=secrets)
        self.assertEqual(len(L.pods), 3)
        self.wait_replicas(2)
        self.assert_exec_readiness_over_tls()
        tls = ["--tls_ca=" + self.ca, "--tls_server_name=weft-smollm2"]
        text = self.generate(*tls, "--token_file=" + self.token_file)
        # Refused before any work: no token, a wrong token (UNAUTHENTICATED, exit 1), and a
        # plaintext client (no TLS handshake: UNAVAILABLE).
        wrong = os.path.join(self.tmp, "wrong-token")
        with open(wrong, "w") as f:
            f.write("not-" + TOKEN)
        for flags, want in ((tls, "UNAUTHENTICATED"), (tls + ["--token_file=" + wrong],
                                                       "UNAUTHENTICATED"),
                            # (--max_attempts=1: the first answer, not the CLI's retries)
                            (["--token_file=" + self.token_file, "--max_attempts=1"],
                             "UNAVAILABLE")):
            code, _, err = self.cli(*flags)
            self.assertEqual(code, 1, err)
            self.assertIn(want, err, flags)
        # HTTPS on the http port: the same TLS certificate and tokens.
        context = ssl.create_default_context(cafile=self.ca)
        self.assertEqual(self.complete(scheme="https", token=TOKEN, context=context).strip(),
                         text.strip())
        status, answer = self.http("GET", "/v1/models", scheme="https", context=context)
        self.assertEqual(status, 401, answer)
        self.assertEqual(answer["error"]["code"], "invalid_api_key", answer)
        # Plaintext HTTP to the TLS port: the connection is closed without an answer.
        with self.assertRaises((urllib.error.URLError, ConnectionError)):
            self.http("GET", "/v1/models", token=TOKEN)

        # Stray workers dial the attach Service: one without a certificate, one with a
        # certificate from another CA. They load the model, fail the handshake, retry.
        metrics = L.service_address("weft-smollm2-metrics", "metrics")
        before = scrape(metrics)
        other_ca = launch.DevCA(os.path.join(self.tmp, "other-ca"), "not-the-cluster-ca")
        stray_cert = other_ca.issue(os.path.join(self.tmp, "stray"), "weft-worker-smollm2",
                                    usages=("client auth",))
        worker_ca = os.path.join(secrets["weft-smollm2-worker-tls"], "ca.crt")
        strays = {}
        for name, flags in (("plaintext", []),
                            ("other-ca", ["--worker_tls_cert=%s/tls.crt" % stray_cert,
                                          "--worker_tls_key=%s/tls.key" % stray_cert,
                                          "--worker_tls_ca=" + worker_ca])):
            log = open(os.path.join(self.tmp, "stray-%s.log" % name), "wb")
            strays[name] = (subprocess.Popen(
                [ARGS.worker, "--scheduler=" + L.service_address("weft-smollm2-attach", "attach"),
                 "--model=" + self.model, "--replica=weft-workers-smollm2-0", "--rank=0",
                 "--world_size=1", "--num_kv_blocks=64", "--threads=1", *flags],
                stdout=log, stderr=subprocess.STDOUT), log.name)
        try:
            for name, (p, log) in strays.items():
                end = time.time() + 120
                while "attach to" not in open(log, errors="replace").read():
                    self.assertIsNone(p.poll(), "stray %s exited:\n%s" % (name, open(log).read()))
                    self.assertLess(time.time(), end, "stray %s never tried:\n%s"
                                    % (name, open(log).read()))
                    time.sleep(0.2)
                self.assertIsNone(p.poll(), name)
                self.assertNotIn("attached to", open(log, errors="replace").read(), name)
        finally:
            for p, _ in strays.values():
                p.kill()
                p.wait()
        after = scrape(metrics)
        self.assertEqual(value(after, "weft_replicas", model="smollm2"), 2)
        # Nothing fenced, not even a rejection: the handshake refused them before any hello.
        for name in ("weft_replicas_fenced_total", "weft_workers_rejected_total"):
            self.assertEqual(value(after, name) or 0, value(before, name) or 0, name)
        self.assertEqual(self.generate(*tls, "--token_file=" + self.token_file), text)
        self.stop_and_check()

    def test_gpu_secure_overlay_on_cpus_every_rank_has_its_certificate(self):
        secrets = self.secure_secrets("gpu-secure")
        L = self.launch("gpu-secure", ON_CPU, secrets=secrets)
        self.assertEqual(len(L.pods), 2)
        # Both rank containers attached over mutual TLS, else no replica would form.
        self.wait_replicas(1)
        self.assert_exec_readiness_over_tls()
        self.generate("--tls_ca=" + self.ca, "--tls_server_name=weft-smollm2",
                      "--token_file=" + self.token_file)
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
