#!/usr/bin/python3
"""Checks deploy/k8s/edge without a cluster (CI has no kubectl):

  edge_test.py --scheduler=BIN --worker=BIN --cli=BIN --edge=DIR BASE.yaml...

  * every YAML file is valid (yamllint, strict);
  * the components' JSON 6902 patches apply to the base Deployments they target (their
    paths exist: a renamed container list or volume list in the base breaks this test,
    not a rollout), with the same semantics kustomize uses for "add" (append with "-",
    set a map member);
  * in the patched Deployments every --flag given to weft-scheduler, weft-worker or the
    `weft` CLI (the TLS readiness probe) is one that binary defines, every volumeMount
    names a volume, and every Secret the TLS patches mount is one a Certificate makes;
  * the GRPCRoute matches the x-weft-model header and its backends are Services (and
    ports) of the base.
Needs python3-yaml (comes with yamllint).
"""
import argparse
import copy
import os
import subprocess
import sys

import yaml

FAILS = []


def fail(msg):
    FAILS.append(msg)
    print("FAIL: " + msg)


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def known_flags(binary):
    out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True).stdout
    out += subprocess.run([binary, "--helpfull"], capture_output=True, text=True).stderr
    return {w.split("=")[0].rstrip(";,)") for w in out.split() if w.startswith("--")}


def apply_op(doc, op):
    """JSON patch "add"/"replace" (the ops the components use)."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
    node = doc
    for p in parts[:-1]:
        if isinstance(node, list):
            node = node[int(p)]
        else:
            if p not in node:
                raise KeyError("%s: no '%s'" % (op["path"], p))
            node = node[p]
    last = parts[-1]
    if op["op"] not in ("add", "replace"):
        raise ValueError("unsupported op " + op["op"])
    if isinstance(node, list):
        if last == "-":
            node.append(copy.deepcopy(op["value"]))
        else:
            node.insert(int(last), copy.deepcopy(op["value"]))
    else:
        if op["op"] == "replace" and last not in node:
            raise KeyError("%s: nothing to replace" % op["path"])
        node[last] = copy.deepcopy(op["value"])


def check_container_flags(deployment, flags):
    name = deployment["metadata"]["name"]
    spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"] for v in spec.get("volumes", [])}
    n = 0
    for c in spec.get("containers", []):
        binary = os.path.basename(c.get("command", [""])[0])
        for a in c.get("args", []):
            if binary in flags and a.startswith("--"):
                n += 1
                if a.split("=")[0] not in flags[binary]:
                    fail("%s/%s: %s does not define %s" % (name, c["name"], binary, a))
        probe = c.get("readinessProbe", {}).get("exec", {}).get("command", [])
        if probe and os.path.basename(probe[0]) == "weft":
            for a in probe[1:]:
                if a.startswith("--"):
                    n += 1
                    if a.split("=")[0] not in flags["weft"]:
                        fail("%s/%s: the probe's weft does not define %s" % (name, c["name"], a))
        for m in c.get("volumeMounts", []):
            if m["name"] not in volumes:
                fail("%s/%s: mounts volume %s, which is not declared" % (name, c["name"], m["name"]))
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheduler", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--edge", required=True)
    ap.add_argument("base", nargs="+")
    args = ap.parse_args()

    edge_files = sorted(os.path.join(d, f) for d, _, fs in os.walk(args.edge, followlinks=True)
                        for f in fs if f.endswith(".yaml"))
    lint = subprocess.run(["yamllint", "-s", "-d",
                           "{extends: relaxed, rules: {line-length: {max: 120}}}"] + edge_files)
    if lint.returncode != 0:
        fail("yamllint")

    base = [d for p in args.base for d in load_all(p)]
    deployments = {d["metadata"]["name"]: d for d in base if d.get("kind") == "Deployment"}
    services = {d["metadata"]["name"]: d for d in base if d.get("kind") == "Service"}
    flags = {"weft-scheduler": known_flags(args.scheduler), "weft-worker": known_flags(args.worker),
             "weft": known_flags(args.cli)}
    for b, f in flags.items():
        if len(f) < 5:
            fail("cannot read the flags of %s" % b)

    secrets_made = set()
    patched = copy.deepcopy(deployments)
    for component in ("tls", "auth"):
        kdir = os.path.join(args.edge, component)
        k = load_all(os.path.join(kdir, "kustomization.yaml"))[0]
        if k.get("kind") != "Component":
            fail("%s is not a kustomize Component" % component)
        for res in k.get("resources", []):
            for d in load_all(os.path.join(kdir, res)):
                if d.get("kind") == "Certificate":
                    secrets_made.add(d["spec"]["secretName"])
        for patch in k.get("patches", []):
            target = patch["target"]["name"]
            if target not in patched:
                fail("%s: patch %s targets Deployment %s, not in the base" % (component, patch["path"], target))
                continue
            for op in load_all(os.path.join(kdir, patch["path"]))[0]:
                try:
                    apply_op(patched[target], op)
                except (KeyError, ValueError, IndexError) as e:
                    fail("%s/%s: %s" % (component, patch["path"], e))
    n = sum(check_container_flags(d, flags) for d in patched.values())
    print("%d flags checked in the patched Deployments" % n)
    tls_mounted = {v["secret"]["secretName"] for d in patched.values()
                   for v in d["spec"]["template"]["spec"].get("volumes", [])
                   if "secret" in v and v["name"].endswith("-tls")}
    if not tls_mounted or not tls_mounted <= secrets_made:
        fail("TLS Secrets mounted %s, Certificates make %s" % (sorted(tls_mounted), sorted(secrets_made)))
    sched = patched.get("weft-scheduler-smollm2", {})
    sargs = sched.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [{}])[0].get("args", [])
    for want in ("--tls_cert", "--worker_tls_ca", "--auth_tokens_file"):
        if not any(a.startswith(want + "=") for a in sargs):
            fail("the patched scheduler lacks %s" % want)

    routes = [d for p in edge_files for d in load_all(p)
              if isinstance(d, dict) and d.get("kind") == "GRPCRoute"]
    if not routes:
        fail("no GRPCRoute")
    for r in routes:
        for rule in r["spec"]["rules"]:
            headers = [h for m in rule["matches"] for h in m.get("headers", [])]
            if not any(h["name"] == "x-weft-model" and h.get("type", "Exact") == "Exact" for h in headers):
                fail("GRPCRoute %s: a rule does not match x-weft-model" % r["metadata"]["name"])
            for b in rule["backendRefs"]:
                svc = services.get(b["name"])
                if svc is None or b["port"] not in [p["port"] for p in svc["spec"]["ports"]]:
                    fail("GRPCRoute %s: backend %s:%s is not a Service port of the base"
                         % (r["metadata"]["name"], b["name"], b["port"]))
    if FAILS:
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
