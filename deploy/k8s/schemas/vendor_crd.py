#!/usr/bin/python3
"""Turns a CustomResourceDefinition into the strict JSON schema deploy/k8s/validate.py uses.

    vendor_crd.py CRD.yaml VERSION SOURCE OUT.json [JSONPATH=K8S_DEFINITION ...]

Takes the openAPIV3Schema of VERSION, drops descriptions (size), makes it strict as
`kubectl apply --validate=strict` would be (an object with `properties` admits no other
field unless x-kubernetes-preserve-unknown-fields says so), maps `nullable` and
x-kubernetes-int-or-string to JSON schema, and refers metadata to Kubernetes' ObjectMeta.
Each JSONPATH (dotted, through `properties`/`items`, e.g.
spec.leaderWorkerTemplate.leaderTemplate) is replaced by a reference to a definition of
the Kubernetes version being validated against (e.g. io.k8s.api.core.v1.PodTemplateSpec),
which keeps the file small and checks embedded pod templates as strictly as a
Deployment's. SOURCE (repository@tag:path) and the licence are recorded in the output.
The schemas here were made with the commands in schemas/README.md.
"""
import json
import sys

import yaml

K8S_DEFS = "https://kubernetes.io/api/_definitions.json#/$defs/"


def strict(node):
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in ("description", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
                 "x-kubernetes-map-type", "x-kubernetes-validations"):
            continue
        if k == "properties":
            out[k] = {name: strict(sub) for name, sub in v.items()}
        else:
            out[k] = strict(v)
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    preserve = out.pop("x-kubernetes-preserve-unknown-fields", False)
    if "properties" in out and "additionalProperties" not in out and not preserve:
        out["additionalProperties"] = False
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def at(schema, dotted):
    node = schema
    for part in dotted.split("."):
        if part == "[]":
            node = node["items"]
        else:
            node = node["properties"][part]
    return node


def main():
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    crd_path, version, source, out = sys.argv[1:5]
    crd = yaml.safe_load(open(crd_path))
    v = next(x for x in crd["spec"]["versions"] if x["name"] == version)
    schema = strict(v["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {
        "$ref": K8S_DEFS + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    schema["properties"]["apiVersion"] = {"enum": ["%s/%s" % (crd["spec"]["group"], version)]}
    schema["properties"]["kind"] = {"enum": [crd["spec"]["names"]["kind"]]}
    schema["properties"].pop("status", None)
    schema["required"] = sorted(set(schema.get("required", [])) |
                                {"apiVersion", "kind", "metadata"})
    for repl in sys.argv[5:]:
        path, definition = repl.split("=", 1)
        parent_path, _, leaf = path.rpartition(".")
        parent = at(schema, parent_path) if parent_path else schema
        if leaf == "[]":
            parent["items"] = {"$ref": K8S_DEFS + definition}
        else:
            parent["properties"][leaf] = {"$ref": K8S_DEFS + definition}
    schema["$comment"] = ("%s %s, version %s: made by deploy/k8s/schemas/vendor_crd.py from %s "
                          "(Apache License 2.0); descriptions dropped, made strict. %s" %
                          (crd["spec"]["names"]["kind"], crd["spec"]["group"], version, source,
                           " ".join(sys.argv[5:])))
    with open(out, "w") as f:
        json.dump(schema, f, indent=None, sort_keys=True, separators=(",", ":"))
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
