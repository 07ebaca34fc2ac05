"""Service proxies, probes and the launcher's error for deploy/launch.py (split from it:
same code). A Proxy stands for one Service port; a Probe runs one container's startup,
readiness or liveness probe the way the kubelet would."""
import http.client
import random
import socket
import subprocess
import threading


class LaunchError(Exception):
    pass


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


# --- Services -------------------------------------------------------------------------------

class Proxy:
    """One Service port: 127.0.0.1:<port> forwarding each connection to an endpoint."""

    def __init__(self, launcher, service, sport):
        self.launcher, self.service, self.sport = launcher, service, sport
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.refused = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def endpoints(self):
        spec = self.service["spec"]
        out = []
        for pod in self.launcher.pods:
            if not selects(spec.get("selector"), pod.labels):
                continue
            if not (pod.ready() or (spec.get("publishNotReadyAddresses") and pod.running())):
                continue
            port = pod.resolve_port(self.sport.get("targetPort", self.sport["port"]))
            if port is not None:
                out.append(port)
        return out

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            eps = self.endpoints()
            if not eps:
                self.refused += 1
                conn.close()
                continue
            self.connections += 1
            try:
                up = socket.create_connection(("127.0.0.1", random.choice(eps)), timeout=5)
                up.settimeout(None)
            except OSError:
                conn.close()
                continue
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.sock.close()


# --- probes ---------------------------------------------------------------------------------

def grpc_health(port, service, timeout):
    import grpc  # python3-grpcio
    with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
        check = ch.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=lambda b: b, response_deserializer=lambda b: b)
        req = b"" if not service else b"\n" + bytes([len(service)]) + service.encode()
        resp = check(req, timeout=timeout)
        return resp == b"\x08\x01"  # HealthCheckResponse{status: SERVING}


class Probe:
    def __init__(self, container, kind, spec, scale):
        self.c, self.kind, self.spec = container, kind, spec
        self.period = spec.get("periodSeconds", 10) * scale
        self.delay = spec.get("initialDelaySeconds", 0) * scale
        self.timeout = spec.get("timeoutSeconds", 1)
        self.failure_threshold = spec.get("failureThreshold", 3)
        self.success_threshold = spec.get("successThreshold", 1)
        self.fails = self.successes = 0
        self.next_due = 0.0

    def describe(self):
        s = self.spec
        if "httpGet" in s:
            return "httpGet %s port %s" % (s["httpGet"].get("path", "/"), s["httpGet"]["port"])
        if "grpc" in s:
            return "grpc port %s" % s["grpc"]["port"]
        if "tcpSocket" in s:
            return "tcpSocket port %s" % s["tcpSocket"]["port"]
        return "exec"

    def run(self):
        """True/False, recording what answered."""
        s, pod = self.spec, self.c.pod
        try:
            if "httpGet" in s:
                port = pod.resolve_port(s["httpGet"]["port"])
                path = s["httpGet"].get("path", "/")
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=self.timeout)
                conn.request("GET", path)
                status = conn.getresponse().status
                conn.close()
                self.c.launcher.http_answers.setdefault((self.c.key(), path), set()).add(status)
                return 200 <= status < 400
            if "grpc" in s:
                return grpc_health(pod.resolve_port(s["grpc"]["port"]),
                                   s["grpc"].get("service", ""), self.timeout)
            if "tcpSocket" in s:
                socket.create_connection(("127.0.0.1", pod.resolve_port(s["tcpSocket"]["port"])),
                                         timeout=self.timeout).close()
                return True
            if "exec" in s:
                argv = self.c.exec_argv(s["exec"]["command"])
                r = subprocess.run(argv, env=self.c.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   timeout=self.timeout, cwd=pod.dir)
                self.c.launcher.exec_answers.setdefault(self.c.key(), set()).add(r.returncode)
                self.last_output = r.stdout[-500:].decode(errors="replace")
                return r.returncode == 0
        except LaunchError:
            raise
        except Exception:  # refused, reset, timeout, RpcError: a failed probe
            return False
        raise LaunchError("%s: %s probe: no httpGet, grpc, tcpSocket or exec"
                          % (self.c.key(), self.kind))
