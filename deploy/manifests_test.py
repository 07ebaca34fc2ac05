#!/usr/bin/python3
"""deploy/manifests_test.py --scheduler BIN --worker BIN --cli BIN: static checks of the
rendered overlays of deploy/k8s, the secure ones (the edge's tls and auth components) and
the edge's routing (the schema checks are deploy/k8s/validate.sh; what runs is
launch_test.py).

* Every overlay renders (render.py), its YAML passes yamllint (strict).
* Every --flag a weft container passes is one its binary defines (--helpfull), so a
  renamed flag fails here, not as a crash-looping pod.
* The wiring holds: Services select pods and name their ports; probes name declared
  ports; the workers' --scheduler is a Service that publishes the not-ready scheduler;
  the workers' model path is where their initContainer puts it, fetched from the source
  tools/models.txt names; the scheduler's --model_name is the pods' model label, which
  the HPA's metric selectors use and prometheus-adapter serves; PDBs let nodes drain
  beside the HPA's minimum; grace periods exceed the drain timeouts; every container with
  a liveness probe has a startup probe (liveness cannot kill a loading worker); GPU
  ranks request one nvidia.com/gpu each; the monitors select the metrics ports.
* The OpenAI HTTP API: --http_port is the scheduler's declared port "http", on the public
  Service and open in the NetworkPolicy.
* The edge: the exec readiness probe's `weft` flags exist and it dials the pod's own
  port; every mount names a volume; in the secure overlays every rank container of every
  worker pod (the gpu pod's two, the LeaderWorkerSet's pods) has the worker certificate
  (flags pointing into a mounted Secret that a Certificate with "client auth" makes), the
  scheduler its public and attach certificates and the tokens file; the check is shown
  to catch a rank container left out; the certificates carry the names clients check
  (the attach Service the workers dial, the public Service). The routes match x-weft-model (or the /<model>
  prefix) with the scheduler's --model_name and reach ports of the public Service, and
  so do deploy/proxy's HAProxy backends.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "k8s"))
import render  # noqa: E402
import testlib  # noqa: E402
import yaml  # noqa: E402

K8S = os.path.join(HERE, "k8s")
# deploy/README.md's "Another model" overlay (a second model, with routing, TLS and
# tokens), written by setUpModule into a copy of deploy/k8s: checked as the shipped ones.
ANOTHER = "models/beta"
OVERLAYS = ["cpu", "gpu", "lws", "cpu-secure", "gpu-secure", "lws-secure", "cpu-keda", ANOTHER]
SECURE = ["cpu-secure", "gpu-secure", "lws-secure", ANOTHER]
WORKER_STARTUP_BUDGET_S = 300  # a GPU model's load must fit in the startupProbe's window
ARGS = None
TMP = None


def setUpModule():
    global TMP
    TMP = tempfile.mkdtemp(prefix="manifests-test-")
    testlib.another_model_overlay(TMP, "beta")


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def objects(overlay):
    if overlay == ANOTHER:
        return render.render(os.path.join(TMP, "k8s", ANOTHER))
    return render.render(os.path.join(K8S, overlay))


def model_of(objs):
    """The scheduler's --model_name in an overlay's objects."""
    sched = [c for _, _, c in containers(objs) if binary(c) == "weft-scheduler"][0]
    return flag_map(sched["args"])["--model_name"]


def strings(node):
    """Every string in a nested object (keys and values)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield str(k)
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)
    elif isinstance(node, str):
        yield node


def pod_templates(objs):
    """(workload name, pod template) for every pod template in `objs`."""
    for o in objs:
        if o["kind"] == "Deployment":
            yield o["metadata"]["name"], o["spec"]["template"]
        elif o["kind"] == "LeaderWorkerSet":
            lwt = o["spec"]["leaderWorkerTemplate"]
            for t in ("leaderTemplate", "workerTemplate"):
                if t in lwt:
                    yield o["metadata"]["name"], lwt[t]


def containers(objs, init=False):
    for name, t in pod_templates(objs):
        inits = t["spec"].get("initContainers", []) if init else []
        for c in t["spec"].get("containers", []) + inits:
            yield name, t, c


def flag_map(args):
    out = {}
    for a in args:
        if a.startswith("--"):
            k, _, v = a.partition("=")
            out[k] = v
    return out


def binary(c):
    return os.path.basename(c.get("command", [""])[0])


def known_flags(path):
    out = subprocess.run([path, "--helpfull"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True).stdout
    return set(re.findall(r"^\s+(--[a-z_0-9]+)", out, re.M))


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


class ManifestsTest(unittest.TestCase):
    def test_yamllint_strict(self):
        files = [os.path.join(dp, f) for dp, _, fs in os.walk(K8S) for f in fs
                 if f.endswith(".yaml")]
        r = subprocess.run(["yamllint", "-s", "-d",
                            "{extends: relaxed, rules: {line-length: {max: 120}}}", *files],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(r.returncode, 0, r.stdout)

    def test_every_weft_flag_exists(self):
        known = {"weft-scheduler": known_flags(ARGS.scheduler),
                 "weft-worker": known_flags(ARGS.worker), "weft": known_flags(ARGS.cli)}
        self.assertIn("--model", known["weft-scheduler"])
        self.assertIn("--backend", known["weft-worker"])
        self.assertIn("--tls_ca", known["weft"])
        checked = 0
        for overlay in OVERLAYS:
            for _, _, c in containers(objects(overlay)):
                commands = [c.get("command", []) + c.get("args", [])]
                commands += [c[k]["exec"]["command"] for k in ("startupProbe", "livenessProbe",
                                                               "readinessProbe")
                             if "exec" in c.get(k, {})]
                for argv in commands:
                    b = os.path.basename(argv[0]) if argv else ""
                    if b not in known:
                        continue
                    for a in argv[1:]:
                        if a.startswith("--"):
                            checked += 1
                            self.assertIn(a.split("=", 1)[0], known[b],
                                          "%s: %s (container %s) passes %s, which it does not "
                                          "define" % (overlay, b, c["name"], a))
        self.assertGreater(checked, 80)

    def test_every_mount_names_a_volume(self):
        for overlay in OVERLAYS:
            for name, t, c in containers(objects(overlay), init=True):
                volumes = {v["name"] for v in t["spec"].get("volumes", [])}
                for m in c.get("volumeMounts", []):
                    self.assertIn(m["name"], volumes, "%s: %s/%s" % (overlay, name, c["name"]))

    def test_services_select_pods_and_ports(self):
        for overlay in OVERLAYS:
            objs = objects(overlay)
            for svc in (o for o in objs if o["kind"] == "Service"):
                pods = [t for _, t in pod_templates(objs)
                        if selects(svc["spec"]["selector"], t["metadata"]["labels"])]
                name = svc["metadata"]["name"]
                self.assertTrue(pods, "%s: Service %s selects no pod" % (overlay, name))
                for p in svc["spec"]["ports"]:
                    tp = p.get("targetPort", p["port"])
                    for t in pods:
                        ports = [cp for c in t["spec"]["containers"] for cp in c.get("ports", [])]
                        self.assertTrue(
                            any(cp.get("name") == tp or cp["containerPort"] == tp for cp in ports),
                            "%s: Service %s port %s not on its pods" % (overlay, name, tp))

    def test_probes_name_declared_ports_and_startup_gates_liveness(self):
        for overlay in OVERLAYS:
            for _, t, c in containers(objects(overlay)):
                ports = c.get("ports", [])
                declared = {p.get("name") for p in ports} | {p["containerPort"] for p in ports}
                for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
                    if kind not in c:
                        continue
                    probe = c[kind]
                    if "exec" in probe:  # it dials the pod's own port (127.0.0.1:N)
                        dialed = [int(p) for a in probe["exec"]["command"]
                                  for p in re.findall(r"(?:127\.0\.0\.1|localhost):(\d+)", a)]
                        self.assertTrue(dialed, "%s %s %s" % (overlay, c["name"], kind))
                        for port in dialed:
                            self.assertIn(port, declared, "%s %s %s" % (overlay, c["name"], kind))
                        continue
                    action = next(probe[k] for k in ("httpGet", "grpc", "tcpSocket") if k in probe)
                    self.assertIn(action["port"], declared, "%s %s %s" % (overlay, c["name"], kind))
                if "livenessProbe" in c:
                    self.assertIn("startupProbe", c, "%s: %s has liveness without a startup "
                                  "probe: a slow model load would be killed" % (overlay, c["name"]))
                    self.assertNotEqual(c["livenessProbe"].get("httpGet", {}).get("path"),
                                        "/metrics")
                if binary(c) == "weft-worker":
                    s = c["startupProbe"]
                    budget = (s.get("initialDelaySeconds", 0) +
                              s.get("periodSeconds", 10) * s.get("failureThreshold", 3))
                    self.assertGreaterEqual(budget, WORKER_STARTUP_BUDGET_S,
                                            "%s %s" % (overlay, c["name"]))
                    self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
                    self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/livez")
                    self.assertEqual(s["httpGet"]["path"], "/startupz")

    def test_workers_reach_the_not_ready_scheduler(self):
        for overlay in OVERLAYS:
            objs = objects(overlay)
            services = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
            sched = [c for _, _, c in containers(objs) if binary(c) == "weft-scheduler"]
            self.assertEqual(len(sched), 1)
            worker_port = int(flag_map(sched[0]["args"])["--worker_port"])
            for _, _, c in containers(objs):
                if binary(c) != "weft-worker":
                    continue
                host, port = flag_map(c["args"])["--scheduler"].rsplit(":", 1)
                svc = services.get(host.split(".")[0])
                self.assertIsNotNone(svc, "%s: --scheduler=%s is no Service" % (overlay, host))
                self.assertTrue(svc["spec"].get("publishNotReadyAddresses"),
                                "%s: %s must publish the scheduler before it is ready (it becomes "
                                "ready only once a worker attached)" % (overlay, host))
                sp = next(p for p in svc["spec"]["ports"] if p["port"] == int(port))
                named = {p.get("name"): p["containerPort"] for p in sched[0]["ports"]}
                self.assertEqual(named.get(sp["targetPort"], sp["targetPort"]), worker_port)

    def test_model_is_fetched_where_it_is_read(self):
        models_txt = open(os.path.join(testlib.runfiles_dir(), "tools", "models.txt")).read()
        name, size, sha, src = next(l.split() for l in models_txt.splitlines()
                                    if l.strip() and not l.startswith("#"))
        for overlay in OVERLAYS:
            for _, t, c in containers(objects(overlay)):
                if binary(c) not in ("weft-scheduler", "weft-worker"):
                    continue
                model = flag_map(c["args"])["--model"]
                mount = next(m for m in c["volumeMounts"] if model.startswith(m["mountPath"] + "/"))
                inits = [i for i in t["spec"].get("initContainers", [])
                         if any(m["name"] == mount["name"] for m in i.get("volumeMounts", []))]
                self.assertEqual(len(inits), 1, "%s %s: one initContainer fills %s"
                                 % (overlay, c["name"], mount["name"]))
                init = inits[0]
                imount = next(m for m in init["volumeMounts"] if m["name"] == mount["name"])
                env = {e["name"]: e.get("value") for e in init.get("env", [])}
                dest = flag_map(init["args"])["--dest"]
                self.assertEqual(dest, imount["mountPath"] + model[len(mount["mountPath"]):])
                self.assertEqual(os.path.basename(model), name)
                self.assertEqual(env["MODEL_SOURCE"], src)
                self.assertEqual(env["MODEL_SHA256"], sha)

    def test_model_label_is_served_and_scaled_on(self):
        adapter = yaml.safe_load(open(os.path.join(K8S, "monitoring",
                                                   "prometheus-adapter-values.yaml")))
        served = {r["name"]["as"] for r in adapter["rules"]["external"]}
        for overlay in OVERLAYS:
            objs = objects(overlay)
            sched = [(t, c) for _, t, c in containers(objs) if binary(c) == "weft-scheduler"][0]
            model = sched[0]["metadata"]["labels"]["model"]
            self.assertEqual(flag_map(sched[1]["args"])["--model_name"], model)
            for _, t, c in containers(objs):
                self.assertEqual(t["metadata"]["labels"]["model"], model)
            hpas = [o for o in objs if o["kind"] == "HorizontalPodAutoscaler"]
            keda = [o for o in objs if o["kind"] == "ScaledObject"]
            self.assertEqual(len(hpas) + len(keda), 1, "one autoscaler per workload: " + overlay)
            ref = (hpas or keda)[0]["spec"]["scaleTargetRef"]
            self.assertTrue(any(o["kind"] == ref["kind"] and o["metadata"]["name"] == ref["name"]
                                and o["apiVersion"] == ref["apiVersion"] for o in objs), overlay)
            for h in hpas:
                for m in h["spec"]["metrics"]:
                    self.assertEqual(m["type"], "External")
                    self.assertEqual(m["external"]["metric"]["selector"]["matchLabels"],
                                     {"model": model})
                    self.assertIn(m["external"]["metric"]["name"], served)
            for k in keda:
                queries = [t["metadata"]["query"] for t in k["spec"]["triggers"]]
                self.assertEqual(queries, ['sum(weft_requests_waiting{model="%s"})' % model,
                                           'max(weft_kv_usage_ratio{model="%s"})' % model])

    def test_keda_scales_what_the_flavour_scaled(self):
        """autoscaling/keda on the lws flavour: the ScaledObject targets the
        LeaderWorkerSet (copied from the HPA it replaces), and no HPA is left."""
        d = os.path.join(TMP, "k8s", "lws-keda")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "kustomization.yaml"), "w") as f:
            f.write("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
                    "resources: [../flavors/lws]\ncomponents: [../autoscaling/keda]\n"
                    "transformers: [../model]\n")
        objs = render.render(d)
        self.assertEqual([o for o in objs if o["kind"] == "HorizontalPodAutoscaler"], [])
        (so,) = [o for o in objs if o["kind"] == "ScaledObject"]
        self.assertEqual(so["spec"]["scaleTargetRef"],
                         {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                          "name": "weft-workers-smollm2"})

    def test_pdbs_let_nodes_drain_beside_the_hpa_minimum(self):
        for overlay in OVERLAYS:
            objs = objects(overlay)
            hpa_min = min([o["spec"].get("minReplicas", 1) for o in objs
                           if o["kind"] == "HorizontalPodAutoscaler"] +
                          [o["spec"].get("minReplicaCount", 0) for o in objs
                           if o["kind"] == "ScaledObject"])
            pdbs = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
            self.assertEqual(len(pdbs), 2, overlay)
            for pdb in pdbs:
                s = pdb["spec"]
                if "minAvailable" in s:
                    self.assertLess(int(s["minAvailable"]), hpa_min, "%s: %s blocks drains"
                                    % (overlay, pdb["metadata"]["name"]))
                else:
                    self.assertGreaterEqual(int(s["maxUnavailable"]), 1)

    def test_grace_periods_exceed_drain_timeouts(self):
        for overlay in OVERLAYS:
            objs = objects(overlay)
            sched_t, sched_c = [(t, c) for _, t, c in containers(objs)
                                if binary(c) == "weft-scheduler"][0]
            flags = flag_map(sched_c["args"])
            self.assertGreater(sched_t["spec"]["terminationGracePeriodSeconds"],
                               float(flags["--drain_timeout_s"]))
            # The scheduler's --worker_drain_timeout_s (wired at merge) bounds a worker's drain;
            # until then its documented default, 60 s.
            worker_drain = float(flags.get("--worker_drain_timeout_s", 60))
            for _, t, c in containers(objs):
                if binary(c) == "weft-worker":
                    self.assertGreater(t["spec"]["terminationGracePeriodSeconds"], worker_drain)

    def test_gpu_ranks_request_one_gpu_each(self):
        for overlay in OVERLAYS:
            for _, t, c in containers(objects(overlay)):
                f = flag_map(c.get("args", []))
                if f.get("--backend") == "cuda":
                    self.assertEqual(str(c["resources"]["limits"]["nvidia.com/gpu"]), "1")
                    self.assertEqual(c["image"].split(":")[0], "weft-gpu")
                    ranks = [flag_map(x["args"]).get("--rank") for x in t["spec"]["containers"]]
                    self.assertEqual(len(set(ranks)), len(ranks), "distinct ranks in a pod")
                elif binary(c) in ("weft-scheduler", "weft-worker"):
                    self.assertNotIn("nvidia.com/gpu", c["resources"].get("limits", {}))

    def test_monitors_select_the_metrics_ports(self):
        mon = {o["kind"]: o for o in objects("monitoring")}
        for overlay in OVERLAYS:
            objs = objects(overlay)
            sm = mon["ServiceMonitor"]["spec"]
            svcs = [o for o in objs if o["kind"] == "Service"
                    and selects(sm["selector"]["matchLabels"], o["metadata"]["labels"])]
            self.assertEqual(len(svcs), 1, overlay)
            self.assertTrue(svcs[0]["spec"].get("publishNotReadyAddresses"))
            self.assertIn(sm["endpoints"][0]["port"], [p["name"] for p in svcs[0]["spec"]["ports"]])
            pm = mon["PodMonitor"]["spec"]
            ports = {e["port"] for e in pm["podMetricsEndpoints"]}
            for _, t, c in containers(objs):
                if binary(c) == "weft-worker":
                    self.assertTrue(selects(pm["selector"]["matchLabels"], t["metadata"]["labels"]))
                    mp = int(flag_map(c["args"])["--metrics_port"])
                    name = next(p["name"] for p in c["ports"] if p["containerPort"] == mp)
                    self.assertIn(name, ports, "%s %s" % (overlay, c["name"]))

    def test_http_api_on_the_public_service_and_open(self):
        for overlay in OVERLAYS:
            objs = objects(overlay)
            sched_t, sched = [(t, c) for _, t, c in containers(objs)
                              if binary(c) == "weft-scheduler"][0]
            http = int(flag_map(sched["args"])["--http_port"])
            self.assertEqual({p["name"]: p["containerPort"] for p in sched["ports"]}["http"], http)
            public = [o for o in objs if o["kind"] == "Service" and
                      not o["spec"].get("publishNotReadyAddresses") and
                      selects(o["spec"]["selector"], sched_t["metadata"]["labels"])]
            self.assertEqual(len(public), 1, overlay)
            self.assertIn("http", [p.get("targetPort") for p in public[0]["spec"]["ports"]])
            policy = [o for o in objs if o["kind"] == "NetworkPolicy" and
                      selects(o["spec"]["podSelector"]["matchLabels"],
                              sched_t["metadata"]["labels"])]
            self.assertEqual(len(policy), 1, overlay)
            open_ports = {p["port"] for rule in policy[0]["spec"]["ingress"] if "from" not in rule
                          for p in rule["ports"]}
            self.assertIn(http, open_ports, overlay)
            self.assertIn(int(flag_map(sched["args"])["--port"]), open_ports, overlay)

    def test_secure_overlays_give_every_rank_its_certificate(self):
        for overlay in SECURE:
            self.assertEqual(edge_problems(objects(overlay)), [], overlay)
        ranks = sum(1 for _, _, c in containers(objects("gpu-secure")) if binary(c) == "weft-worker")
        self.assertEqual(ranks, 2, "the gpu overlay's pods have two rank containers")

    def test_the_certificate_check_catches_a_rank_left_out(self):
        objs = objects("gpu-secure")
        rank1 = [c for _, _, c in containers(objs) if binary(c) == "weft-worker"][1]
        rank1["args"] = [a for a in rank1["args"] if not a.startswith("--worker_tls_")]
        problems = edge_problems(objs)
        self.assertTrue(any("rank1" in p and "--worker_tls_cert" in p for p in problems), problems)
        # And a worker certificate that is not a client certificate.
        objs = objects("cpu-secure")
        model = model_of(objs)
        cert = next(o for o in objs if o["kind"] == "Certificate" and
                    o["spec"]["secretName"] == "weft-%s-worker-tls" % model)
        cert["spec"]["usages"] = ["server auth"]
        self.assertTrue(any("client auth" in p for p in edge_problems(objs)))
        # And an attach certificate for another name than the workers dial.
        objs = objects("lws-secure")
        cert = next(o for o in objs if o["kind"] == "Certificate" and
                    o["spec"]["secretName"] == "weft-%s-attach-tls" % model)
        cert["spec"]["dnsNames"] = ["weft-" + model]
        self.assertTrue(any("weft-%s-attach" % model in p for p in edge_problems(objs)))
        # And a rank container without the flag slots the TLS component fills: the render
        # still succeeds (another container had them), this check does not.
        objs = objects("gpu-secure")
        rank1 = [c for _, _, c in containers(objs) if binary(c) == "weft-worker"][1]
        rank1["args"] = [a for a in rank1["args"] if not a.startswith("--worker_tls_cert")]
        self.assertTrue(any("rank1" in p for p in edge_problems(objs)))

    def test_routes_match_the_model_and_reach_the_public_service(self):
        """edge/routing (in the another-model overlay): every rule names the overlay's model
        by a header (x-weft-model, or X-Gateway-Model-Name that a body-based router sets
        from the JSON body's "model") or by the /<model> path prefix, attaches to a listener
        of edge/gateway's Gateway that admits its kind, and reaches the public Service."""
        base = objects(ANOTHER)
        model = model_of(base)
        self.assertEqual(model, "beta")
        ports = {}
        for svc in (o for o in base if o["kind"] == "Service"):
            for p in svc["spec"]["ports"]:
                ports[(svc["metadata"]["name"], p["port"])] = (svc, p.get("targetPort"))
        gateway = next(o for o in render.render(os.path.join(K8S, "edge", "gateway"))
                       if o["kind"] == "Gateway")
        listeners = {l["name"]: l for l in gateway["spec"]["listeners"]}
        want_port = {"GRPCRoute": "grpc", "HTTPRoute": "http"}
        routes = [o for o in base if o["kind"] in want_port]
        self.assertEqual(sorted(r["kind"] for r in routes), ["GRPCRoute", "HTTPRoute"])
        headers_seen = set()
        for r in routes:
            for ref in r["spec"]["parentRefs"]:
                self.assertEqual(ref["name"], gateway["metadata"]["name"])
                kinds = [k["kind"] for k in listeners[ref["sectionName"]]["allowedRoutes"]["kinds"]]
                self.assertIn(r["kind"], kinds)
            for rule in r["spec"]["rules"]:
                for m in rule["matches"]:
                    by_header = [(h["name"].lower(), h["value"]) for h in m.get("headers", [])
                                 if h.get("type", "Exact") == "Exact"]
                    by_path = [m["path"]["value"]] if "path" in m else []
                    headers_seen |= {h for h, _ in by_header}
                    self.assertTrue(
                        (by_header and all(v == model for _, v in by_header) and
                         {h for h, _ in by_header} <= {"x-weft-model", "x-gateway-model-name"})
                        or by_path == ["/" + model],
                        "%s %s: %s" % (r["kind"], r["metadata"]["name"], m))
                for b in rule["backendRefs"]:
                    svc, target = ports.get((b["name"], b["port"]), (None, None))
                    self.assertIsNotNone(svc, "%s: %s:%s" % (r["kind"], b["name"], b["port"]))
                    self.assertFalse(svc["spec"].get("publishNotReadyAddresses"),
                                     "routes go to the Service that follows readiness")
                    self.assertEqual(target, want_port[r["kind"]])
        self.assertEqual(headers_seen, {"x-weft-model", "x-gateway-model-name"})

    def test_proxy_backends_are_the_public_service_ports(self):
        """deploy/proxy/models/*.cfg: backend model:<m> is the gRPC port, openai:<m> the HTTP
        port of Service weft-<m>, and <m> is the scheduler's --model_name."""
        base = objects("cpu")
        sched = [c for _, _, c in containers(base) if binary(c) == "weft-scheduler"][0]
        model = flag_map(sched["args"])["--model_name"]
        ports = {(o["metadata"]["name"], p["port"]): p.get("targetPort") for o in base
                 if o["kind"] == "Service" and not o["spec"].get("publishNotReadyAddresses")
                 for p in o["spec"]["ports"]}
        cfg = open(os.path.join(testlib.runfiles_dir(), "deploy", "proxy", "models",
                                model + ".cfg")).read()
        backends = re.findall(r"^backend (\S+).*\n\s+server \S+ ([\w.-]+):(\d+)", cfg, re.M)
        want = {"model:" + model: "grpc", "openai:" + model: "http"}
        self.assertEqual(sorted(b for b, _, _ in backends), sorted(want))
        for backend, host, port in backends:
            self.assertEqual(ports.get((host, int(port))), want[backend],
                             "%s -> %s:%s" % (backend, host, port))

    # --- one definition per model ------------------------------------------------------------

    def test_the_model_is_defined_in_one_file(self):
        """base/model.yaml is the only file under deploy/k8s that holds the default model's
        name, file or sha256 (every other one has placeholders)."""
        values = yaml.safe_load(open(os.path.join(K8S, "base", "model.yaml")))["data"]
        self.assertEqual(set(values), {"name", "file", "source", "sha256", "volume"})
        found = []
        for dp, _, fs in os.walk(K8S):
            for f in fs:
                path = os.path.join(dp, f)
                if path == os.path.join(K8S, "base", "model.yaml") or "/schemas/" in path:
                    continue
                text = open(path, errors="replace").read()
                found += ["%s: %s" % (os.path.relpath(path, K8S), values[k])
                          for k in ("name", "file", "sha256") if values[k] in text]
        self.assertEqual(found, [])

    def test_every_placeholder_is_filled(self):
        """No MODEL placeholder survives a render (the env names MODEL_SOURCE/MODEL_SHA256
        and their $(...) uses are not placeholders), and every object that carries a model
        label carries the overlay's model."""
        allowed = {"MODEL_SOURCE", "MODEL_SHA256", "--source=$(MODEL_SOURCE)",
                   "--sha256=$(MODEL_SHA256)"}
        for overlay in OVERLAYS:
            objs = objects(overlay)
            model = model_of(objs)
            left = sorted({t for o in objs for t in strings(o) if "MODEL" in t} - allowed)
            self.assertEqual(left, [], overlay)
            for o in objs:
                labels = o["metadata"].get("labels") or {}
                if "model" in labels:
                    self.assertEqual(labels["model"], model, "%s %s" % (overlay, o["kind"]))

    def test_another_model_is_one_overlay_file(self):
        """The README's overlay makes a second model's whole deployment: the same objects
        as the default model's, every name, label, flag and certificate its own, nothing
        of the default model's name left, and no object name shared with the default
        model's but the model-neutral model-fetch script (the same content)."""
        first, second = objects("cpu-secure"), objects(ANOTHER)
        a, b = model_of(first), model_of(second)
        self.assertEqual((a, b), ("smollm2", "beta"))
        names = lambda objs: {(o["kind"], o["metadata"]["name"]) for o in objs}
        renamed = {(k, n.replace(a, b)) for k, n in names(first)}
        self.assertLessEqual(renamed, names(second))
        self.assertEqual({k for k, _ in names(second) - renamed}, {"GRPCRoute", "HTTPRoute"})
        shared = names(first) & names(second)
        self.assertEqual({k for k, _ in shared}, {"ConfigMap"}, shared)
        for o in second:
            for t in strings(o):
                if a in t:  # only the model file's source (a package name) and the script
                    self.assertTrue(o["kind"] == "ConfigMap" or "llm-%s" % a in t, (o["kind"], t))

    def test_model_volumes_outlive_the_scheduler_and_fit_the_model(self):
        """The scheduler's model volume is a claim of the overlay (a restarted scheduler
        finds the file in place, no new download); every model volume (that claim, the
        workers' claim or emptyDir) is sized from the model's values."""
        for overlay in OVERLAYS:
            objs = objects(overlay)
            claims = {o["metadata"]["name"]: o for o in objs
                      if o["kind"] == "PersistentVolumeClaim"}
            sizes = {o["spec"]["resources"]["requests"]["storage"] for o in claims.values()}
            for name, t, c in containers(objs):
                vol = next(v for v in t["spec"]["volumes"] if v["name"] == "models")
                if binary(c) == "weft-scheduler":
                    self.assertIn("persistentVolumeClaim", vol, overlay)
                    claim = claims[vol["persistentVolumeClaim"]["claimName"]]
                    self.assertEqual(claim["spec"]["accessModes"], ["ReadWriteOnce"])
                if "emptyDir" in vol:
                    sizes.add(vol["emptyDir"]["sizeLimit"])
                else:
                    self.assertIn(vol["persistentVolumeClaim"]["claimName"], claims, overlay)
            self.assertEqual(sizes, {"1Gi"}, overlay)  # base/model.yaml's (and README's) volume

    def test_a_changed_script_rolls_the_pods(self):
        """The model-fetch script's ConfigMap has kustomize's content hash in its name, and
        every pod template that mounts it names it: a change renames it everywhere (the
        Deployments' and the LeaderWorkerSet's templates change, so their pods roll)."""
        copy_dir = os.path.join(TMP, "changed")
        shutil.copytree(K8S, copy_dir)
        with open(os.path.join(copy_dir, "base", "fetch_model.py"), "a") as f:
            f.write("# changed\n")
        for overlay in ("cpu", "lws"):
            before, after = objects(overlay), render.render(os.path.join(copy_dir, overlay))
            cm = lambda objs: [o["metadata"]["name"] for o in objs if o["kind"] == "ConfigMap"]
            self.assertEqual(len(cm(before)), 1)
            self.assertTrue(re.fullmatch(r"weft-model-fetch-[a-z0-9]{10}", cm(before)[0]))
            self.assertNotEqual(cm(before), cm(after), overlay)
            for objs in (before, after):
                mounted = {v["configMap"]["name"] for _, t in pod_templates(objs)
                           for v in t["spec"]["volumes"] if "configMap" in v}
                self.assertEqual(mounted, set(cm(objs)), overlay)


def edge_problems(objs):
    """What keeps a secure overlay from working: a rank container without the worker
    certificate, a scheduler without its certificates or tokens, a flag pointing outside
    the Secret it should read, a Secret no Certificate makes."""
    made = {o["spec"]["secretName"]: o["spec"] for o in objs if o["kind"] == "Certificate"}
    problems = []
    served = {}  # the scheduler's --tls_cert / --worker_tls_cert: (DNS names, template, container)

    def secret_file(t, c, flag, value):
        mount = next((m for m in c.get("volumeMounts", [])
                      if value.startswith(m["mountPath"] + "/")), None)
        vol = mount and next((v for v in t["spec"]["volumes"] if v["name"] == mount["name"]), None)
        if not vol or "secret" not in vol:
            problems.append("%s %s: %s is not in a mounted Secret" % (c["name"], flag, value))
            return None
        return vol["secret"]["secretName"]

    for name, t, c in containers(objs):
        b = binary(c)
        if b == "weft-worker":
            wanted, usage = ("--worker_tls_cert", "--worker_tls_key", "--worker_tls_ca"), "client auth"
        elif b == "weft-scheduler":
            wanted, usage = ("--tls_cert", "--tls_key", "--worker_tls_cert", "--worker_tls_key",
                             "--worker_tls_ca", "--auth_tokens_file"), "server auth"
        else:
            continue
        flags = flag_map(c["args"])
        for flag in wanted:
            if flag not in flags:
                problems.append("%s/%s (%s) lacks %s" % (name, c["name"], b, flag))
                continue
            secret = secret_file(t, c, flag, flags[flag])
            if secret is None:
                continue
            if flag == "--auth_tokens_file":
                if secret != "weft-api-tokens":
                    problems.append("%s: tokens from Secret %s" % (c["name"], secret))
            elif secret not in made:
                problems.append("%s %s: no Certificate makes Secret %s" % (c["name"], flag, secret))
            elif flag != "--worker_tls_ca" and usage not in made[secret].get("usages", []):
                problems.append("%s %s: Secret %s is not a %s certificate"
                                % (c["name"], flag, secret, usage))
            elif flag in ("--tls_cert", "--worker_tls_cert") and b == "weft-scheduler":
                served[flag] = (made[secret].get("dnsNames", []), t, c)
    # The names clients check: the workers dial the attach Service by name; the public
    # certificate names the public Service (and the exec probe's --tls_server_name).
    for name, t, c in containers(objs):
        if binary(c) == "weft-worker" and "--worker_tls_cert" in served:
            host = flag_map(c["args"])["--scheduler"].rsplit(":", 1)[0]
            if host not in served["--worker_tls_cert"][0]:
                problems.append("%s dials %s, not a name of the attach certificate %s"
                                % (c["name"], host, served["--worker_tls_cert"][0]))
    if "--tls_cert" in served:
        names, t, c = served["--tls_cert"]
        public = [o["metadata"]["name"] for o in objs if o["kind"] == "Service" and
                  not o["spec"].get("publishNotReadyAddresses") and
                  selects(o["spec"]["selector"], t["metadata"]["labels"])]
        probe = flag_map(c.get("readinessProbe", {}).get("exec", {}).get("command", []))
        for want in public + [probe.get("--tls_server_name")]:
            if want not in names:
                problems.append("the public certificate's names %s lack %s" % (names, want))
    return problems


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheduler", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--cli", required=True)
    ARGS, rest = ap.parse_known_args()
    sys.argv[1:] = rest
    testlib.main()
