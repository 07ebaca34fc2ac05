#!/usr/bin/python3
"""Renders a kustomization directory of deploy/k8s without kubectl.

    deploy/k8s/render.py DIR            prints the objects as one YAML stream

Only the subset of kustomize our overlays use, so that CI (which has no kubectl) checks
and launches exactly what `kubectl apply -k DIR` would apply:
  resources                 files, or directories with their own kustomization.yaml
  configMapGenerator        name + files (key = file name) and literals
  generatorOptions          disableNameSuffixHash: true (required with a generator: no
                            name rewriting to emulate)
Any other field is refused, so an overlay cannot silently use a feature this renderer
does not implement. On this machine `kubectl kustomize` gave the same objects for every
overlay (deploy/README.md, "What was verified").
Needs python3-yaml.
"""
import os
import sys

import yaml

ALLOWED = {"apiVersion", "kind", "resources", "configMapGenerator", "generatorOptions"}


class RenderError(Exception):
    pass


def _load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def render(directory, _seen=None):
    """The objects of the kustomization in `directory`, in kustomize's input order."""
    directory = os.path.abspath(directory)
    seen = _seen if _seen is not None else set()
    if directory in seen:
        raise RenderError("kustomization cycle through %s" % directory)
    seen.add(directory)
    kfile = os.path.join(directory, "kustomization.yaml")
    if not os.path.exists(kfile):
        raise RenderError("%s has no kustomization.yaml" % directory)
    k = _load_docs(kfile)[0]
    unknown = set(k) - ALLOWED
    if unknown:
        raise RenderError("%s: fields this renderer does not implement: %s"
                          % (kfile, ", ".join(sorted(unknown))))
    objects = []
    for res in k.get("resources", []):
        path = os.path.normpath(os.path.join(directory, res))
        if os.path.isdir(path):
            objects += render(path, seen)
        elif os.path.isfile(path):
            if not path.startswith(directory + os.sep):
                raise RenderError("%s: resource file %s is outside the kustomization "
                                  "(kustomize refuses it)" % (kfile, res))
            objects += _load_docs(path)
        else:
            raise RenderError("%s: resource %s not found" % (kfile, res))
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
    names = set()
    for o in objects:
        key = (o.get("apiVersion"), o.get("kind"), o.get("metadata", {}).get("name"))
        if key in names:
            raise RenderError("%s: %s/%s defined twice" % (directory, key[1], key[2]))
        names.add(key)
    return objects


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
