#!/usr/bin/python3
"""deploy/render_test.py: deploy/k8s/render.py implements its subset of kustomize as
kustomize does, and refuses the rest.

* Generators: kustomize's name-hash suffix (its own hasher's test values, and one taken
  from kubectl kustomize v5.5.0), every reference renamed (pod-spec volumes, env,
  envFrom, projected sources; a CRD's through `configurations`), behavior create /
  replace / merge, local-config objects left out of the output.
* Replacements (inline and through `transformers:` directories): delimiter and index,
  [key=value], [=value], *, a wildcard that finds the path in some items only, create;
  a path found nowhere in a selected object, and a source that is not exactly one object,
  are errors.
* namespace, images (newName, newTag, digest; containers of any object), labels,
  `$patch: delete`.

* JSON 6902 "add" and "replace" as RFC 6902 defines them (append with "-", insert at an
  index, set a member; replace only what exists; a missing parent is an error).
* Components: their resources join what the including kustomization accumulated, their
  patches act on all of it (also on objects of components listed before), the
  including kustomization's own patches run last; a target may match nothing.
* Refused: other operations, strategic-merge patches, patches without a target,
  regular-expression names, set-based selectors, unknown fields, a Component under
  resources (and the reverse), absolute paths.
* Where kubectl is installed (not in CI), `kubectl kustomize` renders the fixture to the
  same objects (deploy/k8s/validate.sh does the same for every shipped overlay).
"""
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "k8s"))
import render  # noqa: E402
import testlib  # noqa: E402

DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "w", "labels": {"component": "worker", "ranks-per-pod": "2"}},
    "spec": {"selector": {"matchLabels": {"p": "w"}},
             "template": {"metadata": {"labels": {"p": "w"}},
                          "spec": {"containers": [{"name": "rank0", "image": "i", "args": ["--a"]},
                                                  {"name": "rank1", "image": "i",
                                                   "args": ["--b"]}]}}}}


class Json6902Test(unittest.TestCase):
    def apply(self, doc, *ops):
        doc = copy.deepcopy(doc)
        for op in ops:
            render.apply_operation(doc, op)
        return doc

    def test_add_appends_inserts_and_sets(self):
        d = self.apply(DEPLOYMENT,
                       {"op": "add", "path": "/spec/template/spec/containers/1/args/-", "value": "--z"},
                       {"op": "add", "path": "/spec/template/spec/containers/1/args/0", "value": "--y"},
                       {"op": "add", "path": "/spec/template/spec/containers/0/args/1", "value": "--x"},
                       {"op": "add", "path": "/metadata/labels/a~1b", "value": "1"},
                       {"op": "add", "path": "/spec/replicas", "value": 3})
        c = d["spec"]["template"]["spec"]["containers"]
        self.assertEqual(c[0]["args"], ["--a", "--x"])
        self.assertEqual(c[1]["args"], ["--y", "--b", "--z"])
        self.assertEqual(d["metadata"]["labels"]["a/b"], "1")
        self.assertEqual(d["spec"]["replicas"], 3)
        # "add" on an existing member replaces it (a readiness probe swapped by tls/).
        d = self.apply(d, {"op": "add", "path": "/spec/replicas", "value": 4})
        self.assertEqual(d["spec"]["replicas"], 4)
        self.assertEqual(DEPLOYMENT["spec"]["template"]["spec"]["containers"][1]["args"], ["--b"])

    def test_replace_only_what_exists(self):
        d = self.apply(DEPLOYMENT, {"op": "replace", "path": "/spec/template/spec/containers/0/image",
                                    "value": "j"})
        self.assertEqual(d["spec"]["template"]["spec"]["containers"][0]["image"], "j")
        for path in ("/spec/replicas", "/spec/template/spec/containers/2",
                     "/spec/template/spec/containers/0/args/1"):
            with self.assertRaises(render.RenderError, msg=path):
                self.apply(DEPLOYMENT, {"op": "replace", "path": path, "value": 1})

    def test_missing_parents_and_bad_indices_fail(self):
        for path in ("/spec/template/spec/volumes/-", "/spec/template/spec/containers/2/args/-",
                     "/spec/template/spec/containers/0/args/2", "/spec/template/spec/containers/x",
                     "/spec/template/spec/containers/01/args/-", "spec/replicas"):
            with self.assertRaises(render.RenderError, msg=path):
                self.apply(DEPLOYMENT, {"op": "add", "path": path, "value": 1})

    def test_other_operations_are_refused(self):
        for op in ({"op": "remove", "path": "/spec/replicas"},
                   {"op": "copy", "from": "/spec", "path": "/x"},
                   {"op": "test", "path": "/spec", "value": {}},
                   {"op": "add", "path": "/x"}):
            with self.assertRaises(render.RenderError, msg=op):
                self.apply(DEPLOYMENT, op)


class Fixture:
    """Kustomization directories written under a temporary directory."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="render-test-")

    def write(self, path, text):
        p = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(textwrap.dedent(text).lstrip())
        return p

    def path(self, d):
        return os.path.join(self.root, d)


KUSTOMIZATION = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
LOCAL = "  annotations: {config.kubernetes.io/local-config: \"true\"}\n"
COMPONENT = "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n"


class ComponentsTest(unittest.TestCase):
    def setUp(self):
        self.f = Fixture()
        self.f.write("base/deployment.yaml", yaml.safe_dump(DEPLOYMENT))
        self.f.write("base/kustomization.yaml", KUSTOMIZATION + "resources: [deployment.yaml]\n")
        # Component a: a ConfigMap of its own, and a patch on every worker Deployment's rank
        # containers (rank 1 only where the label says there are two), plus one whose
        # target matches nothing.
        self.f.write("a/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
                     "data: {k: v}\n")
        self.f.write("a/rank0.yaml", """
            - op: add
              path: /spec/template/spec/containers/0/args/-
              value: --from-a
            - op: add
              path: /spec/template/spec/containers/0/readinessProbe
              value: {exec: {command: [x]}}
            """)
        self.f.write("a/rank1.yaml", """
            - op: add
              path: /spec/template/spec/containers/1/args/-
              value: --from-a
            - op: add
              path: /spec/template/spec/containers/1/args/0
              value: --first
            """)
        self.f.write("a/kustomization.yaml", COMPONENT + textwrap.dedent("""
            resources: [cm.yaml]
            patches:
              - path: rank0.yaml
                target: {group: apps, version: v1, kind: Deployment, labelSelector: component=worker}
              - path: rank1.yaml
                target: {kind: Deployment, labelSelector: "component=worker,ranks-per-pod=2"}
              - path: rank1.yaml
                target: {group: leaderworkerset.x-k8s.io, kind: LeaderWorkerSet}
            """))
        # Component b patches the ConfigMap component a added (order matters).
        self.f.write("b/kustomization.yaml", COMPONENT + textwrap.dedent("""
            patches:
              - target: {version: v1, kind: ConfigMap, name: a}
                patch: |-
                  - op: replace
                    path: /data/k
                    value: from-b
            """))
        # The overlay's own patch runs after both components.
        self.f.write("overlay/kustomization.yaml", KUSTOMIZATION + textwrap.dedent("""
            resources: [../base]
            components: [../a, ../b]
            patches:
              - target: {kind: Deployment, name: w}
                patch: |-
                  - op: add
                    path: /spec/template/spec/containers/0/args/-
                    value: --from-overlay
            """))

    def tearDown(self):
        shutil.rmtree(self.f.root, ignore_errors=True)

    def test_components_and_patches_in_kustomize_order(self):
        objs = render.render(self.f.path("overlay"))
        self.assertEqual([(o["kind"], o["metadata"]["name"]) for o in objs],
                         [("Deployment", "w"), ("ConfigMap", "a")])
        c = objs[0]["spec"]["template"]["spec"]["containers"]
        self.assertEqual(c[0]["args"], ["--a", "--from-a", "--from-overlay"])
        self.assertEqual(c[1]["args"], ["--first", "--b", "--from-a"])
        self.assertEqual(c[0]["readinessProbe"], {"exec": {"command": ["x"]}})
        self.assertEqual(objs[1]["data"], {"k": "from-b"})

    def test_kubectl_kustomize_agrees(self):
        if not shutil.which("kubectl"):
            self.skipTest("no kubectl here (CI has none; deploy/k8s/validate.sh compares where "
                          "one is installed)")
        r = subprocess.run(["kubectl", "kustomize", self.f.path("overlay")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        key = lambda o: (o["kind"], o["metadata"]["name"])
        self.assertEqual(sorted((o for o in yaml.safe_load_all(r.stdout) if o), key=key),
                         sorted(render.render(self.f.path("overlay")), key=key))

    def refused(self, kustomization_text, component=False, why=""):
        """Renders bad/ (or, as a Component, an overlay using it); it must be refused."""
        self.f.write("bad/kustomization.yaml", (COMPONENT if component else KUSTOMIZATION) +
                     textwrap.dedent(kustomization_text))
        top = "bad"
        if component:
            self.f.write("bad-user/kustomization.yaml",
                         KUSTOMIZATION + "resources: [../base]\ncomponents: [../bad]\n")
            top = "bad-user"
        with self.assertRaises(render.RenderError) as e:
            render.render(self.f.path(top))
        self.assertIn(why, str(e.exception))

    def test_unsupported_kustomize_features_are_refused(self):
        self.f.write("bad/smp.yaml", "apiVersion: apps/v1\nkind: Deployment\n"
                     "metadata: {name: w}\nspec: {replicas: 2}\n")
        self.f.write("bad/remove.yaml", "- {op: remove, path: /spec/replicas}\n")
        self.refused("resources: [../base]\npatches: [{path: smp.yaml, target: {kind: Deployment}}]\n",
                     why="strategic-merge")
        self.refused("resources: [../base]\npatches: [{path: smp.yaml}]\n", why="without a target")
        self.refused("resources: [../base]\npatches: [{path: remove.yaml, target: {kind: Deployment}}]\n",
                     why="remove")
        self.refused("resources: [../base]\npatches: [{path: remove.yaml, target: {name: 'w.*'}}]\n",
                     why="exact names")
        self.refused("resources: [../base]\n"
                     "patches: [{path: remove.yaml, target: {labelSelector: 'a in (b)'}}]\n",
                     why="k=v")
        self.refused("resources: [../base]\n"
                     "patches: [{path: remove.yaml, target: {kind: Deployment}, options: {}}]\n",
                     why="options")
        self.refused("resources: [../base]\nnamePrefix: x-\n", why="namePrefix")
        self.refused("resources: [../a]\n", why="Component")
        self.refused("resources: [../base]\ncomponents: [../base]\n", why="Component")
        self.refused("resources: [%s]\n" % self.f.path("base"), why="absolute")
        self.refused("patches: [{path: remove.yaml, target: {kind: Deployment}}]\n", component=True,
                     why="remove")


def kubectl_objects(directory):
    r = subprocess.run(["kubectl", "kustomize", directory], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise AssertionError(r.stderr)
    return [o for o in yaml.safe_load_all(r.stdout) if o]


def by_key(objs):
    return sorted(objs, key=lambda o: (o["kind"], o["metadata"]["name"]))


class HashTest(unittest.TestCase):
    def test_kustomize_hasher_values(self):
        # kustomize's api/hasher/hasher_test.go, and kubectl kustomize v5.5.0's name for a
        # configMapGenerator {name: a, literals: [k=v]}: a-bdg947hgcc.
        self.assertEqual(render.name_hash({"kind": "ConfigMap", "metadata": {"name": "x"}}),
                         "6ct58987ht")
        self.assertEqual(render.name_hash({"kind": "ConfigMap", "metadata": {"name": "x"},
                                           "data": {"one": ""}}), "9g67k2htb6")
        self.assertEqual(render.name_hash({"kind": "ConfigMap", "metadata": {"name": "a"},
                                           "data": {"k": "v"}}), "bdg947hgcc")
        # Go's encoder escapes <, > and & (a script's comparisons).
        self.assertNotEqual(render.name_hash({"kind": "ConfigMap", "metadata": {"name": "a"},
                                              "data": {"k": "a<b"}}),
                            render.name_hash({"kind": "ConfigMap", "metadata": {"name": "a"},
                                              "data": {"k": "a\\u003cb"}}))


class FeaturesTest(unittest.TestCase):
    """One fixture using every feature render.py implements beyond patches and components,
    compared with kubectl kustomize where kubectl is installed."""

    def setUp(self):
        self.f = Fixture()
        self.f.write("base/app.yaml", """
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: values
              annotations: {config.kubernetes.io/local-config: "true"}
            data: {name: alpha, file: a.gguf}
            ---
            apiVersion: apps/v1
            kind: Deployment
            metadata:
              name: web-MODEL
              labels: {app: w, model: MODEL}
            spec:
              selector: {matchLabels: {app: w}}
              template:
                metadata: {labels: {app: w}}
                spec:
                  initContainers:
                    - {name: init, image: "python:3.12-slim", args: [--dest=/m/FILE]}
                  containers:
                    - name: main
                      image: weft-cpu:dev
                      args: [--model=/m/FILE, --name=MODEL, --tls=, --x]
                      env:
                        - {name: A, valueFrom: {configMapKeyRef: {name: script, key: s.py}}}
                      envFrom: [{secretRef: {name: creds}}]
                    - {name: side, image: "busybox@sha256:00", args: [--tls=]}
                    - {name: plain, image: other}
                  volumes:
                    - {name: s, configMap: {name: script}}
                    - {name: p, projected: {sources: [{configMap: {name: script}}]}}
                    - {name: keep, configMap: {name: not-generated}}
            ---
            apiVersion: v1
            kind: ConfigMap
            metadata: {name: gone}
            data: {x: y}
            ---
            apiVersion: example.com/v1
            kind: Widget
            metadata: {name: wid, labels: {app: w, model: MODEL}}
            spec:
              template:
                spec:
                  containers: [{name: c, image: "weft-cpu:dev"}]
                  volumes: [{name: s, configMap: {name: script}}]
            """)
        self.f.write("base/s.py", "print(1 < 2 & 3 > 0)\n")
        self.f.write("base/refs.yaml", """
            nameReference:
              - kind: ConfigMap
                version: v1
                fieldSpecs:
                  - {group: example.com, kind: Widget, path: spec/template/spec/volumes/configMap/name}
            """)
        self.f.write("base/kustomization.yaml", KUSTOMIZATION + textwrap.dedent("""
            resources: [app.yaml]
            configMapGenerator:
              - name: script
                files: [s.py]
              - name: fixed
                literals: [k=v]
                options: {disableNameSuffixHash: true, labels: {l: "1"}}
            secretGenerator:
              - name: creds
                literals: [user=u, pass=p]
            configurations: [refs.yaml]
            """))
        self.f.write("model/r.yaml", """
            apiVersion: builtin
            kind: ReplacementTransformer
            metadata: {name: r}
            replacements:
              - source: {kind: ConfigMap, name: values, fieldPath: data.name}
                targets:
                  - select: {labelSelector: "app=w,model"}
                    fieldPaths: [metadata.labels.model]
                  - select: {kind: Deployment}
                    fieldPaths: [metadata.name]
                    options: {delimiter: "-", index: 1}
                  - select: {kind: Deployment}
                    fieldPaths: ["spec.template.spec.containers.[name=main].args.[=--name=MODEL]"]
                    options: {delimiter: "=", index: 1}
                  - select: {kind: Widget}
                    fieldPaths: [spec.owner]
                    options: {create: true}
              - source: {kind: ConfigMap, name: values, fieldPath: data.file}
                targets:
                  - select: {kind: Deployment}
                    reject: [{kind: Widget}]
                    fieldPaths: ["spec.template.spec.initContainers.*.args.[=--dest=/m/FILE]",
                                 "spec.template.spec.containers.*.args.[=--model=/m/FILE]"]
                    options: {delimiter: "/", index: 2}
            """)
        self.f.write("model/kustomization.yaml", KUSTOMIZATION + "resources: [r.yaml]\n")
        self.f.write("over/kustomization.yaml", KUSTOMIZATION + textwrap.dedent("""
            resources: [../base]
            namespace: ml
            labels:
              - pairs: {release: prom}
            images:
              - {name: weft-cpu, newName: reg.example/weft-cpu, newTag: "1.2"}
              - {name: busybox, digest: "sha256:11"}
              - {name: python, newName: reg.example/python}
            configMapGenerator:
              - name: values
                behavior: replace
                literals: [name=beta, file=b.gguf]
                options: {disableNameSuffixHash: true,
                          annotations: {config.kubernetes.io/local-config: "true"}}
              - name: fixed
                behavior: merge
                literals: [k2=v2]
                options: {disableNameSuffixHash: true}
            replacements:
              - source: {kind: ConfigMap, name: fixed, fieldPath: data.k2}
                targets:
                  - select: {kind: Deployment}
                    fieldPaths: ["spec.template.spec.containers.*.args.[=--tls=]"]
                    options: {delimiter: "=", index: 1}
            patches:
              - target: {kind: ConfigMap, name: gone}
                patch: |-
                  apiVersion: v1
                  kind: ConfigMap
                  metadata: {name: gone}
                  $patch: delete
            transformers: [../model]
            """))

    def tearDown(self):
        shutil.rmtree(self.f.root, ignore_errors=True)

    def test_features(self):
        objs = render.render(self.f.path("over"))
        kinds = {(o["kind"], o["metadata"]["name"]): o for o in objs}
        self.assertNotIn(("ConfigMap", "values"), kinds, "local-config objects are dropped")
        self.assertNotIn(("ConfigMap", "gone"), kinds, "$patch: delete")
        script = next(n for k, n in kinds if k == "ConfigMap" and n.startswith("script-"))
        creds = next(n for k, n in kinds if k == "Secret" and n.startswith("creds-"))
        self.assertRegex(script, r"^script-[a-z0-9]{10}$")
        self.assertEqual(kinds[("ConfigMap", "fixed")]["data"], {"k": "v", "k2": "v2"})
        self.assertEqual(kinds[("Secret", creds)]["data"], {"user": "dQ==", "pass": "cA=="})
        d = kinds[("Deployment", "web-beta")]
        self.assertEqual(d["metadata"]["labels"], {"app": "w", "model": "beta", "release": "prom"})
        self.assertEqual({o["metadata"].get("namespace") for o in objs}, {"ml"})
        spec = d["spec"]["template"]["spec"]
        main, side, plain = spec["containers"]
        self.assertEqual(main["args"], ["--model=/m/b.gguf", "--name=beta", "--tls=v2", "--x"])
        self.assertEqual(side["args"], ["--tls=v2"])
        self.assertEqual(spec["initContainers"][0]["args"], ["--dest=/m/b.gguf"])
        self.assertEqual(main["image"], "reg.example/weft-cpu:1.2")
        self.assertEqual(side["image"], "busybox@sha256:11")
        self.assertEqual(plain["image"], "other")
        self.assertEqual(spec["initContainers"][0]["image"], "reg.example/python:3.12-slim")
        self.assertEqual(main["env"][0]["valueFrom"]["configMapKeyRef"]["name"], script)
        self.assertEqual(main["envFrom"][0]["secretRef"]["name"], creds)
        self.assertEqual([v.get("configMap", {}).get("name") for v in spec["volumes"]],
                         [script, None, "not-generated"])
        self.assertEqual(spec["volumes"][1]["projected"]["sources"][0]["configMap"]["name"], script)
        w = kinds[("Widget", "wid")]
        self.assertEqual(w["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"], script)
        self.assertEqual(w["spec"]["template"]["spec"]["containers"][0]["image"],
                         "reg.example/weft-cpu:1.2")
        self.assertEqual(w["spec"]["owner"], "beta")
        self.assertEqual(w["metadata"]["labels"]["model"], "beta")
        # The data changes, the names change (and the references with them).
        self.f.write("base/s.py", "print(2)\n")
        again = render.render(self.f.path("over"))
        self.assertNotIn(("ConfigMap", script), {(o["kind"], o["metadata"]["name"]) for o in again})
        if shutil.which("kubectl"):
            self.assertEqual(by_key(kubectl_objects(self.f.path("over"))), by_key(again))

    def test_kubectl_kustomize_agrees(self):
        if not shutil.which("kubectl"):
            self.skipTest("no kubectl here (deploy/k8s/validate.sh compares where one is)")
        self.assertEqual(by_key(kubectl_objects(self.f.path("over"))),
                         by_key(render.render(self.f.path("over"))))

    def replaced(self, targets, source="{kind: ConfigMap, name: values, fieldPath: data.name}"):
        self.f.write("bad/kustomization.yaml", KUSTOMIZATION + "resources: [../base]\n"
                     "replacements:\n  - source: %s\n    targets: %s\n" % (source, targets))
        return render.render(self.f.path("bad"))

    def test_replacement_errors(self):
        for targets, why in (
                # A path found nowhere in a selected object.
                ("[{select: {kind: Deployment}, fieldPaths: [spec.nothing]}]", "unable to find"),
                ("[{select: {kind: Deployment}, fieldPaths: "
                 "['spec.template.spec.containers.*.args.[=--absent]']}]", "unable to find"),
                ("[{select: {kind: Deployment}, fieldPaths: "
                 "['spec.template.spec.containers.[name=zz].args']}]", "unable to find")):
            with self.assertRaises(render.RenderError, msg=targets) as e:
                self.replaced(targets)
            self.assertIn(why, str(e.exception))
        with self.assertRaises(render.RenderError) as e:  # two sources
            self.replaced("[]", source="{kind: ConfigMap, fieldPath: data.name}")
        self.assertIn("selects", str(e.exception))
        # A select matching no object is not an error.
        self.replaced("[{select: {kind: Nothing}, fieldPaths: [spec.x]}]")

    def test_refused(self):
        for text, why in (("transformers: [../base]\n", "ReplacementTransformer"),
                          ("resources: [../base]\nconfigMapGenerator: [{name: values}]\n",
                           "exists already"),
                          ("resources: [../base]\nconfigMapGenerator: "
                           "[{name: new, behavior: merge}]\n", "to act on"),
                          ("resources: [../base]\nlabels: [{pairs: {a: b}, includeSelectors: "
                           "true}]\n", "labels"),
                          ("resources: [../base]\nimages: [{name: a, newImage: b}]\n", "images")):
            self.f.write("bad2/kustomization.yaml", KUSTOMIZATION + text)
            with self.assertRaises(render.RenderError, msg=text) as e:
                render.render(self.f.path("bad2"))
            self.assertIn(why, str(e.exception))


if __name__ == "__main__":
    testlib.main()
