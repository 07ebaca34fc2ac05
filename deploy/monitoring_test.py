#!/usr/bin/python3
"""deploy/monitoring_test.py --scheduler BIN --worker BIN --cli BIN: what
deploy/k8s/monitoring and the autoscalers query exists, against the series a running
scheduler and worker export (the real binaries and model: one generation, then
/metrics of both).

* The Grafana dashboard (monitoring/weft-dashboard.json) parses, its panels are
  well-formed (unique ids, grid positions that do not overlap, targets with an expr and
  a unique refId, the datasource and every $variable defined), and every metric its
  expressions name is one the scheduler or the worker exports.
* The vLLM-compatible recording rules (monitoring/vllm-compatible-rules.yaml) pass
  `promtool check rules`, and `promtool test rules` with Weft's series in gets vLLM's
  names out (each rule, with model_name added and Weft's labels kept; a quantile over the
  recorded buckets equals the one over Weft's); every source metric exists.
* The autoscalers' metrics exist: the HPA's External metrics (served by the adapter
  rules), KEDA's ScaledObject queries.
* Both binaries export weft_build_info{version, revision} 1 with the identity their
  --version prints (the scheduler's with its model label, as all its series).
* The monitors carry the release label kube-prometheus-stack selects on, as the
  kustomization sets it (and a changed value reaches every object).
Skips without the default model or without Debian's promtool (the prometheus package).
"""
import argparse
import json
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
import render  # noqa: E402
import testlib  # noqa: E402
import yaml  # noqa: E402

MONITORING = os.path.join(HERE, "k8s", "monitoring")
PROMTOOL = "/usr/bin/promtool"
ARGS = None
METRIC = re.compile(r"(?<![\w:$])((?:weft_|vllm:)[A-Za-z0-9_:]*)")


def metric_names(expr):
    return set(METRIC.findall(expr))


def fmt(labels):
    return ",".join('%s="%s"' % kv for kv in sorted(labels.items()))


def families(page):
    """{metric family: type} of a Prometheus text page, with the sample names a
    histogram adds (_bucket, _sum, _count)."""
    out = {}
    for m in re.finditer(r"^# TYPE (\S+) (\S+)$", page, re.M):
        out[m.group(1)] = m.group(2)
        if m.group(2) == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                out[m.group(1) + suffix] = "histogram sample"
    return out


class Cluster:
    """A weft-scheduler and a weft-worker on loopback (ports from their ports files)."""

    def __init__(self, model, tmp):
        self.tmp = tmp
        self.procs = []
        sched_ports = os.path.join(tmp, "scheduler.ports.json")
        self.start([ARGS.scheduler, "--model=" + model, "--model_name=m1", "--host=127.0.0.1", "--port=0",
                    "--worker_port=0", "--metrics_port=0", "--ports_file=" + sched_ports],
                   "scheduler")
        self.sched = self.ports(sched_ports)
        worker_ports = os.path.join(tmp, "worker.ports.json")
        self.start([ARGS.worker, "--scheduler=127.0.0.1:%d" % self.sched["worker_port"],
                    "--model=" + model, "--replica=r0", "--rank=0", "--world_size=1",
                    "--num_kv_blocks=64", "--threads=1", "--metrics_port=0",
                    "--ports_file=" + worker_ports], "worker")
        self.worker = self.ports(worker_ports)

    def start(self, argv, name):
        log = open(os.path.join(self.tmp, name + ".log"), "wb")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))

    def ports(self, path, timeout=120):
        end = time.time() + timeout
        while time.time() < end:
            if os.path.exists(path) and os.path.getsize(path) > 0:
                return json.load(open(path))
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.1)
        raise AssertionError("no ports file %s:\n%s" % (path, self.logs()))

    def metrics(self, port):
        return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()

    def logs(self):
        return "".join(open(os.path.join(self.tmp, f), errors="replace").read()[-3000:]
                       for f in sorted(os.listdir(self.tmp)) if f.endswith(".log"))

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()


def setUpModule():
    global PAGES
    PAGES = None
    model = testlib.find_model()
    if model is None:
        return
    tmp = tempfile.mkdtemp(prefix="monitoring-test-")
    c = Cluster(model, tmp)
    try:
        end = time.time() + 120
        while "weft_replicas{model=\"m1\"} 1" not in c.metrics(c.sched["metrics_port"]):
            if time.time() > end:
                raise AssertionError("no replica attached:\n" + c.logs())
            time.sleep(0.2)
        r = subprocess.run([ARGS.cli, "generate", "--server=127.0.0.1:%d" % c.sched["port"],
                            "--prompt=Hello", "--max_tokens=3", "--max_attempts=1"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise AssertionError("generate failed:\n%s\n%s" % (r.stdout, c.logs()))
        PAGES = {"scheduler": c.metrics(c.sched["metrics_port"]),
                 "worker": c.metrics(c.worker["metrics_port"])}
    finally:
        c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


PAGES = None


class MonitoringTest(unittest.TestCase):
    def setUp(self):
        if PAGES is None:
            self.skipTest("default model not found (tools/bootstrap.sh, or WEFT_MODEL_DIR)")
        self.exported = {}
        for page in PAGES.values():
            self.exported.update(families(page))

    def assertExported(self, names, where):
        missing = sorted(n for n in names if n.startswith("weft_") and n not in self.exported)
        self.assertEqual(missing, [], "%s names series no Weft process exports" % where)

    def test_both_binaries_export_their_build_info(self):
        for name in ("scheduler", "worker"):
            line = subprocess.run([getattr(ARGS, name), "--version"], stdout=subprocess.PIPE,
                                  text=True, check=True, timeout=60).stdout
            m = re.match(r"^\S+ (\S+) \(revision (\S+)\)$", line.strip())
            self.assertIsNotNone(m, "--version of the %s: %r" % (name, line))
            # The scheduler's carries its model label, like every series of its page.
            model = 'model="m1",' if name == "scheduler" else ""
            want = 'weft_build_info{%srevision="%s",version="%s"} 1' % (model, m.group(2),
                                                                        m.group(1))
            self.assertIn(want, PAGES[name].splitlines(), "%s /metrics" % name)

    def test_dashboard(self):
        d = json.load(open(os.path.join(MONITORING, "weft-dashboard.json")))
        variables = {v["name"] for v in d["templating"]["list"]}
        self.assertEqual(variables, {"datasource", "model"})
        ids, cells, exprs = set(), set(), []
        for p in d["panels"]:
            self.assertNotIn(p["id"], ids)
            ids.add(p["id"])
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            area = {(g["x"] + i, g["y"] + j) for i in range(g["w"]) for j in range(g["h"])}
            self.assertFalse(cells & area, "%s overlaps another panel" % p["title"])
            cells |= area
            if p["type"] == "row":
                continue
            self.assertEqual(p["datasource"]["uid"], "${datasource}")
            refs = [t["refId"] for t in p["targets"]]
            self.assertEqual(len(refs), len(set(refs)), p["title"])
            for t in p["targets"]:
                exprs.append(t["expr"])
                for v in re.findall(r"\$(\w+)", t["expr"]):
                    self.assertIn(v, variables | {"__rate_interval"}, t["expr"])
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                exprs.append(v["query"]["query"])
        self.assertGreater(len(exprs), 20)
        named = set().union(*(metric_names(e) for e in exprs))
        self.assertGreater(len(named), 20)
        self.assertExported(named, "the dashboard")
        self.assertFalse(any(n.startswith("vllm:") for n in named),
                         "the dashboard reads Weft's own series")

    def rules(self):
        doc = yaml.safe_load(open(os.path.join(MONITORING, "vllm-compatible-rules.yaml")))
        return doc["spec"]["groups"]

    def test_recording_rules(self):
        if not os.access(PROMTOOL, os.X_OK):
            self.skipTest("%s not found (Debian's prometheus package)" % PROMTOOL)
        groups = self.rules()
        rules = [r for g in groups for r in g["rules"]]
        self.assertExported(set().union(*(metric_names(r["expr"]) for r in rules)),
                            "the recording rules")
        recorded = {r["record"] for r in rules}
        for name in ("vllm:num_requests_waiting", "vllm:num_requests_running",
                     "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds_bucket",
                     "vllm:e2e_request_latency_seconds_count", "vllm:generation_tokens_total"):
            self.assertIn(name, recorded)
        tmp = tempfile.mkdtemp(prefix="monitoring-rules-")
        try:
            with open(os.path.join(tmp, "rules.yaml"), "w") as f:
                yaml.safe_dump({"groups": groups}, f)
            r = subprocess.run([PROMTOOL, "check", "rules", os.path.join(tmp, "rules.yaml")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.assertEqual(r.returncode, 0, r.stdout)
            # One series of each source metric in; each rule's recorded series out: the
            # same labels and value, with model_name (and finished_reason) added.
            sources = sorted({m for r in rules for m in metric_names(r["expr"])})
            series, inputs = [], {}
            for i, source in enumerate(sources):
                labels = {"model": "m1", "pod": "p%d" % i}
                if source == "weft_requests_finished_total":
                    labels["reason"] = "length"
                if source.endswith("_bucket"):
                    labels["le"] = "0.5"
                inputs[source] = (labels, 10 * (i + 1))
                series.append({"series": "%s{%s}" % (source, fmt(labels)),
                               "values": "0+%dx10" % (i + 1)})
            tests = []
            for rule in rules:
                (source,) = metric_names(rule["expr"])
                labels, value = inputs[source]
                out = dict(labels, model_name="m1")
                if "reason" in labels:
                    out["finished_reason"] = labels["reason"]
                tests.append({"expr": rule["record"], "eval_time": "10m",
                              "exp_samples": [{"labels": "%s{%s}" % (rule["record"], fmt(out)),
                                               "value": value}]})
            # A quantile over the recorded buckets is the one over Weft's: their difference
            # is one sample of 0 (none if either side had no data). A test of its own: its
            # series would be in the recorded ones above.
            hist = [{"series": 'weft_time_to_first_token_seconds_bucket{model="m2",le="%s"}' % le,
                     "values": "0+%dx10" % n} for le, n in (("0.1", 1), ("0.5", 3), ("+Inf", 4))]
            q = 'histogram_quantile(0.5, sum by (le) (rate(%s{model="m2"}[5m])))'
            quantile = [{"expr": "%s - %s" % (q % "vllm:time_to_first_token_seconds_bucket",
                                              q % "weft_time_to_first_token_seconds_bucket"),
                         "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": 0}]}]
            unit = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                    "tests": [{"interval": "1m", "input_series": series,
                               "promql_expr_test": tests},
                              {"interval": "1m", "input_series": hist,
                               "promql_expr_test": quantile}]}
            with open(os.path.join(tmp, "test.yaml"), "w") as f:
                yaml.safe_dump(unit, f)
            r = subprocess.run([PROMTOOL, "test", "rules", "test.yaml"], cwd=tmp,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.assertEqual(r.returncode, 0, r.stdout[-4000:])
            self.assertIn("SUCCESS", r.stdout)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_autoscalers_read_exported_series(self):
        adapter = yaml.safe_load(open(os.path.join(MONITORING, "prometheus-adapter-values.yaml")))
        names = set()
        for rule in adapter["rules"]["external"]:
            names |= metric_names(rule["seriesQuery"]) | {rule["name"]["as"]}
        for overlay in ("cpu", "gpu", "lws"):
            for o in render.render(os.path.join(HERE, "k8s", overlay)):
                if o["kind"] == "HorizontalPodAutoscaler":
                    names |= {m["external"]["metric"]["name"] for m in o["spec"]["metrics"]}
        keda = [o for o in render.render(os.path.join(HERE, "k8s", "cpu-keda"))
                if o["kind"] == "ScaledObject"]
        self.assertEqual(len(keda), 1)
        for t in keda[0]["spec"]["triggers"]:
            names |= metric_names(t["metadata"]["query"])
        self.assertEqual(names, {"weft_requests_waiting", "weft_kv_usage_ratio"})
        self.assertExported(names, "the autoscalers")
        self.assertEqual({self.exported[n] for n in names}, {"gauge"})

    def test_monitors_carry_the_release_label(self):
        objs = render.render(MONITORING)
        self.assertEqual(sorted(o["kind"] for o in objs),
                         ["ConfigMap", "PodMonitor", "PrometheusRule", "ServiceMonitor"])
        for o in objs:
            self.assertEqual(o["metadata"]["labels"]["release"], "kube-prometheus-stack")
        dash = next(o for o in objs if o["kind"] == "ConfigMap")
        self.assertEqual(dash["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(json.loads(dash["data"]["weft-dashboard.json"])["uid"], "weft-overview")
        # Configurable: another release name in the kustomization reaches every object.
        tmp = tempfile.mkdtemp(prefix="monitoring-release-")
        try:
            d = os.path.join(tmp, "monitoring")
            shutil.copytree(MONITORING, d)
            k = os.path.join(d, "kustomization.yaml")
            text = open(k).read()
            self.assertIn("release: kube-prometheus-stack", text)
            open(k, "w").write(text.replace("release: kube-prometheus-stack", "release: prom"))
            self.assertEqual({o["metadata"]["labels"]["release"] for o in render.render(d)},
                             {"prom"})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


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
