#!/usr/bin/python3
"""Renders a kustomization directory of deploy/k8s without kubectl.

    deploy/k8s/render.py DIR            prints the objects as one YAML stream

Only the subset of kustomize (v5.5's semantics) our overlays and components use, so that
CI checks and launches exactly what `kubectl apply -k DIR` would apply:
  resources            files inside the directory, or directories holding a Kustomization
  components           directories holding a Component: its whole pipeline acts on
                       everything accumulated so far
  configMapGenerator,  name, behavior (create, replace, merge), files (key = file name, or
  secretGenerator      key=file), literals, type (Secret), options (disableNameSuffixHash,
                       labels, annotations); generatorOptions (the same three). A generated
                       object gets kustomize's name-hash suffix (`<name>-<10 chars>`, the
                       sha256 of its kind, name and data) at the end of the top-level
                       render, and every reference to it is renamed (pod-spec volumes, env,
                       envFrom, projected sources, imagePullSecrets of Pods, PodTemplates,
                       workloads and CronJobs, plus the nameReference entries of
                       `configurations:` files): changing the data rolls the pods.
  patches              JSON 6902 ("add" and "replace", from `path` or inline `patch`) with a
                       `target`: group, version, kind, name (exact), labelSelector; and the
                       strategic-merge `$patch: delete` (removes the targets). A target
                       matching nothing is not an error; a JSON 6902 path that does not
                       exist is.
  namespace            metadata.namespace of every namespaced object
  labels               pairs added to metadata.labels (includeSelectors/includeTemplates
                       false only)
  images               name -> newName / newTag / digest in every container and
                       initContainer list of every object
  replacements         inline or from a `path` file; and `transformers:` directories whose
                       resources are builtin ReplacementTransformer or PatchTransformer
                       configs (run after this kustomization's own transformers, in the
                       order listed). Source:
                       group/version/kind/name/namespace + fieldPath (+ options delimiter,
                       index); targets: select/reject (group, version, kind, name,
                       namespace, labelSelector, annotationSelector) + fieldPaths, options
                       delimiter, index, create. A fieldPath's parts: a key, a list index,
                       [key=value] (list items by a field), [=value] (a list's scalar
                       items), * (every list item; items without the rest of the path are
                       skipped, but a path found nowhere in a selected object is an error).
  configurations       files of nameReference entries (ConfigMap, Secret) only
Objects annotated config.kubernetes.io/local-config: "true" take part in the render (as
replacement sources) and are left out of the output, as kustomize does.
Order (kustomize >= 5.1): resources, generators, components, then this directory's
patches, namespace, labels, images and replacements, then its transformers. Our overlays
do not depend on where generators and components fall relative to each other (kustomize
<= 5.0, embedded in kubectl <= 1.30, ran components first).
Anything else (another field, a strategic-merge patch, another operation, a
regular-expression name, a set-based selector, a name reference of another kind) is
refused, so an overlay cannot silently use a feature this renderer does not implement.
deploy/k8s/validate.sh checks that `kubectl kustomize` gives the same objects wherever
kubectl is installed (deploy/README.md, "What was verified"). Needs python3-yaml.
"""
import base64
import copy
import hashlib
import json
import os
import re
import sys

import yaml

KUSTOMIZATION = ("kustomize.config.k8s.io/v1beta1", "Kustomization")
COMPONENT = ("kustomize.config.k8s.io/v1alpha1", "Component")
ALLOWED = {"apiVersion", "kind", "resources", "components", "configMapGenerator",
           "secretGenerator", "generatorOptions", "patches", "namespace", "labels", "images",
           "replacements", "transformers", "configurations"}
PATCH_FIELDS = {"path", "patch", "target"}
SELECTOR_FIELDS = {"group", "version", "kind", "name", "namespace", "labelSelector",
                   "annotationSelector"}
OPS = {"add", "replace"}
LOCAL_CONFIG = "config.kubernetes.io/local-config"
NEEDS_HASH = "internal.weft.render/needs-hash"  # ours, removed before output
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ClusterIssuer",
                  "CustomResourceDefinition", "PersistentVolume", "StorageClass",
                  "PriorityClass", "ValidatingWebhookConfiguration",
                  "MutatingWebhookConfiguration", "APIService"}


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
                          "components:, a Kustomization under resources: or transformers:)"
                          % (kfile, have[0], have[1], want[0], want[1]))
    unknown = set(k) - ALLOWED
    if unknown:
        raise RenderError("%s: fields this renderer does not implement: %s"
                          % (kfile, ", ".join(sorted(unknown))))
    return kfile, k


def _inside(kfile, directory, entry, what):
    """The path of file `entry` of a kustomization, which must stay inside it (kustomize's
    default load restrictor)."""
    if os.path.isabs(entry):
        raise RenderError("%s: %s %s is absolute (kustomize refuses it)" % (kfile, what, entry))
    path = os.path.normpath(os.path.join(directory, entry))
    if not path.startswith(directory + os.sep):
        raise RenderError("%s: %s %s is outside the kustomization (kustomize refuses it)"
                          % (kfile, what, entry))
    return path


def _relative_dir(kfile, directory, entry, what):
    if os.path.isabs(entry):
        raise RenderError("%s: %s %s is absolute (kustomize refuses it)" % (kfile, what, entry))
    path = os.path.normpath(os.path.join(directory, entry))
    if not os.path.isdir(path):
        raise RenderError("%s: %s %s is not a directory" % (kfile, what, entry))
    return path


def _meta(obj):
    return obj.setdefault("metadata", {})


def _key(obj):
    m = obj.get("metadata", {})
    return (obj.get("apiVersion"), obj.get("kind"), m.get("namespace"), m.get("name"))


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


# --- selecting objects ----------------------------------------------------------------------

def _selector(text):
    """[(key, value or None)] of a label selector: 'k=v', 'k==v' and 'k' (exists) terms."""
    out = []
    for term in text.split(","):
        m = re.fullmatch(r"\s*([A-Za-z0-9._/-]+)\s*(?:==?\s*([A-Za-z0-9._-]*)\s*)?", term)
        if not m:
            raise RenderError("selector %r: only k=v and k terms are implemented" % text)
        out.append((m.group(1), m.group(2)))
    return out


def _selector_matches(text, labels):
    return all(k in labels and (v is None or labels[k] == v) for k, v in _selector(text))


def matches(target, obj):
    """True when `obj` is one of the objects `target` (a patch target or a replacement's
    select/reject) picks."""
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
    if "namespace" in target and target["namespace"] != meta.get("namespace"):
        return False
    if "labelSelector" in target and not _selector_matches(target["labelSelector"],
                                                           meta.get("labels") or {}):
        return False
    if "annotationSelector" in target and not _selector_matches(
            target["annotationSelector"], meta.get("annotations") or {}):
        return False
    return True


def _check_selector(where, sel):
    extra = set(sel) - SELECTOR_FIELDS
    if extra:
        raise RenderError("%s: selector fields not implemented: %s" % (where, sorted(extra)))
    if "name" in sel and not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?",
                                          str(sel["name"])):
        raise RenderError("%s: name %r: only exact names are implemented (kustomize reads it "
                          "as a regular expression)" % (where, sel["name"]))
    for k in ("labelSelector", "annotationSelector"):
        if k in sel:
            _selector(sel[k])


# --- patches --------------------------------------------------------------------------------

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
    _check_selector(kfile + " patch target", target)
    if "path" in entry:
        where = _inside(kfile, directory, entry["path"], "patch file")
        with open(where) as f:
            body = yaml.safe_load(f)
    else:
        where, body = kfile, yaml.safe_load(entry["patch"])
    if isinstance(body, dict):
        rest = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata")}
        if rest != {"$patch": "delete"} or not body.get("kind") or \
                not (body.get("metadata") or {}).get("name"):
            raise RenderError("%s: strategic-merge patches are not implemented (only "
                              "'$patch: delete', with apiVersion, kind and metadata.name)"
                              % where)
        objects[:] = [o for o in objects if not matches(target, o)]
        return
    if not isinstance(body, list):
        raise RenderError("%s: not a JSON 6902 patch (a list of operations)" % where)
    for o in objects:
        if matches(target, o):
            for op in body:
                try:
                    apply_operation(o, op)
                except RenderError as e:
                    raise RenderError("%s on %s/%s: %s" % (where, o.get("kind"),
                                                           o["metadata"].get("name"), e))


# --- generators -----------------------------------------------------------------------------

def _generated(kfile, directory, gen, kind, global_opts):
    allowed = {"name", "behavior", "files", "literals", "options"}
    extra = set(gen) - (allowed | ({"type"} if kind == "Secret" else set()))
    if extra:
        raise RenderError("%s: %s generator fields not implemented: %s"
                          % (kfile, kind, ", ".join(sorted(extra))))
    data = {}
    for f in gen.get("files", []):
        key, _, rel = f.partition("=") if "=" in f else (os.path.basename(f), "", f)
        with open(_inside(kfile, directory, rel, "generator file")) as fh:
            data[key] = fh.read()
    for lit in gen.get("literals", []):
        key, sep, value = lit.partition("=")
        if not sep:
            raise RenderError("%s: literal %r is not key=value" % (kfile, lit))
        data[key] = value
    opts = dict(global_opts)
    opts.update(gen.get("options") or {})
    extra = set(opts) - {"disableNameSuffixHash", "labels", "annotations"}
    if extra:
        raise RenderError("%s: generator options not implemented: %s" % (kfile, sorted(extra)))
    meta = {"name": gen["name"]}
    if opts.get("labels"):
        meta["labels"] = dict(opts["labels"])
    annotations = dict(opts.get("annotations") or {})
    if not opts.get("disableNameSuffixHash"):
        annotations[NEEDS_HASH] = "true"
    if annotations:
        meta["annotations"] = annotations
    obj = {"apiVersion": "v1", "kind": kind, "metadata": meta}
    if kind == "Secret":
        obj["type"] = gen.get("type", "Opaque")
        obj["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    else:
        obj["data"] = data
    return obj


def _generate(kfile, directory, k, objects):
    global_opts = k.get("generatorOptions") or {}
    for kind, field in (("ConfigMap", "configMapGenerator"), ("Secret", "secretGenerator")):
        for gen in k.get(field) or []:
            new = _generated(kfile, directory, gen, kind, global_opts)
            behavior = gen.get("behavior", "create")
            same = [i for i, o in enumerate(objects) if o.get("kind") == kind and
                    o.get("metadata", {}).get("name") == gen["name"]]
            if behavior == "create":
                if same:
                    raise RenderError("%s: %s %s exists already (behavior: create)"
                                      % (kfile, kind, gen["name"]))
                objects.append(new)
            elif behavior in ("replace", "merge"):
                if len(same) != 1:
                    raise RenderError("%s: behavior %s needs one %s %s to act on, found %d"
                                      % (kfile, behavior, kind, gen["name"], len(same)))
                old = objects[same[0]]
                if behavior == "merge":
                    merged = copy.deepcopy(old)
                    merged.setdefault("data", {}).update(new["data"])
                    for f in ("labels", "annotations"):
                        if new["metadata"].get(f):
                            _meta(merged).setdefault(f, {}).update(new["metadata"][f])
                    new = merged
                objects[same[0]] = new
            else:
                raise RenderError("%s: generator behavior %r is not implemented" % (kfile, behavior))
            _check_unique(directory, objects)


# --- names with a hash of the data, and references to them ---------------------------------

def _go_json(value):
    """Go's json.Marshal of `value` (sorted keys, HTML characters escaped)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for c, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                   ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(c, esc)
    return text


def name_hash(obj):
    """kustomize's name suffix of a ConfigMap or Secret (api/hasher: the sha256 of the JSON
    of its kind and data (and a Secret's type), 10 hex digits with 0, 1, 3, a, e spelled
    g, h, k, m, t). Its "name" is always "": kustomize looks the name up with
    yaml.Lookup("metadata/name"), one field of that literal name, which no object has."""
    m = {"kind": obj["kind"], "name": "", "data": obj.get("data", "")}
    if obj["kind"] == "Secret":
        m["type"] = obj.get("type", "")
        if isinstance(obj.get("stringData"), dict):
            m["stringData"] = obj["stringData"]
    elif isinstance(obj.get("binaryData"), dict):
        m["binaryData"] = obj["binaryData"]
    digest = hashlib.sha256(_go_json(m).encode()).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


POD_SPEC_AT = {"Pod": "spec", "PodTemplate": "template/spec",
               "Deployment": "spec/template/spec", "ReplicaSet": "spec/template/spec",
               "DaemonSet": "spec/template/spec", "StatefulSet": "spec/template/spec",
               "Job": "spec/template/spec", "CronJob": "spec/jobTemplate/spec/template/spec"}
REFERENCES = {
    "ConfigMap": ["volumes/configMap/name", "containers/env/valueFrom/configMapKeyRef/name",
                  "initContainers/env/valueFrom/configMapKeyRef/name",
                  "containers/envFrom/configMapRef/name", "initContainers/envFrom/configMapRef/name",
                  "volumes/projected/sources/configMap/name"],
    "Secret": ["volumes/secret/secretName", "containers/env/valueFrom/secretKeyRef/name",
               "initContainers/env/valueFrom/secretKeyRef/name",
               "containers/envFrom/secretRef/name", "initContainers/envFrom/secretRef/name",
               "imagePullSecrets/name", "volumes/projected/sources/secret/name"],
}


def default_name_references():
    """[(referenced kind, {group, kind}, path)]: kustomize's pod-spec name references."""
    return [(ref, {"kind": kind}, "%s/%s" % (at, path))
            for ref, paths in REFERENCES.items() for kind, at in POD_SPEC_AT.items()
            for path in paths]


def _configurations(kfile, directory, k, state):
    for entry in k.get("configurations") or []:
        docs = _load_docs(_inside(kfile, directory, entry, "configurations file"))
        for doc in docs:
            if set(doc) - {"nameReference"}:
                raise RenderError("%s: configurations other than nameReference are not "
                                  "implemented" % entry)
            for ref in doc["nameReference"]:
                if ref.get("kind") not in REFERENCES:
                    raise RenderError("%s: nameReference to %s is not implemented"
                                      % (entry, ref.get("kind")))
                for spec in ref.get("fieldSpecs", []):
                    if set(spec) - {"group", "version", "kind", "path"}:
                        raise RenderError("%s: fieldSpec %r" % (entry, spec))
                    sel = {f: spec[f] for f in ("group", "version", "kind") if f in spec}
                    state["references"].append((ref["kind"], sel, spec["path"]))


def _rename_at(node, parts, old, new):
    if not parts:
        return
    if isinstance(node, list):
        for item in node:
            _rename_at(item, parts, old, new)
        return
    if not isinstance(node, dict) or parts[0] not in node:
        return
    if len(parts) == 1:
        if node[parts[0]] == old:
            node[parts[0]] = new
        return
    _rename_at(node[parts[0]], parts[1:], old, new)


def _add_hashes(objects, references):
    """Suffixes every generated ConfigMap/Secret's name with its hash and renames the
    references to it (in objects of its namespace)."""
    for o in objects:
        ann = o.get("metadata", {}).get("annotations") or {}
        if ann.pop(NEEDS_HASH, None) is None:
            continue
        if not ann:
            del o["metadata"]["annotations"]
        old = o["metadata"]["name"]
        new = "%s-%s" % (old, name_hash(o))
        o["metadata"]["name"] = new
        for user in objects:
            if user.get("metadata", {}).get("namespace") != o["metadata"].get("namespace"):
                continue
            for kind, sel, path in references:
                if kind == o["kind"] and matches(sel, user):
                    _rename_at(user, path.split("/"), old, new)


# --- namespace, labels, images --------------------------------------------------------------

def _namespace(objects, namespace):
    for o in objects:
        if o.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
            raise RenderError("namespace: %s subjects are not implemented" % o["kind"])
        if o.get("kind") not in CLUSTER_SCOPED:
            _meta(o)["namespace"] = namespace


def _labels(kfile, entries, objects):
    for e in entries:
        if set(e) - {"pairs", "includeSelectors", "includeTemplates"} or \
                e.get("includeSelectors") or e.get("includeTemplates"):
            raise RenderError("%s: labels: only pairs (without selectors or templates) are "
                              "implemented" % kfile)
        for o in objects:
            _meta(o).setdefault("labels", {}).update(e.get("pairs") or {})


def _split_image(image):
    """(name, tag or None, digest or None) of an image reference."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = None
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    return name, tag, digest or None


def _images(kfile, entries, objects):
    for e in entries:
        if set(e) - {"name", "newName", "newTag", "digest"}:
            raise RenderError("%s: images fields not implemented: %s" % (kfile, sorted(e)))

    def fix(container):
        if not isinstance(container, dict) or "image" not in container:
            return
        name, tag, digest = _split_image(str(container["image"]))
        for e in entries:
            if e["name"] != name:
                continue
            name = e.get("newName", name)
            if "digest" in e:
                tag, digest = None, e["digest"]
            elif "newTag" in e:
                tag, digest = str(e["newTag"]), None
            container["image"] = name + (":" + tag if tag else "") + ("@" + digest if digest else "")
            return

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("containers", "initContainers") and isinstance(v, list):
                    for c in v:
                        fix(c)
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(objects)


# --- replacements ---------------------------------------------------------------------------

def _path_parts(path):
    """A fieldPath split at the dots outside [...]."""
    parts, cur, depth = [], "", 0
    for ch in path:
        if ch == "." and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    parts.append(cur)
    if any(p == "" for p in parts):
        raise RenderError("fieldPath %r has an empty part" % path)
    return parts


def _slots(node, parts, create=False):
    """[(container, key)] of the fields `parts` names under `node` (see the module doc)."""
    if not parts:
        return []
    p, rest = parts[0], parts[1:]
    children = []  # (container, key)
    if p == "*":
        if isinstance(node, list):
            children = [(node, i) for i in range(len(node))]
    elif p.startswith("[") and p.endswith("]"):
        k, eq, v = p[1:-1].partition("=")
        if not eq:
            raise RenderError("fieldPath part %r is not [key=value] or [=value]" % p)
        if isinstance(node, list):
            if k:
                children = [(node, i) for i, item in enumerate(node)
                            if isinstance(item, dict) and str(item.get(k)) == v]
            else:
                children = [(node, i) for i, item in enumerate(node)
                            if not isinstance(item, (dict, list)) and str(item) == v]
    elif isinstance(node, list):
        if re.fullmatch(r"[0-9]+", p) and int(p) < len(node):
            children = [(node, int(p))]
    elif isinstance(node, dict):
        if p not in node and create:
            node[p] = {} if rest else None
        if p in node:
            children = [(node, p)]
    if not rest:
        return children
    out = []
    for container, key in children:
        out += _slots(container[key], rest, create and p != "*")
    return out


def _replacement_value(where, source, objects):
    # kustomize's source is an object id (no label or annotation selectors).
    extra = set(source) - {"group", "version", "kind", "name", "namespace", "fieldPath",
                           "options"}
    if extra:
        raise RenderError("%s: replacement source fields not implemented: %s"
                          % (where, sorted(extra)))
    sel = {k: v for k, v in source.items() if k in SELECTOR_FIELDS}
    _check_selector(where + " source", sel)
    found = [o for o in objects if matches(sel, o)]
    if len(found) != 1:
        raise RenderError("%s: the replacement source %s selects %d objects, not 1"
                          % (where, sel, len(found)))
    path = source.get("fieldPath", "metadata.name")
    slots = _slots(found[0], _path_parts(path))
    if len(slots) != 1:
        raise RenderError("%s: source fieldPath %s finds %d values" % (where, path, len(slots)))
    container, key = slots[0]
    value = copy.deepcopy(container[key])
    opts = source.get("options") or {}
    if set(opts) - {"delimiter", "index"}:
        raise RenderError("%s: source options not implemented: %s" % (where, sorted(opts)))
    if "delimiter" in opts:
        parts = str(value).split(opts["delimiter"])
        i = opts.get("index", 0)
        if not 0 <= i < len(parts):
            raise RenderError("%s: source index %d out of range" % (where, i))
        value = parts[i]
    return value


def _put(container, key, value, opts):
    if "delimiter" not in opts:
        container[key] = copy.deepcopy(value)
        return
    parts = str(container[key]).split(opts["delimiter"])
    i = opts.get("index", 0)
    if i < 0:
        parts.insert(0, str(value))
    elif i >= len(parts):
        parts.append(str(value))
    else:
        parts[i] = str(value)
    container[key] = opts["delimiter"].join(parts)


def apply_replacement(where, r, objects):
    """One kustomize replacement on `objects`, in place."""
    if set(r) - {"source", "targets"}:
        raise RenderError("%s: replacement fields not implemented: %s" % (where, sorted(r)))
    value = _replacement_value(where, r["source"], objects)
    for t in r.get("targets") or []:
        if set(t) - {"select", "reject", "fieldPaths", "options"}:
            raise RenderError("%s: replacement target fields not implemented: %s"
                              % (where, sorted(t)))
        opts = t.get("options") or {}
        if set(opts) - {"delimiter", "index", "create"}:
            raise RenderError("%s: target options not implemented: %s" % (where, sorted(opts)))
        sel = t.get("select") or {}
        _check_selector(where + " select", sel)
        for rej in t.get("reject") or []:
            _check_selector(where + " reject", rej)
        for o in objects:
            if not matches(sel, o) or any(matches(rej, o) for rej in t.get("reject") or []):
                continue
            for path in t.get("fieldPaths") or []:
                slots = _slots(o, _path_parts(path), bool(opts.get("create")))
                if not slots:
                    raise RenderError("%s: unable to find field %s in replacement target %s/%s"
                                      % (where, path, o.get("kind"),
                                         o.get("metadata", {}).get("name")))
                for container, key in slots:
                    _put(container, key, value, opts)


def _replacements(kfile, directory, entries, objects):
    for i, entry in enumerate(entries):
        if "path" in entry:
            if set(entry) != {"path"}:
                raise RenderError("%s: a replacements entry with path has nothing else" % kfile)
            docs = _load_docs(_inside(kfile, directory, entry["path"], "replacements file"))
            items = [r for d in docs for r in (d if isinstance(d, list) else [d])]
        else:
            items = [entry]
        for r in items:
            apply_replacement("%s: replacement %d" % (kfile, i), r, objects)


def _transformers(kfile, directory, k, objects, seen):
    for entry in k.get("transformers") or []:
        path = _relative_dir(kfile, directory, entry, "transformers entry (a directory)")
        for cfg in _accumulate(path, [], KUSTOMIZATION, seen, {"references": []}):
            kind = (cfg.get("apiVersion"), cfg.get("kind"))
            name = cfg.get("metadata", {}).get("name")
            if kind == ("builtin", "ReplacementTransformer"):
                if set(cfg) - {"apiVersion", "kind", "metadata", "replacements"}:
                    raise RenderError("%s: ReplacementTransformer fields: %s" % (path, sorted(cfg)))
                for i, r in enumerate(cfg.get("replacements") or []):
                    apply_replacement("%s: %s replacement %d" % (path, name, i), r, objects)
            elif kind == ("builtin", "PatchTransformer"):
                if set(cfg) - {"apiVersion", "kind", "metadata", "patch", "target"}:
                    raise RenderError("%s: PatchTransformer fields: %s" % (path, sorted(cfg)))
                _patch(os.path.join(path, "kustomization.yaml"), path,
                       {"patch": cfg.get("patch", ""), "target": cfg.get("target")}, objects)
            else:
                raise RenderError("%s: transformer %s/%s is not implemented (only builtin "
                                  "ReplacementTransformer and PatchTransformer)" % ((path,) + kind))


# --- accumulation ---------------------------------------------------------------------------

def _accumulate(directory, objects, want, seen, state):
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
            objects += _accumulate(path, [], KUSTOMIZATION, seen, state)
        elif os.path.isfile(path):
            objects += _load_docs(_inside(kfile, directory, res, "resource file"))
        else:
            raise RenderError("%s: resource %s not found" % (kfile, res))
        _check_unique(directory, objects)
    _configurations(kfile, directory, k, state)
    _generate(kfile, directory, k, objects)
    for comp in k.get("components") or []:
        objects = _accumulate(_relative_dir(kfile, directory, comp, "component"), objects,
                              COMPONENT, seen, state)
    for entry in k.get("patches") or []:
        _patch(kfile, directory, entry, objects)
    if k.get("namespace"):
        _namespace(objects, k["namespace"])
    _labels(kfile, k.get("labels") or [], objects)
    _images(kfile, k.get("images") or [], objects)
    _replacements(kfile, directory, k.get("replacements") or [], objects)
    _transformers(kfile, directory, k, objects, seen)
    return objects


def _check_unique(directory, objects):
    names = set()
    for o in objects:
        key = _key(o)
        if key in names:
            raise RenderError("%s: %s/%s defined twice" % (directory, key[1], key[3]))
        names.add(key)


def render(directory):
    """The objects `kubectl kustomize DIRECTORY` gives, in kustomize's input order."""
    state = {"references": default_name_references()}
    objects = _accumulate(os.path.abspath(directory), [], KUSTOMIZATION, frozenset(), state)
    _add_hashes(objects, state["references"])
    return [o for o in objects
            if (o.get("metadata", {}).get("annotations") or {}).get(LOCAL_CONFIG) != "true"]


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
