#!/usr/bin/python3
"""Runs a deploy/k8s overlay as local processes: the manifests are what runs.

    deploy/launch.py deploy/k8s/cpu [--bin weft-scheduler=PATH ...] [--volume NAME=DIR]
                     [--secret NAME=DIR] [--dev_certificates] [--substitute OLD=NEW]
                     [--replicas NAME=N] [--state DIR]

Renders the overlay (deploy/k8s/render.py) and starts the same topology a cluster would,
each container a local process with the container's own command and args:
  * Deployments (spec.replicas pods) and LeaderWorkerSets (replicas x size pods, with the
    labels and LWS_* variables the LWS controller adds); pod names <deployment>-<i>,
    <lws>-<group>[-<index>].
  * In each pod: the initContainers one after another (exit 0 required), then the
    containers; env with fieldRef (metadata.name/namespace/labels/annotations,
    status.podIP) and Kubernetes' $(VAR) expansion ($$ escapes) in command and args.
  * command[0] is mapped by its file name (--bin NAME=PATH; python3 is this interpreter);
    a volume's mountPath at the start of an argument or after '=' becomes a local
    directory (emptyDir per pod, a PersistentVolumeClaim's shared by its pods — the claim
    must be defined in the overlay —, a ConfigMap's or Secret's keys written as files;
    /dev/shm stays the host's); --volume NAME=DIR puts an existing directory in place of
    volume NAME. A Secret the overlay does not define (made by cert-manager or kubectl in
    a cluster) is given as a directory of its keys: --secret NAME=DIR (an optional one not
    given is an empty directory, as the kubelet mounts it); --dev_certificates
    plays cert-manager: a CA made here with openssl issues each Certificate of the overlay
    (its commonName, dnsNames plus 127.0.0.1 where the Services listen, usages) into its
    secretName as tls.crt, tls.key and ca.crt.
  * Ports: each declared containerPort gets a free local port; an argument --X_port=N
    (any flag ending in "port") must name a declared containerPort of its pod and is
    rewritten to the local one.
  * Services: a TCP proxy per Service port on 127.0.0.1, forwarding to the pods its
    selector picks, ready ones only unless publishNotReadyAddresses (as kube-proxy does:
    no endpoint, the connection is refused). "NAME[.NS[.svc[.cluster.local]]]:PORT" in
    args and env becomes the proxy's address.
  * Probes as the kubelet runs them (httpGet, grpc, tcpSocket, exec): the startupProbe
    first, then liveness and readiness; a pod is ready when all its containers are. An
    exec probe runs its command as the container's (binary, paths and Services mapped the
    same way; 127.0.0.1:N or localhost:N, N a containerPort of the pod, becomes the local
    port) with the container's environment, exit 0 = success. Failures
    that would make the kubelet restart a container are recorded as events (not acted
    on). --probe_time_scale shortens periods and delays (tests), thresholds unchanged.
  * Stop: SIGTERM to every container, SIGKILL after the pod's
    terminationGracePeriodSeconds.
HorizontalPodAutoscalers, PodDisruptionBudgets, NetworkPolicies, monitors, cert-manager's
Certificates and Issuers, Gateway API objects and resource requests (GPUs included) have
no local meaning and are listed as not run.
--substitute OLD=NEW replaces a whole argument (e.g. --backend=cuda=--backend=cpu runs the
GPU overlay on CPUs), said in the output. Without --state, a temporary directory.
Linux only; needs python3-yaml, python3-grpcio for grpc probes, openssl for
--dev_certificates.
"""
import argparse
import base64
import ctypes
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "k8s"))
import render  # noqa: E402
from dev_certs import CertError, DevCA, dev_certificates  # noqa: E402,F401
from launch_services import LaunchError, Probe, Proxy  # noqa: E402

NAMESPACE = "default"
# Kinds with no process of their own (ConfigMaps, Secrets and claims become volume
# directories).
NOT_RUN_KINDS = {"HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy",
                 "ServiceMonitor", "PodMonitor", "PersistentVolumeClaim", "ConfigMap", "Secret",
                 "Certificate", "Issuer", "ClusterIssuer", "Gateway", "GRPCRoute", "HTTPRoute"}
LWS = "leaderworkerset.sigs.k8s.io/"


def log(msg):
    print("launch: " + msg, file=sys.stderr, flush=True)


# --- small helpers --------------------------------------------------------------------------

def expand(text, env):
    """Kubernetes' $(VAR) expansion: defined names are replaced, $$ is a literal $, an
    undefined reference is left as written."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i):
            j = text.find(")", i + 2)
            name = text[i + 2:j] if j > 0 else None
            if name is not None and name in env:
                out.append(env[name])
                i = j + 1
            else:
                out.append("$(")
                i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def free_port():
    """A port free now, outside the kernel's ephemeral range (which other tests' port-0
    binds draw from)."""
    for _ in range(200):
        p = random.randint(15000, 29999)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue
    raise LaunchError("no free port")


def _set_pdeathsig():
    # The child dies with the launcher's thread that forked it (a killed test leaves
    # nothing behind); that thread lives until stop().
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# --- pods and containers --------------------------------------------------------------------

class Container:
    def __init__(self, pod, spec, init):
        self.pod, self.spec, self.init = pod, spec, init
        self.name = spec["name"]
        self.launcher = pod.launcher
        self.proc = None
        self.log_path = os.path.join(pod.dir, self.name + ".log")
        self.started = False  # startupProbe passed (or none)
        self.ready = False
        self.exit_seen = False
        self.argv = self.env = None

    def key(self):
        return "%s/%s" % (self.pod.name, self.name)

    def prepare(self):
        """argv and env as the kubelet would give them, mapped to this machine."""
        L, pod, s = self.launcher, self.pod, self.spec
        env = {}
        for e in s.get("env", []) + pod.injected_env:
            if "value" in e:
                env[e["name"]] = expand(str(e["value"]), env)
            elif "valueFrom" in e and "fieldRef" in e["valueFrom"]:
                env[e["name"]] = pod.field(e["valueFrom"]["fieldRef"]["fieldPath"])
            else:
                raise LaunchError("%s: env %s: only value and fieldRef are supported"
                                  % (self.key(), e["name"]))
        if "command" not in s:
            raise LaunchError("%s has no command (the image's entrypoint is not known here)"
                              % self.key())
        argv = [expand(str(a), env) for a in s["command"] + s.get("args", [])]
        argv = [L.substitutions.get(a, a) for a in argv]
        mounts = sorted(((m["mountPath"], pod.volume_dir(m["name"]))
                         for m in s.get("volumeMounts", []) if m["mountPath"] != "/dev/shm"),
                        key=lambda m: -len(m[0]))

        local_dirs = dict(mounts)
        # One pass, longest mountPath first (a local directory may itself start like a
        # mountPath, e.g. /tmp).
        mount_re = re.compile(r"(^|[=:,])(" + "|".join(re.escape(mp) for mp, _ in mounts) +
                              r")(?=/|$|[,:])") if mounts else None

        def local(text):
            if mount_re is not None:
                text = mount_re.sub(lambda m: m.group(1) + local_dirs[m.group(2)], text)
            return L.resolve_services(text)

        argv = [local(a) for a in argv]
        env = {k: local(v) for k, v in env.items()}
        self._local = local
        argv[0] = self._binary(argv[0])
        declared = {p["containerPort"] for c in pod.spec.get("containers", [])
                    for p in c.get("ports", [])}
        for i, a in enumerate(argv):
            m = re.match(r"^(--[A-Za-z0-9_]*port)=(\d+)$", a)
            if m:
                n = int(m.group(2))
                if n not in declared:
                    raise LaunchError("%s: %s names port %d, which no container of the pod "
                                      "declares (probes and Services could not reach it)"
                                      % (self.key(), m.group(1), n))
                argv[i] = "%s=%d" % (m.group(1), pod.local_ports[n])
        base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        base.update(env)
        self.argv, self.env = argv, base

    def _binary(self, path):
        exe = os.path.basename(path)
        if exe not in self.launcher.bins:
            raise LaunchError("%s runs %s: no local binary for it (--bin %s=PATH)"
                              % (self.key(), path, exe))
        return self.launcher.bins[exe]

    def exec_argv(self, command):
        """An exec probe's command as it runs here: the binary, volume paths and Services
        mapped as for the container, and the pod's own ports (127.0.0.1:N, localhost:N)
        made the local ones. No $(VAR) expansion: the kubelet does none for probes."""
        pod = self.pod

        def own_port(m):
            n = int(m.group(2))
            if n not in pod.local_ports:
                raise LaunchError("%s: exec probe dials %s, which no container of the pod "
                                  "declares" % (self.key(), m.group(0)))
            return "127.0.0.1:%d" % pod.local_ports[n]
        argv = [re.sub(r"\b(127\.0\.0\.1|localhost):(\d+)\b", own_port, self._local(str(a)))
                for a in command]
        argv[0] = self._binary(argv[0])
        return argv

    def start(self):
        self.prepare()
        with open(self.log_path, "ab") as logf:
            logf.write(("launch: %s\n" % " ".join(self.argv)).encode())
            logf.flush()
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=logf,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=_set_pdeathsig,
                                         cwd=self.pod.dir)
        self.launcher.event("started", self.key(), " ".join(self.argv))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n=3000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""


class Pod:
    def __init__(self, launcher, name, template, owner, extra_labels=None, annotations=None,
                 injected_env=None):
        self.launcher, self.name, self.owner = launcher, name, owner
        self.spec = template["spec"]
        self.labels = dict(template.get("metadata", {}).get("labels", {}), **(extra_labels or {}))
        self.annotations = dict(template.get("metadata", {}).get("annotations", {}),
                                **(annotations or {}))
        self.injected_env = injected_env or []
        self.dir = os.path.join(launcher.state, "pods", name)
        os.makedirs(self.dir, exist_ok=True)
        self.named_ports, self.local_ports = {}, {}
        for c in self.spec.get("containers", []):
            for p in c.get("ports", []):
                self.local_ports[p["containerPort"]] = free_port()
                if "name" in p:
                    self.named_ports[p["name"]] = p["containerPort"]
        self.inits = [Container(self, c, True) for c in self.spec.get("initContainers", [])]
        self.containers = [Container(self, c, False) for c in self.spec.get("containers", [])]
        self.grace = self.spec.get("terminationGracePeriodSeconds", 30)
        self.thread = None
        self.failed = None

    def field(self, path):
        m = re.match(r"^metadata\.(labels|annotations)\['([^']+)'\]$", path)
        if m:
            src = self.labels if m.group(1) == "labels" else self.annotations
            if m.group(2) not in src:
                raise LaunchError("%s: fieldRef %s: no such %s" % (self.name, path, m.group(1)))
            return src[m.group(2)]
        simple = {"metadata.name": self.name, "metadata.namespace": NAMESPACE,
                  "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1",
                  "spec.nodeName": "localhost",
                  "spec.serviceAccountName": self.spec.get("serviceAccountName", "default")}
        if path not in simple:
            raise LaunchError("%s: fieldRef %s is not supported" % (self.name, path))
        return simple[path]

    def volume_dir(self, name):
        vol = next((v for v in self.spec.get("volumes", []) if v["name"] == name), None)
        if vol is None:
            raise LaunchError("%s mounts volume %s, which the pod does not define"
                              % (self.name, name))
        return self.launcher.volume(self, vol)

    def resolve_port(self, port):
        """Local port of a containerPort given by number or name; None if undeclared."""
        if isinstance(port, str) and not port.isdigit():
            port = self.named_ports.get(port)
            if port is None:
                return None
        return self.local_ports.get(int(port))

    def running(self):
        return bool(self.containers) and all(c.alive() for c in self.containers)

    def ready(self):
        return self.running() and all(c.ready for c in self.containers)

    def run(self):
        """The pod's life on its own thread (the children's death signal is tied to it)."""
        try:
            for c in self.inits:
                c.start()
                rc = c.proc.wait()
                self.launcher.event("init_exit", c.key(), str(rc))
                if rc != 0:
                    raise LaunchError("init container %s exited %d:\n%s"
                                      % (c.key(), rc, c.log_tail()))
            for c in self.containers:
                c.start()
            self._probe_loop()
        except Exception as e:  # reported by wait_ready / stop
            self.failed = e
            self.launcher.event("pod_failed", self.name, str(e))
        finally:
            # Outlive the children: their death signal fires when this thread ends.
            self.launcher.reaped.wait()

    def _probe_loop(self):
        L = self.launcher
        probes = {}
        for c in self.containers:
            s = c.spec
            probes[c] = {k: Probe(c, k, s[k + "Probe"], L.scale)
                         for k in ("startup", "liveness", "readiness") if k + "Probe" in s}
            if "startup" not in probes[c]:
                c.started = True
            if "readiness" not in probes[c]:
                c.ready = True
            t0 = time.time()
            for p in probes[c].values():
                p.next_due = t0 + p.delay
        while not L.stopping.is_set():
            now = time.time()
            for c, ps in probes.items():
                if not c.alive():
                    if not L.stopping.is_set() and not c.exit_seen:
                        c.exit_seen = True
                        L.event("container_exited", c.key(), str(c.proc.poll()))
                    c.ready = False
                    continue
                for kind in ("startup", "liveness", "readiness"):
                    p = ps.get(kind)
                    if p is None or now < p.next_due:
                        continue
                    if kind == "startup" and c.started:
                        continue
                    if kind != "startup" and not c.started:
                        continue
                    p.next_due = now + p.period
                    ok = p.run()
                    if ok:
                        p.fails, p.successes = 0, p.successes + 1
                    else:
                        p.fails, p.successes = p.fails + 1, 0
                    if kind == "startup":
                        if ok:
                            c.started = True
                            L.event("started_probe_ok", c.key(), p.describe())
                        elif p.fails >= p.failure_threshold:
                            L.event("startup_probe_failed", c.key(), p.describe())
                            p.fails = 0
                    elif kind == "liveness" and not ok and p.fails >= p.failure_threshold:
                        L.event("liveness_failed", c.key(), p.describe())
                        p.fails = 0
                    elif kind == "readiness":
                        if ok and p.successes >= p.success_threshold and not c.ready:
                            c.ready = True
                            L.event("ready", c.key(), p.describe())
                        elif not ok and p.fails >= p.failure_threshold and c.ready:
                            c.ready = False
                            L.event("unready", c.key(), p.describe())
            L.stopping.wait(min([0.5 * L.scale + 0.05] +
                                [max(0.01, p.next_due - time.time()) for ps in probes.values()
                                 for p in ps.values()]))


class Launcher:
    def __init__(self, objects, bins, volumes=None, substitutions=None, replicas=None,
                 state=None, probe_time_scale=1.0, secrets=None):
        self.objects = objects
        self.bins = {"python3": sys.executable}
        self.bins.update({k: os.path.abspath(v) for k, v in bins.items()})
        self.volume_overrides = dict(volumes or {})
        self.substitutions = dict(substitutions or {})
        self.replicas = dict(replicas or {})
        self.scale = probe_time_scale
        # Secrets made outside the overlay (cert-manager, kubectl create secret): NAME -> DIR.
        self.secret_dirs = dict(secrets or {})
        self.own_state = state is None
        self.state = state or tempfile.mkdtemp(prefix="weft-launch-")
        os.makedirs(self.state, exist_ok=True)
        self.stopping = threading.Event()
        self.reaped = threading.Event()
        self.volume_lock = threading.Lock()
        self.events = []
        self.events_lock = threading.Lock()
        self.http_answers = {}
        self.exec_answers = {}
        self.pods, self.proxies = [], {}
        volumes_only = {"ConfigMap", "PersistentVolumeClaim", "Secret"}
        self.not_run = sorted({"%s/%s" % (o["kind"], o["metadata"]["name"]) for o in objects
                               if o["kind"] in NOT_RUN_KINDS - volumes_only})
        self.config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
        self.secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
        self.claims = {o["metadata"]["name"] for o in objects
                       if o["kind"] == "PersistentVolumeClaim"}
        self.services = [o for o in objects if o["kind"] == "Service"]
        known = NOT_RUN_KINDS | {"Service", "Deployment", "LeaderWorkerSet"}
        for o in objects:
            if o["kind"] not in known:
                raise LaunchError("kind %s (%s) is not supported"
                                  % (o["kind"], o["metadata"]["name"]))
        unknown = set(self.replicas) - {o["metadata"]["name"] for o in objects
                                        if o["kind"] in ("Deployment", "LeaderWorkerSet")}
        if unknown:
            raise LaunchError("--replicas for unknown workloads: %s" % sorted(unknown))

    def event(self, kind, who, detail=""):
        with self.events_lock:
            self.events.append((time.time(), kind, who, detail))

    def events_of(self, kind):
        with self.events_lock:
            return [e for e in self.events if e[1] == kind]

    # -- volumes and services
    def volume(self, pod, vol):
        with self.volume_lock:  # pods prepare their containers on their own threads
            return self._volume(pod, vol)

    def _volume(self, pod, vol):
        name = vol["name"]
        if name in self.volume_overrides:
            return self.volume_overrides[name]
        if "emptyDir" in vol:
            d = os.path.join(pod.dir, "volumes", name)
        elif "configMap" in vol:
            cm_name = vol["configMap"]["name"]
            cm = self.config_maps.get(cm_name)
            if cm is None:
                raise LaunchError("%s: ConfigMap %s is not defined in the overlay"
                                  % (pod.name, cm_name))
            d = os.path.join(self.state, "configmaps", cm_name)
            if not os.path.isdir(d):
                os.makedirs(d)
                for k, v in cm.get("data", {}).items():
                    with open(os.path.join(d, k), "w") as f:
                        f.write(v)
        elif "secret" in vol:
            # The edge's TLS and token files: a Secret given as a directory (--secret, made
            # outside the overlay as in a cluster), or one in the overlay (stringData or
            # base64 data).
            sec_name = vol["secret"]["secretName"]
            if sec_name in self.secret_dirs:
                return self.secret_dirs[sec_name]
            sec = self.secrets.get(sec_name)
            if sec is None and vol["secret"].get("optional"):
                # An optional Secret that does not exist: the kubelet mounts an empty
                # directory (the edge's TLS and token slots of an overlay without them).
                d = os.path.join(pod.dir, "volumes", name)
                os.makedirs(d, exist_ok=True)
                return d
            if sec is None:
                raise LaunchError("%s: Secret %s is not in the overlay: give its files with "
                                  "--secret %s=DIR" % (pod.name, sec_name, sec_name))
            d = os.path.join(self.state, "secrets", sec_name)
            if not os.path.isdir(d):
                os.makedirs(d)
                files = {k: base64.b64decode(v) for k, v in sec.get("data", {}).items()}
                files.update({k: v.encode() for k, v in sec.get("stringData", {}).items()})
                for k, v in files.items():
                    with open(os.path.join(d, k), "wb") as f:
                        f.write(v)
        elif "persistentVolumeClaim" in vol:
            claim = vol["persistentVolumeClaim"]["claimName"]
            if claim not in self.claims:
                raise LaunchError("%s: PersistentVolumeClaim %s is not defined in the overlay"
                                  % (pod.name, claim))
            d = os.path.join(self.state, "pvcs", claim)
        else:
            raise LaunchError("%s: volume %s: only emptyDir, configMap, secret and "
                              "persistentVolumeClaim are supported" % (pod.name, name))
        os.makedirs(d, exist_ok=True)
        return d

    def resolve_services(self, text):
        for svc in self.services:
            name = svc["metadata"]["name"]
            pattern = (r"(?<![\w.-])" + re.escape(name) +
                       r"(?:\.%s(?:\.svc(?:\.cluster\.local)?)?)?:(\d+)\b" % re.escape(NAMESPACE))

            def sub(m, svc=svc, name=name):
                port = int(m.group(1))
                if (name, port) not in self.proxies:
                    raise LaunchError("%s: Service %s has no port %d" % (text, name, port))
                return "127.0.0.1:%d" % self.proxies[(name, port)].port
            text = re.sub(pattern, sub, text)
        return text

    def service_address(self, name, port):
        """'127.0.0.1:P' of Service `name`'s port (number or port name)."""
        for (svc, number), proxy in self.proxies.items():
            if svc == name and (number == port or proxy.sport.get("name") == port):
                return "127.0.0.1:%d" % proxy.port
        raise LaunchError("no Service %s port %s" % (name, port))

    # -- lifecycle
    def _pods(self):
        for o in self.objects:
            name = o["metadata"]["name"]
            if o["kind"] == "Deployment":
                n = self.replicas.get(name, o["spec"].get("replicas", 1))
                for i in range(n):
                    yield Pod(self, "%s-%d" % (name, i), o["spec"]["template"], o)
            elif o["kind"] == "LeaderWorkerSet":
                lwt = o["spec"]["leaderWorkerTemplate"]
                size = lwt.get("size", 1)
                n = self.replicas.get(name, o["spec"].get("replicas", 1))
                for g in range(n):
                    key = hashlib.sha1(("%s/%s-%d" % (NAMESPACE, name, g)).encode()).hexdigest()
                    for i in range(size):
                        tmpl = lwt.get("leaderTemplate") if i == 0 and "leaderTemplate" in lwt \
                            else lwt["workerTemplate"]
                        pod_name = "%s-%d" % (name, g) if i == 0 else "%s-%d-%d" % (name, g, i)
                        labels = {LWS + "name": name, LWS + "group-index": str(g),
                                  LWS + "worker-index": str(i), LWS + "group-key": key}
                        env = [{"name": "LWS_LEADER_ADDRESS",
                                "value": "%s-%d.%s.%s" % (name, g, name, NAMESPACE)},
                               {"name": "LWS_GROUP_SIZE", "value": str(size)},
                               {"name": "LWS_WORKER_INDEX", "value": str(i)}]
                        yield Pod(self, pod_name, tmpl, o, labels, {LWS + "size": str(size)}, env)

    def start(self):
        for svc in self.services:
            for sp in svc["spec"].get("ports", []):
                self.proxies[(svc["metadata"]["name"], sp["port"])] = Proxy(self, svc, sp)
        self.pods = list(self._pods())
        for p in self.pods:
            p.thread = threading.Thread(target=p.run, name="pod " + p.name, daemon=True)
            p.thread.start()
        return self

    def failures(self):
        out = ["pod %s: %s" % (p.name, p.failed) for p in self.pods if p.failed]
        for kind in ("startup_probe_failed", "liveness_failed", "container_exited"):
            out += ["%s: %s %s" % (kind, who, d) for _, _, who, d in self.events_of(kind)]
        return out

    def wait_ready(self, timeout):
        end = time.time() + timeout
        while time.time() < end:
            bad = self.failures()
            if bad:
                raise LaunchError("; ".join(bad) + "\n" + self.logs())
            if self.pods and all(p.ready() for p in self.pods):
                return
            time.sleep(0.1)
        waiting = [c.key() + (" (started)" if c.started else " (starting)")
                   for p in self.pods for c in p.containers if not c.ready]
        raise LaunchError("not ready after %.0f s: %s\n%s" % (timeout, waiting, self.logs()))

    def logs(self, n=2500):
        parts = []
        for p in self.pods:
            for c in p.inits + p.containers:
                parts.append("--- %s ---\n%s" % (c.key(), c.log_tail(n)))
        return "\n".join(parts)

    def stop(self):
        """SIGTERM every container at once (a deletion), SIGKILL after the grace period.
        Returns {container: exit code} (negative: killed by that signal)."""
        self.stopping.set()
        live = [(p, c) for p in self.pods for c in p.containers if c.alive()]
        for _, c in live:
            try:
                os.killpg(c.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        t0 = time.time()
        codes = {}
        for p, c in live:
            try:
                codes[c.key()] = c.proc.wait(timeout=max(0.0, t0 + p.grace - time.time()))
            except subprocess.TimeoutExpired:
                self.event("killed_after_grace", c.key(), str(p.grace))
                os.killpg(c.proc.pid, signal.SIGKILL)
                codes[c.key()] = c.proc.wait()
        for p in self.pods:
            for c in p.containers:
                if c.proc is not None and c.key() not in codes:
                    codes[c.key()] = c.proc.poll()
        self.reaped.set()
        for p in self.pods:
            if p.thread is not None:
                p.thread.join(timeout=10)
        for proxy in self.proxies.values():
            proxy.close()
        return codes

    def cleanup(self):
        if self.own_state:
            shutil.rmtree(self.state, ignore_errors=True)


# --- cert-manager, played with openssl ------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overlay")
    root = os.path.dirname(HERE)
    ap.add_argument("--bin", action="append", default=[],
                    help="NAME=PATH (default: the weft binaries in bazel-bin)")
    ap.add_argument("--volume", action="append", default=[], help="NAME=DIR")
    ap.add_argument("--secret", action="append", default=[],
                    help="NAME=DIR: Secret NAME's keys are DIR's files")
    ap.add_argument("--dev_certificates", action="store_true",
                    help="issue the overlay's Certificates from a CA made here (openssl)")
    ap.add_argument("--substitute", action="append", default=[], help="OLD=NEW (whole arguments)")
    ap.add_argument("--replicas", action="append", default=[], help="WORKLOAD=N")
    ap.add_argument("--state", default=None)
    ap.add_argument("--probe_time_scale", type=float, default=1.0)
    ap.add_argument("--ready_timeout_s", type=float, default=600)
    a = ap.parse_args()
    bins = {os.path.basename(p): os.path.join(root, "bazel-bin", p)
            for p in ("scheduler/service/weft-scheduler", "worker/service/weft-worker",
                      "tools/cli/weft")}
    bins.update(dict(b.split("=", 1) for b in a.bin))
    subs = {}
    for s in a.substitute:
        m = re.match(r"^(--[\w-]+=[^=]*)=(.*)$", s)
        if not m:
            raise SystemExit("launch: --substitute OLD=NEW, e.g. --backend=cuda=--backend=cpu")
        subs[m.group(1)] = m.group(2)
    objects = render.render(a.overlay)
    secrets = dict(s.split("=", 1) for s in a.secret)
    state = a.state or tempfile.mkdtemp(prefix="weft-launch-")
    if a.dev_certificates:
        issued = dev_certificates(objects, os.path.join(state, "dev-certificates"))
        log("dev certificates (CA %s): %s" % (os.path.join(state, "dev-certificates/ca/ca.crt"),
                                              ", ".join(sorted(issued))))
        secrets = dict(issued, **secrets)
    launcher = Launcher(objects, bins,
                        volumes=dict(v.split("=", 1) for v in a.volume), substitutions=subs,
                        replicas={k: int(v) for k, v in (r.split("=", 1) for r in a.replicas)},
                        state=state, probe_time_scale=a.probe_time_scale, secrets=secrets)
    for old, new in subs.items():
        log("substituting %s -> %s" % (old, new))
    log("not run here: " + ", ".join(launcher.not_run))
    done = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: done.set())
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    launcher.start()
    try:
        launcher.wait_ready(a.ready_timeout_s)
        for (svc, port), proxy in sorted(launcher.proxies.items()):
            log("Service %s port %d (%s): 127.0.0.1:%d" % (svc, port, proxy.sport.get("name", ""),
                                                          proxy.port))
        log("all pods ready; state in %s; Ctrl-C stops" % launcher.state)
        done.wait()
    except (LaunchError, CertError) as e:
        log(str(e))
        return 1
    finally:
        codes = launcher.stop()
        log("exit codes: " + json.dumps(codes, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
