#!/usr/bin/python3
"""A development certificate authority for deploy/launch.py --dev_certificates (plays
cert-manager for an overlay run as local processes) and for tests that need certificates
made by openssl. Needs openssl on PATH."""
import os
import shutil
import subprocess


class CertError(Exception):
    """openssl failed (its output says why)."""


EKU = {"server auth": "serverAuth", "client auth": "clientAuth"}


def _openssl(*args):
    r = subprocess.run(["openssl", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        raise CertError("openssl %s: %s" % (" ".join(args), r.stdout.strip()))


class DevCA:
    """A certificate authority made with openssl in `directory` (a development CA, as
    deploy/k8s/edge/tls/dev-ca makes in a cluster): issues certificates as cert-manager
    writes them into a Secret (tls.crt, tls.key, ca.crt)."""

    def __init__(self, directory, name="weft-ca"):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.key, self.cert = os.path.join(directory, "ca.key"), os.path.join(directory, "ca.crt")
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", self.key, "-out", self.cert, "-days", "2",
                 "-subj", "/CN=" + name, "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def issue(self, out_dir, common_name, dns_names=(), ips=(), usages=("server auth",)):
        """tls.crt, tls.key and ca.crt in out_dir (created); returns out_dir."""
        os.makedirs(out_dir, exist_ok=True)
        key, csr = os.path.join(out_dir, "tls.key"), os.path.join(out_dir, "tls.csr")
        ext = os.path.join(out_dir, "ext.cnf")
        sans = ["DNS:" + d for d in dns_names] + ["IP:" + i for i in ips]
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n")
            f.write("extendedKeyUsage=%s\n" % ",".join(EKU[u] for u in usages))
            if sans:
                f.write("subjectAltName=%s\n" % ",".join(sans))
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", key, "-out", csr, "-subj", "/CN=" + common_name)
        _openssl("x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self.key,
                 "-CAcreateserial", "-days", "2", "-extfile", ext,
                 "-out", os.path.join(out_dir, "tls.crt"))
        shutil.copy(self.cert, os.path.join(out_dir, "ca.crt"))
        for p in (csr, ext):
            os.remove(p)
        return out_dir


def dev_certificates(objects, directory):
    """Issues every cert-manager Certificate of `objects` from a DevCA made in
    directory/ca: {secretName: directory of tls.crt, tls.key, ca.crt}. Server
    certificates also carry IP 127.0.0.1, where the launcher's Services listen."""
    ca = DevCA(os.path.join(directory, "ca"))
    out = {}
    for o in objects:
        if o["kind"] != "Certificate" or o["spec"].get("isCA"):
            continue
        spec = o["spec"]
        usages = [u for u in spec.get("usages", ["server auth", "client auth"]) if u in EKU]
        dns = spec.get("dnsNames", [])
        name = spec["secretName"]
        out[name] = ca.issue(os.path.join(directory, name), spec.get("commonName") or
                             (dns[0] if dns else o["metadata"]["name"]), dns,
                             ["127.0.0.1"] if "server auth" in usages else [], usages)
    return out
