#!/usr/bin/env python3
"""Validates the rendered overlays of deploy/k8s against Kubernetes' schemas, strictly.

    deploy/k8s/validate.sh [--k8s 1.30,newest] [DIR ...]     (makes the venv, runs this)

Built-in kinds: PyPI's kubernetes-validate (strict: an unknown field is an error) for each
Kubernetes version given ("newest" = the newest that kubernetes-validate bundles).
Custom resources (LeaderWorkerSet, ServiceMonitor, PodMonitor, PrometheusRule, KEDA's
ScaledObject; the edge's Gateway, GRPCRoute, HTTPRoute, Certificate, Issuer): the CRD
schemas vendored in schemas/ (made strict by schemas/vendor_crd.py), embedded pod
templates checked against the same version's PodTemplateSpec. A kind with no schema is an
error. A self-test first makes sure misspelt fields are rejected (the check can fail).
When kubectl is on PATH (not in CI; this machine has one, with kustomize v5.5.0), also
checks that `kubectl kustomize DIR` gives the same objects as render.py. Exit 0 when
everything validates.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import jsonschema
import kubernetes_validate.utils as kv
import referencing
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import render  # noqa: E402
import testlib  # noqa: E402

# Every kustomization a user applies: the overlays, the secure ones (the edge's tls and
# auth components on each), the example Gateway and development CA, and deploy/README.md's
# "Another model" overlay (routing, TLS and tokens for a second model), which main()
# writes into a copy of deploy/k8s.
OVERLAYS = ["cpu", "gpu", "lws", "monitoring", "cpu-secure", "gpu-secure", "lws-secure",
            "cpu-keda", "edge/gateway", "edge/tls/dev-ca"]


def crd_schemas():
    """{(apiVersion, kind): schema} from schemas/*.json."""
    out = {}
    for name in sorted(os.listdir(os.path.join(HERE, "schemas"))):
        if name.endswith(".json"):
            s = json.load(open(os.path.join(HERE, "schemas", name)))
            out[(s["properties"]["apiVersion"]["enum"][0], s["properties"]["kind"]["enum"][0])] = s
    return out


def k8s_definitions(version):
    """Kubernetes' strict definitions for `version`, as kubernetes-validate bundles them."""
    v = [x for x in kv.all_versions() if kv.major_minor(x) <= kv.major_minor(version)][-1]
    return kv.schema_contents("kubernetes-json-schema/v%s-local-strict/_definitions.json" % v,
                              version), kv.major_minor(v)


def validate_crd(obj, schema, version):
    defs, _ = k8s_definitions(version)
    registry = referencing.Registry().with_resource(
        defs["$id"], referencing.Resource.from_contents(defs))
    jsonschema.validators.Draft202012Validator(schema, registry=registry).validate(obj)


def kubectl_version():
    r = subprocess.run(["kubectl", "version", "--client"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return " ".join(l.strip() for l in r.stdout.splitlines() if "Kustomize" in l) or "?"


def kubectl_matches(directory):
    """None if kubectl renders `directory` as render.py does, else the difference."""
    r = subprocess.run(["kubectl", "kustomize", directory], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        return "kubectl kustomize failed: " + r.stderr.strip()
    key = lambda o: (o["kind"], o["metadata"]["name"])
    theirs = sorted((o for o in yaml.safe_load_all(r.stdout) if o), key=key)
    ours = sorted(render.render(directory), key=key)
    if theirs == ours:
        return None
    diff = [key(a) for a, b in zip(theirs, ours) if a != b]
    return "objects differ: %s (kubectl %d objects, render.py %d)" % (diff, len(theirs), len(ours))


def self_test(crds, version, another):
    """The checks can fail: a misspelt field in a Deployment's container, in a
    LeaderWorkerSet's pod template, in a ServiceMonitor endpoint, in the edge's routes,
    Gateway, Certificate and Issuer, and a wrong type in an HPA, must each be rejected.
    Returns the problems (empty when all were caught)."""
    import copy
    dirs = [os.path.join(HERE, d) for d in ("cpu", "lws", "monitoring", "edge/gateway",
                                            "cpu-secure", "edge/tls/dev-ca", "cpu-keda")] + [another]
    objs = {(o["kind"]): o for d in dirs for o in render.render(d)}
    cases = []
    d = copy.deepcopy(objs["Deployment"])
    d["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    cases.append(("Deployment container field livenesProbe", d))
    l = copy.deepcopy(objs["LeaderWorkerSet"])
    l["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["gpus"] = 1
    cases.append(("LeaderWorkerSet pod template field gpus", l))
    l = copy.deepcopy(objs["LeaderWorkerSet"])
    l["spec"]["leaderWorkerTemplate"]["sizes"] = 2
    cases.append(("LeaderWorkerSet field sizes", l))
    m = copy.deepcopy(objs["ServiceMonitor"])
    m["spec"]["endpoints"][0]["portName"] = "metrics"
    cases.append(("ServiceMonitor endpoint field portName", m))
    h = copy.deepcopy(objs["HorizontalPodAutoscaler"])
    h["spec"]["minReplicas"] = "one"
    cases.append(("HPA minReplicas as a string", h))
    g = copy.deepcopy(objs["GRPCRoute"])
    g["spec"]["rules"][0]["matches"][0]["headers"][0]["header"] = "x-weft-model"
    cases.append(("GRPCRoute header match field header", g))
    r = copy.deepcopy(objs["HTTPRoute"])
    r["spec"]["rules"][1]["filters"][0]["type"] = "URLRewriter"
    cases.append(("HTTPRoute filter type URLRewriter", r))
    gw = copy.deepcopy(objs["Gateway"])
    gw["spec"]["listeners"][0]["port"] = "50051"
    cases.append(("Gateway listener port as a string", gw))
    c = copy.deepcopy(objs["Certificate"])
    c["spec"]["dnsName"] = c["spec"].pop("dnsNames", ["x"])
    cases.append(("Certificate field dnsName", c))
    i = copy.deepcopy(objs["Issuer"])
    i["spec"]["selfsigned"] = {}
    cases.append(("Issuer field selfsigned", i))
    k = copy.deepcopy(objs["ScaledObject"])
    k["spec"]["triggers"][0]["threshhold"] = "8"
    cases.append(("ScaledObject trigger field threshhold", k))
    k = copy.deepcopy(objs["ScaledObject"])
    k["spec"]["maxReplicaCount"] = "8"
    cases.append(("ScaledObject maxReplicaCount as a string", k))
    r = copy.deepcopy(objs["PrometheusRule"])
    r["spec"]["groups"][0]["rules"][0]["recorded"] = "x"
    cases.append(("PrometheusRule rule field recorded", r))
    problems = []
    for what, o in cases:
        try:
            schema = crds.get((o["apiVersion"], o["kind"]))
            if schema is not None:
                validate_crd(o, schema, version)
            else:
                kv.validate(o, version, strict=True)
            problems.append("self-test: %s was accepted" % what)
        except jsonschema.ValidationError:
            pass
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k8s", default="1.30,newest",
                    help="Kubernetes versions, comma-separated ('newest': the newest bundled)")
    ap.add_argument("dirs", nargs="*", default=[os.path.join(HERE, o) for o in OVERLAYS])
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="weft-validate-")
    another = testlib.another_model_overlay(tmp)
    if a.dirs == ap.get_default("dirs"):
        a.dirs.append(another)
    versions = []
    for v in a.k8s.split(","):
        v = kv.latest_version() if v == "newest" else v
        if kv.major_minor(v) not in versions:
            versions.append(kv.major_minor(v))
    crds = crd_schemas()
    failures = 0
    for problem in self_test(crds, versions[0], another):
        print("FAIL " + problem)
        failures += 1
    checked = {}
    for d in a.dirs:
        name = ("README's another-model overlay" if d == another else os.path.relpath(d, HERE))
        try:
            objs = render.render(d)
        except render.RenderError as e:
            print("FAIL %s: %s" % (name, e))
            failures += 1
            continue
        for version in versions:
            for o in objs:
                what = "%s: %s/%s against Kubernetes %s" % (
                    name, o.get("kind"), o.get("metadata", {}).get("name"), version)
                try:
                    schema = crds.get((o.get("apiVersion"), o.get("kind")))
                    if schema is not None:
                        validate_crd(o, schema, version)
                        how = "CRD schema"
                    else:
                        kv.validate(o, version, strict=True)
                        how = "kubernetes-validate --strict"
                    checked[(version, how)] = checked.get((version, how), 0) + 1
                except kv.SchemaNotFoundError as e:
                    print("FAIL %s: no schema (%s)" % (what, e.message))
                    failures += 1
                except jsonschema.ValidationError as e:
                    path = ".".join(str(p) for p in e.absolute_path)
                    print("FAIL %s: %s: %s" % (what, path, e.message[:300]))
                    failures += 1
        if shutil.which("kubectl"):
            problem = kubectl_matches(d)
            if problem:
                print("FAIL %s: kubectl kustomize and render.py disagree: %s" % (name, problem))
                failures += 1
            else:
                print("ok %s: kubectl kustomize (%s) renders the same %d objects"
                      % (name, kubectl_version(), len(objs)))
        print("%s %s: %d objects" % ("ok" if not failures else "..", name, len(objs)))
    for (version, how), n in sorted(checked.items()):
        print("validated %d objects against Kubernetes %s (%s)" % (n, version, how))
    if not shutil.which("kubectl"):
        print("note: no kubectl here; render.py was compared with kubectl kustomize where one was")
    shutil.rmtree(tmp, ignore_errors=True)
    print("FAIL: %d problems" % failures if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
