#!/usr/bin/python3
"""Renders a kustomization directory of deploy/k8s without kubectl.

    deploy/k8s/render.py DIR            prints the objects as one YAML stream

Only the subset of kustomize our overlays and components use, so that CI (which has no
kubectl) checks and launches exactly what `kubectl apply -k DIR` would apply:
  resources                 files inside the directory, or directories (relative paths)
                            holding a Kustomization
  components                directories (relative paths) holding a Component
                            (kustomize.config.k8s.io/v1alpha1): its resources, components,
                            generators and patches act on everything accumulated so far
  configMapGenerator        name + files (key = file name) and literals
  generatorOptions          disableNameSuffixHash: true (required with a generator: no
                            name rewriting to emulate)
  patches                   JSON 6902 patches (a YAML list of operations, from `path` or
                            inline `patch`) with a `target`: group, version, kind, name
                            (exact), labelSelector (k=v,...); operations "add" and
                            "replace" only. A target matching nothing is not an error (as
                            in kustomize); an operation whose path does not exist is.
The order is kustomize's: resources, then each component in turn, then this directory's
generators, then its patches. Anything else (another field, a strategic-merge patch,
another operation, a regular-expression name, a set-based selector) is refused, so an
overlay cannot silently use a feature this renderer does not implement. deploy/k8s/
validate.sh checks that `kubectl kustomize` gives the same objects wherever kubectl is
installed (deploy/README.md, "What was verified").
Needs python3-yaml.
"""
import copy
import os
import re
import sys

import yaml

KUSTOMIZATION = ("kustomize.config.k8s.io/v1beta1", "Kustomization")
COMPONENT = ("kustomize.config.k8s.io/v1alpha1", "Component")
ALLOWED = {"apiVersion", "kind", "resources", "components", "configMapGenerator",
           "generatorOptions", "patches"}
PATCH_FIELDS = {"path", "patch", "target"}
TARGET_FIELDS = {"group", "version", "kind", "name", "labelSelector"}
OPS = {"add", "replace"}


class RenderError(Exception):
    pass


def _load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def _kustomization(directory, want):
    kfile = os.path.join(directory, "kustomization.yaml")
    if not os.path.exists(kfile):
        raise RenderError("%s has no kustomization.yaml" % directory)
    k = _load_docs(kfile)[0]
    have = (k.get("apiVersion"), k.get("kind"))
    if have != want:
        raise RenderError("%s: %s/%s where a %s/%s is expected (a Component goes under "
                          "components:, a Kustomization under resources:)"
                          % (kfile, have[0], have[1], want[0], want[1]))
    unknown = set(k) - ALLOWED
    if unknown:
        raise RenderError("%s: fields this renderer does not implement: %s"
                          % (kfile, ", ".join(sorted(unknown))))
    return kfile, k


def _relative_dir(kfile, directory, entry, what):
    if os.path.isabs(entry):
        raise RenderError("%s: %s %s is absolute (kustomize refuses it)" % (kfile, what, entry))
    return os.path.normpath(os.path.join(directory, entry))


# --- JSON 6902 ------------------------------------------------------------------------------

def _pointer(path):
    if not path.startswith("/"):
        raise RenderError("JSON pointer %r does not start with /" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def apply_operation(doc, op):
    """One JSON 6902 operation ("add" or "replace", RFC 6902 semantics) on `doc`, in place."""
    if set(op) - {"op", "path", "value"} or "value" not in op:
        raise RenderError("operation %r: only op, path and value are implemented" % op)
    if op.get("op") not in OPS:
        raise RenderError("operation %r is not implemented (only %s)"
                          % (op.get("op"), ", ".join(sorted(OPS))))
    parts = _pointer(op["path"])
    node = doc
    for p in parts[:-1]:
        if isinstance(node, list):
            if not re.fullmatch(r"0|[1-9][0-9]*", p) or int(p) >= len(node):
                raise RenderError("%s %s: no element %s" % (op["op"], op["path"], p))
            node = node[int(p)]
        elif isinstance(node, dict):
            if p not in node:
                raise RenderError("%s %s: missing '%s'" % (op["op"], op["path"], p))
            node = node[p]
        else:
            raise RenderError("%s %s: '%s' is not inside an object or list"
                              % (op["op"], op["path"], p))
    last, value = parts[-1], copy.deepcopy(op["value"])
    if isinstance(node, list):
        if op["op"] == "add" and last == "-":
            node.append(value)
            return
        if not re.fullmatch(r"0|[1-9][0-9]*", last):
            raise RenderError("%s %s: bad list index %s" % (op["op"], op["path"], last))
        i = int(last)
        if op["op"] == "add" and i <= len(node):
            node.insert(i, value)
        elif op["op"] == "replace" and i < len(node):
            node[i] = value
        else:
            raise RenderError("%s %s: index %d out of range" % (op["op"], op["path"], i))
    elif isinstance(node, dict):
        if op["op"] == "replace" and last not in node:
            raise RenderError("replace %s: nothing to replace" % op["path"])
        node[last] = value
    else:
        raise RenderError("%s %s: the parent is not an object or list" % (op["op"], op["path"]))


def _selector(text):
    """{key: value} of an equality-based label selector 'k=v,k2==v2'."""
    out = {}
    for term in text.split(","):
        m = re.fullmatch(r"\s*([A-Za-z0-9._/-]+)\s*==?\s*([A-Za-z0-9._-]*)\s*", term)
        if not m:
            raise RenderError("labelSelector %r: only k=v terms are implemented" % text)
        out[m.group(1)] = m.group(2)
    return out


def matches(target, obj):
    """True when `obj` is one of the objects `target` (a patch's target) selects."""
    group, _, version = obj.get("apiVersion", "").rpartition("/")
    meta = obj.get("metadata", {})
    if "group" in target and target["group"] != group:
        return False
    if "version" in target and target["version"] != version:
        return False
    if "kind" in target and target["kind"] != obj.get("kind"):
        return False
    if "name" in target and target["name"] != meta.get("name"):
        return False
    labels = meta.get("labels") or {}
    wanted = _selector(target["labelSelector"]) if "labelSelector" in target else {}
    return all(labels.get(k) == v for k, v in wanted.items())


def _patch(kfile, directory, entry, objects):
    extra = set(entry) - PATCH_FIELDS
    if extra:
        raise RenderError("%s: patch fields not implemented: %s" % (kfile, ", ".join(sorted(extra))))
    if ("path" in entry) == ("patch" in entry):
        raise RenderError("%s: a patch needs exactly one of path and patch" % kfile)
    target = entry.get("target")
    if not target:
        raise RenderError("%s: a patch without a target (a strategic-merge patch) is not "
                          "implemented" % kfile)
    extra = set(target) - TARGET_FIELDS
    if extra:
        raise RenderError("%s: patch target fields not implemented: %s"
                          % (kfile, ", ".join(sorted(extra))))
    if "name" in target and not re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", target["name"]):
        raise RenderError("%s: target name %r: only exact names are implemented (kustomize "
                          "reads it as a regular expression)" % (kfile, target["name"]))
    if "path" in entry:
        path = os.path.normpath(os.path.join(directory, entry["path"]))
        if not path.startswith(directory + os.sep):
            raise RenderError("%s: patch file %s is outside the kustomization" % (kfile, path))
        with open(path) as f:
            ops = yaml.safe_load(f)
        where = path
    else:
        ops = yaml.safe_load(entry["patch"])
        where = kfile
    if not isinstance(ops, list):
        raise RenderError("%s: not a JSON 6902 patch (a list of operations); strategic-merge "
                          "patches are not implemented" % where)
    for o in objects:
        if matches(target, o):
            for op in ops:
                try:
                    apply_operation(o, op)
                except RenderError as e:
                    raise RenderError("%s on %s/%s: %s" % (where, o.get("kind"),
                                                           o["metadata"].get("name"), e))


# --- accumulation ---------------------------------------------------------------------------

def _accumulate(directory, objects, want, seen):
    """Adds the kustomization in `directory` to `objects` (kustomize's accumulateTarget)."""
    if directory in seen:
        raise RenderError("kustomization cycle through %s" % directory)
    seen = seen | {directory}
    kfile, k = _kustomization(directory, want)
    for res in k.get("resources") or []:
        if os.path.isabs(res):
            raise RenderError("%s: resource %s is absolute (kustomize refuses it)" % (kfile, res))
        path = os.path.normpath(os.path.join(directory, res))
        if os.path.isdir(path):
            objects += _accumulate(path, [], KUSTOMIZATION, seen)
        elif os.path.isfile(path):
            if not path.startswith(directory + os.sep):
                raise RenderError("%s: resource file %s is outside the kustomization "
                                  "(kustomize refuses it)" % (kfile, res))
            objects += _load_docs(path)
        else:
            raise RenderError("%s: resource %s not found" % (kfile, res))
        _check_unique(directory, objects)
    for comp in k.get("components") or []:
        path = _relative_dir(kfile, directory, comp, "component")
        if not os.path.isdir(path):
            raise RenderError("%s: component %s is not a directory" % (kfile, comp))
        objects = _accumulate(path, objects, COMPONENT, seen)
    gens = k.get("configMapGenerator", [])
    if gens and not (k.get("generatorOptions") or {}).get("disableNameSuffixHash"):
        raise RenderError("%s: configMapGenerator needs generatorOptions.disableNameSuffixHash"
                          % kfile)
    for opt in k.get("generatorOptions") or {}:
        if opt != "disableNameSuffixHash":
            raise RenderError("%s: generatorOptions.%s is not implemented" % (kfile, opt))
    for g in gens:
        extra = set(g) - {"name", "files", "literals"}
        if extra:
            raise RenderError("%s: configMapGenerator fields not implemented: %s"
                              % (kfile, ", ".join(sorted(extra))))
        data = {}
        for f in g.get("files", []):
            key, _, rel = f.partition("=") if "=" in f else (os.path.basename(f), "", f)
            with open(os.path.join(directory, rel)) as fh:
                data[key] = fh.read()
        for lit in g.get("literals", []):
            key, _, value = lit.partition("=")
            data[key] = value
        objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": g["name"]}, "data": data})
        _check_unique(directory, objects)
    for entry in k.get("patches") or []:
        _patch(kfile, directory, entry, objects)
    return objects


def _check_unique(directory, objects):
    names = set()
    for o in objects:
        key = (o.get("apiVersion"), o.get("kind"), o.get("metadata", {}).get("name"))
        if key in names:
            raise RenderError("%s: %s/%s defined twice" % (directory, key[1], key[2]))
        names.add(key)


def render(directory):
    """The objects of the Kustomization in `directory`, in kustomize's input order."""
    return _accumulate(os.path.abspath(directory), [], KUSTOMIZATION, frozenset())


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        objs = render(sys.argv[1])
    except RenderError as e:
        print("render: " + str(e), file=sys.stderr)
        return 1
    yaml.safe_dump_all(objs, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
