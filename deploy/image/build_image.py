#!/usr/bin/python3
"""Builds Weft's container images without a Docker daemon.

    deploy/image/build_image.py [--out DIR] [--images cpu,gpu] [--write-dockerfiles]
                                [--context-only] [--no-build] [--no-cache]

Images (OCI image layout in DIR/oci, one tag per image; `skopeo copy oci:DIR/oci:cpu
docker://REGISTRY/weft-cpu:TAG` pushes one):
  cpu  weft-scheduler, weft-worker (default build), weft (CLI)
  gpu  weft-scheduler, weft-worker (--config=cuda: CUDA backend, also runs --backend=cpu),
       weft, and the CUDA libraries that worker links (cudart, cuBLAS, cuBLASLt, NCCL),
       copied from this machine's CUDA installation with their licence files.

How an image is made:
  1. The binaries are built with Bazel and copied out (dereferenced).
  2. The runtime packages are derived from the binaries, never listed by hand: every
     library `ldd` resolves is mapped to its Debian package with `dpkg -S`; a library no
     package owns must sit under the CUDA installation (it is copied, licences with it),
     else the build fails. Each is pinned to the version deploy/image/packages.lock names
     (--update-lock writes it from the mirror's current versions; the build fails when
     the derived packages and the lock differ).
  3. A Debian root filesystem: `debootstrap --variant=minbase` from the mirror apt already
     uses here (read from /etc/apt/sources.list*), then `apt-get install` of exactly the
     pinned packages inside it; documentation (but not copyright files), apt lists and
     caches removed; what an install writes differently each time (caches, logs, dates in
     /etc/shadow, the build host's name) normalized; a non-root user weft (65532:65532).
     Cached per package set in $WEFT_CACHE_DIR/image (default ~/.cache/weft/image) for a
     week (--no-cache: made afresh).
  4. Layers: that base, then the binaries (and CUDA libraries); every file's time clamped
     to SOURCE_DATE_EPOCH (the environment's, else the last commit's time), written with
     umoci with that time as the image's and history's creation time, the config set
     (user 65532, entrypoint weft-scheduler, env, the labels
     org.opencontainers.image.version and .revision from the binaries' own --version),
     checked with skopeo. The same package
     set and binaries give the same image digest (./test.sh --full builds twice).
  5. An SPDX 2.3 SBOM beside each image (DIR/sbom-<image>.spdx.json): every Debian
     package in the image (from its dpkg database: name, version, architecture, source
     package, purl), the Weft binaries and CUDA libraries (sha256), and what contains what.
  6. deploy/image/Dockerfile.{cpu,gpu} are generated from the same pinned package lists:
     the build fails if the committed ones differ (--write-dockerfiles rewrites them).
     Their build context is made by --context-only (binaries, CUDA libraries, licences).

Needs root (debootstrap, chroot), debootstrap, umoci, skopeo, and network access to the
Debian mirror. Writes DIR/report.json (packages, digests, sizes, durations). A pinned
version the mirror no longer has (a security update replaced it) fails the build: run
--update-lock --context-only, rerun the image test, and commit the lock and Dockerfiles.
"""
import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "deploy", "image")
sys.path.insert(0, HERE)
import sbom  # noqa: E402
UID = 65532
CACHE = os.path.join(os.environ.get("WEFT_CACHE_DIR", os.path.expanduser("~/.cache/weft")), "image")
BASE_MAX_AGE_S = 7 * 24 * 3600
BAZEL = os.environ.get("WEFT_BAZEL", "bazel").split()  # ./test.sh passes its startup flags

# What each image holds: (path in the image, bazel config, label).
BINARIES = {
    "cpu": [("/usr/local/bin/weft-scheduler", None, "//scheduler/service:weft-scheduler"),
            ("/usr/local/bin/weft-worker", None, "//worker/service:weft-worker"),
            ("/usr/local/bin/weft", None, "//tools/cli:weft")],
    "gpu": [("/usr/local/bin/weft-scheduler", None, "//scheduler/service:weft-scheduler"),
            ("/usr/local/bin/weft-worker", "cuda", "//worker/service:weft-worker"),
            ("/usr/local/bin/weft", None, "//tools/cli:weft")],
}
ENV = {
    "cpu": ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/weft"],
    "gpu": ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/weft",
            # Read by the NVIDIA container toolkit (it mounts the driver's libcuda).
            "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"],
}


def log(*a):
    print("build_image:", *a, file=sys.stderr, flush=True)


def run(cmd, **kw):
    kw.setdefault("check", True)
    return subprocess.run(cmd, **kw)


def out(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, **kw).stdout


# --- binaries -----------------------------------------------------------------------------

def binaries_from(images, previous):
    """Each image's binaries as a previous build (its --out) staged them."""
    return {img: [(path, os.path.join(previous, "context-" + img, "payload", path.lstrip("/")))
                  for path, _, _ in BINARIES[img]] for img in images}


def build_binaries(images, stage, no_build):
    """Builds (unless no_build) and copies each image's binaries to stage/<image>/."""
    by_config = {}
    for img in images:
        for path, config, label in BINARIES[img]:
            by_config.setdefault(config, set()).add(label)
    copied = {}
    # One config at a time, copied out at once: before the CUDA build had its own output
    # tree, --config=cuda overwrote the default build's bazel-bin.
    for config in sorted(by_config, key=lambda c: c or ""):
        flags = ["--config=" + config] if config else []
        labels = sorted(by_config[config])
        if not no_build:
            log("bazel build", *flags, *labels)
            run([*BAZEL, "build", *flags, *labels], cwd=ROOT)
        bin_dir = out([*BAZEL, "info", *flags, "bazel-bin"], cwd=ROOT,
                      stderr=subprocess.DEVNULL).strip()
        for label in labels:
            src = os.path.join(bin_dir, label[2:].replace(":", "/"))
            dst = os.path.join(stage, "bin-" + (config or "default"), os.path.basename(src))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.realpath(src), dst)
            copied[(config, label)] = dst
    return {img: [(path, copied[(config, label)]) for path, config, label in BINARIES[img]]
            for img in images}


# --- runtime dependencies -----------------------------------------------------------------

def ldd(binary):
    """Resolved library paths of `binary` (host), failing on any 'not found'."""
    text = out(["ldd", binary])
    libs = []
    for line in text.splitlines():
        line = line.strip()
        if "not found" in line:
            raise SystemExit("build_image: %s: %s" % (binary, line))
        m = re.match(r"\S+ => (/\S+) \(", line) or re.match(r"(/\S+) \(", line)
        if m:
            libs.append(m.group(1))
    return libs


def aliases(path):
    """`path` and its merged-/usr twins (/lib/x -> /usr/lib/x and back), real path too."""
    out = []
    for p in (path, os.path.realpath(path)):
        for q in (p, p[4:] if p.startswith("/usr/") else "/usr" + p):
            if q not in out:
                out.append(q)
    return out


def dpkg_owners(paths):
    """{path: Debian package} for the paths dpkg knows (one dpkg -S call for all)."""
    r = subprocess.run(["dpkg", "-S", *paths], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    owners = {}
    for line in r.stdout.splitlines():
        if line.startswith("diversion ") or ": " not in line:
            continue
        pkgs, path = line.split(": ", 1)
        if "," in pkgs:
            continue  # a directory shared by several packages, never a library
        owners[path.strip()] = pkgs.split(":", 1)[0].strip()
    return owners


def cuda_root_of(path):
    """The CUDA installation directory holding library `path`, or None."""
    real = os.path.realpath(path)
    for d in (os.path.dirname(os.path.dirname(real)), os.path.dirname(os.path.dirname(path))):
        if os.path.exists(os.path.join(d, "bin", "nvcc")) or os.path.isdir(
                os.path.join(d, "dist-info")) or os.path.exists(os.path.join(d, "version.json")):
            return d
    return None


def derive(binaries):
    """(sorted Debian packages, [(library path, cuda root)]) for a list of host binaries."""
    libs = sorted({lib for b in binaries for lib in ldd(b)})
    owners = dpkg_owners([a for lib in libs for a in aliases(lib)])
    packages, copied = set(), {}
    for lib in libs:
        pkg = next((owners[a] for a in aliases(lib) if a in owners), None)
        if pkg:
            packages.add(pkg)
            continue
        root = cuda_root_of(lib)
        if root is None:
            raise SystemExit("build_image: %s is linked, but no Debian package owns it and it "
                             "is not under a CUDA installation" % lib)
        copied[os.path.basename(lib)] = (lib, root)
    return sorted(packages), sorted(copied.values())


LOCK = os.path.join(HERE, "packages.lock")


def read_lock():
    """{package: version} of deploy/image/packages.lock ({} when absent)."""
    if not os.path.exists(LOCK):
        return {}
    lines = [l.strip() for l in open(LOCK) if l.strip() and not l.startswith("#")]
    return dict(l.split("=", 1) for l in lines)


def write_lock(packages):
    """Pins `packages` to the versions apt would install now (this machine's apt lists:
    the same Debian sources the images use, security updates included)."""
    text = subprocess.run(["apt-cache", "policy", *packages], check=True,
                          stdout=subprocess.PIPE, text=True).stdout
    versions = dict(re.findall(r"^(\S+):\n\s+Installed: .*\n\s+Candidate: (\S+)$", text, re.M))
    if sorted(versions) != sorted(packages) or "(none)" in versions.values():
        raise SystemExit("build_image: apt has no candidate for some of %s (apt-get update?)"
                         % packages)
    with open(LOCK, "w") as f:
        f.write("# GENERATED by deploy/image/build_image.py --update-lock: the images' runtime\n"
                "# packages (derived from the binaries) pinned to the versions the Debian\n"
                "# mirror had then. Every build installs exactly these, and the Dockerfiles\n"
                "# pin the same; update (and rerun ./test.sh --full) for security updates.\n")
        f.writelines("%s=%s\n" % kv for kv in sorted(versions.items()))
    log("wrote", os.path.relpath(LOCK, ROOT))
    return versions


def pinned(packages, lock):
    """["package=version"] of `packages` from the lock, which must pin exactly them."""
    if sorted(lock) != sorted(packages):
        raise SystemExit(
            "build_image: the binaries link %s but deploy/image/packages.lock pins %s: run "
            "deploy/image/build_image.py --update-lock --context-only and commit it (and the "
            "Dockerfiles)" % (sorted(packages), sorted(lock)))
    return ["%s=%s" % (p, lock[p]) for p in sorted(packages)]


def source_date_epoch():
    """SOURCE_DATE_EPOCH (reproducible-builds.org): the environment's, else the time of
    the checkout's last commit."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    r = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%ct"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        raise SystemExit("build_image: not a git checkout: set SOURCE_DATE_EPOCH")
    return int(r.stdout.strip())


def clamp_times(root, epoch):
    """Every file's, directory's and link's times set to at most `epoch` (what a file
    install wrote now gets `epoch`; what a package shipped older keeps its time)."""
    for dirpath, dirs, files in os.walk(root, topdown=False):
        for name in dirs + files + [""]:
            path = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(path)
            if st.st_mtime > epoch or st.st_atime > epoch:
                t = min(st.st_mtime, epoch)
                os.utime(path, (t, t), follow_symlinks=False)


def licences_for(lib, cuda_root):
    """Licence files of the CUDA component that ships `lib` (pip-wheel layout: its
    dist-info's licenses/; a toolkit install: EULA.txt, NCCL's LICENSE.txt)."""
    name = os.path.basename(lib).split(".so")[0] + ".so"
    found = []
    for record in glob.glob(os.path.join(cuda_root, "dist-info", "*", "RECORD")):
        with open(record) as f:
            if any(line.split(",", 1)[0].endswith("/" + os.path.basename(lib)) or
                   "/" + name in line.split(",", 1)[0] for line in f):
                d = os.path.dirname(record)
                found += [(os.path.basename(d), p)
                          for p in glob.glob(os.path.join(d, "licenses", "**", "*"), recursive=True)
                          if os.path.isfile(p)]
    if not found:
        for p in ("EULA.txt", "LICENSE.txt", "NCCL-SLA.txt"):
            if os.path.exists(os.path.join(cuda_root, p)):
                found.append(("cuda", os.path.join(cuda_root, p)))
    if not found:
        raise SystemExit("build_image: no licence file found for %s under %s" % (lib, cuda_root))
    return found


# --- Debian root filesystem ---------------------------------------------------------------

def host_debian_sources():
    """(codename, [(uri, suite, components)]) of the Debian entries apt uses here: every
    source whose suite is this release's codename or codename-* (bookworm-updates,
    bookworm-security); third-party repositories are left out."""
    codename = ""
    with open("/etc/os-release") as f:
        for line in f:
            if line.startswith("VERSION_CODENAME="):
                codename = line.split("=", 1)[1].strip().strip('"')
    if not codename:
        raise SystemExit("build_image: no VERSION_CODENAME in /etc/os-release")
    entries = []
    files = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*"))
    for path in files:
        if not os.path.isfile(path):
            continue
        text = open(path).read()
        if path.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line:
                        continue
                    k, v = line.split(":", 1)
                    fields[k.strip().lower()] = v.strip()
                if "deb" not in fields.get("types", "").split():
                    continue
                if fields.get("enabled", "yes").lower() == "no":
                    continue
                for uri in fields.get("uris", "").split():
                    for suite in fields.get("suites", "").split():
                        entries.append((uri, suite, fields.get("components", "main").split()))
        elif path.endswith(".list"):
            for line in text.splitlines():
                line = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
                if len(line) >= 3 and line[0] == "deb":
                    entries.append((line[1], line[2], line[3:] or ["main"]))
    debian = [e for e in entries if e[1] == codename or e[1].startswith(codename + "-")]
    if not any(e[1] == codename for e in debian):
        raise SystemExit("build_image: apt has no source for %s here (/etc/apt/sources.list*)"
                         % codename)
    return codename, debian


def base_rootfs(packages, work, use_cache=True):
    """A minbase root filesystem with `packages` ("name=version") installed, as a
    directory under work/ (from the cache when a fresh one exists and use_cache).
    Returns (path, seconds spent, cached?)."""
    codename, sources = host_debian_sources()
    # "normalized-1": the normalization of this version (a change must not reuse old bases).
    key = hashlib.sha256(json.dumps([codename, sources, packages, "normalized-1"]).encode()
                         ).hexdigest()[:16]
    tarball = os.path.join(CACHE, "base-%s-%s.tar" % (codename, key))
    rootfs = os.path.join(work, "base-" + key)
    start = time.time()
    if os.path.isdir(rootfs):
        return rootfs, 0.0, True
    os.makedirs(rootfs)
    if use_cache and os.path.exists(tarball) and \
            time.time() - os.path.getmtime(tarball) < BASE_MAX_AGE_S:
        log("base root filesystem from the cache:", tarball)
        run(["tar", "-C", rootfs, "--numeric-owner", "-xpf", tarball])
        return rootfs, time.time() - start, True
    mirror = next(uri for uri, suite, _ in sources if suite == codename)
    log("debootstrap --variant=minbase", codename, "(mirror from /etc/apt/sources.list*)")
    run(["debootstrap", "--variant=minbase", codename, rootfs, mirror],
        stdout=subprocess.DEVNULL)
    # The same Debian sources as this machine (updates and security included), so the
    # packages match the versions the binaries were built and tested against.
    deb_sources = os.path.join(rootfs, "etc/apt/sources.list")
    with open(deb_sources, "w") as f:
        for uri, suite, comps in sources:
            f.write("deb %s %s %s\n" % (uri, suite, " ".join(comps)))
    shutil.copy("/etc/resolv.conf", os.path.join(rootfs, "etc/resolv.conf"))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C")
    log("apt-get install in the root filesystem:", " ".join(packages))
    run(["chroot", rootfs, "apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL)
    # Exactly the pinned versions (a downgrade where debootstrap took a newer one).
    r = subprocess.run(["chroot", rootfs, "apt-get", "install", "-y", "-q", "-o",
                        "Dpkg::Use-Pty=0", "--no-install-recommends", "--allow-downgrades",
                        *packages], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        raise SystemExit("build_image: apt-get install of the pinned packages failed (a version "
                         "the mirror no longer has? deploy/image/build_image.py --update-lock "
                         "--context-only):\n" + r.stdout[-3000:])
    run(["chroot", rootfs, "apt-get", "clean"], env=env)
    # Slim: apt lists and caches, docs (copyright files kept), man pages, locales; and the
    # device nodes debootstrap made (a container runtime provides /dev).
    for pattern in ("var/lib/apt/lists/*", "var/cache/apt/*", "var/cache/debconf/*-old",
                    "var/log/*", "usr/share/man/*", "usr/share/info/*", "usr/share/locale/*",
                    "usr/share/doc/*/*", "tmp/*", "var/tmp/*", "dev/*"):
        for p in glob.glob(os.path.join(rootfs, pattern)):
            if p.endswith("/copyright") or not os.path.lexists(p):
                continue  # (gone already: a doc directory may be a link to another)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.remove(p)
    with open(os.path.join(rootfs, "etc/resolv.conf"), "w"):
        pass
    # The sources debootstrap would leave (the mirror's release only), not this machine's.
    with open(deb_sources, "w") as f:
        f.write("deb %s %s main\n" % (mirror, codename))
    normalize(rootfs)
    os.makedirs(CACHE, exist_ok=True)
    run(["tar", "-C", rootfs, "--numeric-owner", "-cpf", tarball + ".tmp", "."])
    os.replace(tarball + ".tmp", tarball)
    return rootfs, time.time() - start, False


def normalize(rootfs):
    """Removes or rewrites what an install writes differently each time: caches keyed by
    inode and time, dpkg's and debconf's backups, the dates of /etc/shadow, and the build
    host's name (two installs of the same packages then give the same bytes once their
    times are clamped, which main() does at every build: the cached base keeps the
    install's own times, so a later SOURCE_DATE_EPOCH clamps a cached and a fresh base
    alike)."""
    for pattern in ("var/cache/ldconfig/aux-cache", "var/lib/dpkg/*-old",
                    "var/cache/debconf/*-old", "etc/*-", "etc/machine-id",
                    "var/lib/dbus/machine-id", "var/lib/systemd/random-seed"):
        for p in glob.glob(os.path.join(rootfs, pattern)):
            if os.path.isfile(p) or os.path.islink(p):
                os.remove(p)
    for name, text in (("etc/hostname", "localhost\n"),
                       ("etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n")):
        with open(os.path.join(rootfs, name), "w") as f:
            f.write(text)
    # /etc/shadow's field 3 is the day each password last changed (the install's date);
    # empty (no password ageing) for these locked system accounts.
    path = os.path.join(rootfs, "etc/shadow")
    if os.path.exists(path):
        lines = [":".join(f[:2] + [""] + f[3:])
                 for f in (l.split(":") for l in open(path).read().splitlines())]
        with open(path, "w") as f:
            f.write("".join(l + "\n" for l in lines))


def add_user(rootfs):
    """User and group weft (65532), its home, and /models (where the model is mounted)."""
    with open(os.path.join(rootfs, "etc/passwd"), "a") as f:
        f.write("weft:x:%d:%d:weft:/home/weft:/usr/sbin/nologin\n" % (UID, UID))
    with open(os.path.join(rootfs, "etc/group"), "a") as f:
        f.write("weft:x:%d:\n" % UID)
    for d in ("home/weft", "models"):
        os.makedirs(os.path.join(rootfs, d), exist_ok=True)
        os.chown(os.path.join(rootfs, d), UID, UID)


# --- image content ------------------------------------------------------------------------

def stage_payload(img, binaries, cuda_libs, dest):
    """The files an image adds on top of its base, under dest/ as they sit in the image;
    also the Docker build context's payload."""
    for path, src in binaries:
        d = os.path.join(dest, path.lstrip("/"))
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.copy2(src, d)
        os.chmod(d, 0o755)
    if cuda_libs:
        lib_dir = os.path.join(dest, "usr/local/cuda-%s/lib64" % cuda_version(cuda_libs[0][1]))
        os.makedirs(lib_dir, exist_ok=True)
        for lib, root in cuda_libs:
            real = os.path.realpath(lib)
            shutil.copy2(real, os.path.join(lib_dir, os.path.basename(real)))
            if os.path.basename(lib) != os.path.basename(real):
                os.symlink(os.path.basename(real), os.path.join(lib_dir, os.path.basename(lib)))
            for component, lic in licences_for(lib, root):
                d = os.path.join(dest, "usr/share/doc/nvidia-cuda", component)
                os.makedirs(d, exist_ok=True)
                shutil.copy2(lic, os.path.join(d, os.path.basename(lic)))
        # The CUDA worker's RUNPATH is /usr/local/cuda/lib64 (third_party/cuda.BUILD), as
        # in NVIDIA's own images: no ld.so.conf entry or cache is needed.
        os.symlink(os.path.basename(os.path.dirname(lib_dir)), os.path.join(dest, "usr/local/cuda"))


def cuda_version(root):
    m = re.search(r"cuda-(\d+\.\d+)", os.path.realpath(root))
    if m:
        return m.group(1)
    vj = os.path.join(root, "version.json")
    if os.path.exists(vj):
        return ".".join(json.load(open(vj))["cuda"]["version"].split(".")[:2])
    raise SystemExit("build_image: cannot tell the CUDA version of " + root)


# --- Dockerfiles --------------------------------------------------------------------------

def dockerfile(img, packages, codename):
    lines = [
        "# GENERATED by deploy/image/build_image.py --write-dockerfiles from the runtime",
        "# packages the binaries link (ldd + dpkg -S), pinned to the versions they were built",
        "# against; do not edit. The daemonless build (./test.sh --full) fails when this file",
        "# and the derived list differ. (The daemonless image is the reproducible one: this",
        "# base tag moves, and docker build stamps its own times.)",
        "# Context: `deploy/image/build_image.py --context-only --images %s --out DIR`," % img,
        "# then `docker build -f DIR/context-%s/Dockerfile DIR/context-%s`." % (img, img),
        "FROM debian:%s-slim" % codename,
        "RUN apt-get update && apt-get install -y --no-install-recommends --allow-downgrades \\",
    ]
    lines += ["      %s \\" % p for p in packages]
    lines += [
        "    && rm -rf /var/lib/apt/lists/* \\",
        "    && echo 'weft:x:%d:%d:weft:/home/weft:/usr/sbin/nologin' >>/etc/passwd \\"
        % (UID, UID),
        "    && echo 'weft:x:%d:' >>/etc/group \\" % UID,
        "    && mkdir -p /home/weft /models && chown %d:%d /home/weft /models" % (UID, UID),
        "COPY payload/ /",
    ]
    for e in ENV[img]:
        k, v = e.split("=", 1)
        lines.append("ENV %s=%s" % (k, v))
    lines += [
        "WORKDIR /home/weft",
        "USER %d:%d" % (UID, UID),
        'ENTRYPOINT ["/usr/local/bin/weft-scheduler"]',
        "",
    ]
    return "\n".join(lines)


# --- OCI ----------------------------------------------------------------------------------

def identity(binaries):
    """(version, revision) the binaries report (`--version`: common/build_info.h); every
    binary of a build reports the same, else the build fails."""
    seen = set()
    for _, path in binaries:
        out = subprocess.run([path, "--version"], stdout=subprocess.PIPE, text=True).stdout
        m = re.fullmatch(r"\S+ (\S+) \(revision (\S+)\)\n?", out)
        if not m:
            raise SystemExit("build_image: %s --version printed %r" % (path, out))
        seen.add(m.groups())
    if len(seen) != 1:
        raise SystemExit("build_image: the binaries report different builds: %s" % sorted(seen))
    return seen.pop()


def oci_images(layout, plan, epoch, identities):
    """plan: {img: (base rootfs, payload dir)}; identities: {img: (version, revision)}.
    Writes tags base-<key> and <img>, every creation time `epoch`, the OCI version and
    revision labels from the binaries' own --version."""
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    if not os.path.isdir(layout):
        run(["umoci", "init", "--layout", layout])
    bases_done = {}
    for img, (rootfs, payload) in plan.items():
        base_tag = "base-" + os.path.basename(rootfs).split("-", 1)[1]
        if rootfs not in bases_done:
            log("layer: base root filesystem (%s)" % base_tag)
            run(["umoci", "new", "--image", "%s:%s" % (layout, base_tag)])
            run(["umoci", "insert", "--image", "%s:%s" % (layout, base_tag),
                 "--history.created", created, "--history.created_by", "build_image.py: base",
                 rootfs, "/"], stdout=subprocess.DEVNULL)
            bases_done[rootfs] = base_tag
        log("layer: %s binaries%s" % (img, " and CUDA libraries" if img == "gpu" else ""))
        tag = "%s:%s" % (layout, img)
        run(["umoci", "config", "--image", "%s:%s" % (layout, base_tag), "--tag", img,
             "--no-history"])
        run(["umoci", "insert", "--image", tag, "--history.created", created,
             "--history.created_by", "build_image.py: " + img, payload, "/"],
            stdout=subprocess.DEVNULL)
        cfg = ["umoci", "config", "--image", tag, "--no-history", "--created", created,
               "--config.user", "%d:%d" % (UID, UID),
               "--config.workingdir", "/home/weft",
               "--config.entrypoint", "/usr/local/bin/weft-scheduler",
               "--config.label", "org.opencontainers.image.title=weft-" + img,
               "--config.label", "org.opencontainers.image.source=deploy/image/build_image.py",
               "--config.label", "org.opencontainers.image.version=" + identities[img][0],
               "--config.label", "org.opencontainers.image.revision=" + identities[img][1],
               "--clear", "config.env"]
        for e in ENV[img]:
            cfg += ["--config.env", e]
        run(cfg)
    run(["umoci", "gc", "--layout", layout])


def manifest_digest(layout, img):
    idx = json.load(open(os.path.join(layout, "index.json")))
    return next(m["digest"] for m in idx["manifests"]
                if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == img)


def image_sizes(layout, img):
    """(compressed bytes of the layers + config, uncompressed layer bytes if known)."""
    idx = json.load(open(os.path.join(layout, "index.json")))
    desc = next(m for m in idx["manifests"]
                if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == img)
    blob = lambda d: os.path.join(layout, "blobs", *d["digest"].split(":"))
    manifest = json.load(open(blob(desc)))
    layers = [(l["size"], l["digest"]) for l in manifest["layers"]]
    return {"compressed_bytes": sum(s for s, _ in layers) + manifest["config"]["size"],
            "layers": [{"digest": d, "compressed_bytes": s} for s, d in layers]}


def du(path):
    return int(out(["du", "-sb", "--apparent-size", path]).split()[0])


# --- main ---------------------------------------------------------------------------------

def prepare(images, binaries, out, write_dockerfiles, update_lock):
    """Derives and pins each image's packages (the lock), checks (or writes) its
    Dockerfile and stages its payload. Returns ({img: (pinned packages, cuda libs)},
    {img: report entry})."""
    codename, _ = host_debian_sources()
    derived, report, stale = {}, {}, []
    lock = read_lock()
    for img in images:
        packages, cuda_libs = derive([src for _, src in binaries[img]])
        if img == "cpu" and cuda_libs:
            raise SystemExit("build_image: the default build links CUDA: %s" % cuda_libs)
        if img == "gpu" and not cuda_libs:
            raise SystemExit("build_image: the --config=cuda worker links no CUDA library")
        if update_lock and sorted(lock) != sorted(packages):
            lock = write_lock(packages)
        packages = pinned(packages, lock)
        derived[img] = (packages, cuda_libs)
        text = dockerfile(img, packages, codename)
        path = os.path.join(HERE, "Dockerfile." + img)
        if write_dockerfiles or update_lock:
            with open(path, "w") as f:
                f.write(text)
            log("wrote", os.path.relpath(path, ROOT))
        elif not os.path.exists(path) or open(path).read() != text:
            stale.append(os.path.relpath(path, ROOT))
        payload = os.path.join(out, "context-" + img, "payload")
        shutil.rmtree(os.path.dirname(payload), ignore_errors=True)
        stage_payload(img, binaries[img], cuda_libs, payload)
        shutil.copy(path if os.path.exists(path) else "/dev/null",
                    os.path.join(os.path.dirname(payload), "Dockerfile"))
        report[img] = {"packages": packages,
                       "cuda_libraries": [os.path.basename(l) for l, _ in cuda_libs],
                       "payload_bytes": du(payload)}
        log("%s: %d Debian packages: %s" % (img, len(packages), " ".join(packages)))
        if cuda_libs:
            log("%s: CUDA libraries copied: %s" % (img, " ".join(os.path.basename(l)
                                                                 for l, _ in cuda_libs)))
    if stale:
        raise SystemExit(
            "build_image: %s differ from the packages the binaries link; run "
            "deploy/image/build_image.py --write-dockerfiles --context-only and commit them"
            % ", ".join(stale))
    return derived, report


def payload_files(payload):
    """[(path in the image, local path, SPDX purpose)] of the regular files a payload adds."""
    out = []
    for dirpath, _, files in os.walk(payload):
        for f in files:
            local = os.path.join(dirpath, f)
            if os.path.isfile(local) and not os.path.islink(local):
                in_image = "/" + os.path.relpath(local, payload)
                purpose = "APPLICATION" if "/bin/" in in_image else (
                    "LIBRARY" if ".so" in f else "OTHER")
                out.append((in_image, local, purpose))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "image"))
    ap.add_argument("--images", default="cpu,gpu")
    ap.add_argument("--write-dockerfiles", action="store_true",
                    help="rewrite deploy/image/Dockerfile.* from the derived package lists")
    ap.add_argument("--context-only", action="store_true",
                    help="only make the Docker build contexts (no debootstrap, no OCI)")
    ap.add_argument("--no-build", action="store_true", help="use the binaries bazel-bin has")
    ap.add_argument("--update-lock", action="store_true",
                    help="pin the derived packages to the mirror's versions now "
                         "(deploy/image/packages.lock) and rewrite the Dockerfiles")
    ap.add_argument("--binaries-from", metavar="OUT",
                    help="the binaries a previous build staged in OUT (no Bazel at all)")
    ap.add_argument("--no-cache", action="store_true",
                    help="make the base root filesystem afresh (debootstrap), not from the cache")
    args = ap.parse_args()
    images = [i for i in args.images.split(",") if i]
    for i in images:
        if i not in BINARIES:
            raise SystemExit("build_image: unknown image %r (cpu, gpu)" % i)
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="weft-image-", dir=args.out)
    epoch = source_date_epoch()
    report = {"source_date_epoch": epoch}
    try:
        binaries = (binaries_from(images, args.binaries_from) if args.binaries_from else
                    build_binaries(images, os.path.join(work, "stage"), args.no_build))
        report["build_s"] = round(time.time() - t0, 1)
        derived, report["images"] = prepare(images, binaries, args.out, args.write_dockerfiles,
                                            args.update_lock)
        if args.context_only:
            return 0
        if os.geteuid() != 0:
            raise SystemExit("build_image: debootstrap and chroot need root")
        codename, _ = host_debian_sources()
        plan = {}
        for img in images:
            rootfs, secs, cached = base_rootfs(derived[img][0], work, not args.no_cache)
            if not os.path.exists(os.path.join(rootfs, "home/weft")):
                add_user(rootfs)
            payload = os.path.join(args.out, "context-" + img, "payload")
            for tree in (rootfs, payload):
                clamp_times(tree, epoch)
            r = report["images"][img]
            r.update(base_s=round(secs, 1), base_cached=cached, base_bytes=du(rootfs))
            plan[img] = (rootfs, payload)
            sbom.write(os.path.join(args.out, "sbom-%s.spdx.json" % img), sbom.document(
                "weft-" + img, os.path.join(rootfs, "var/lib/dpkg/status"),
                payload_files(payload), epoch, codename))
        layout = os.path.join(args.out, "oci")
        shutil.rmtree(layout, ignore_errors=True)
        t1 = time.time()
        identities = {img: identity(binaries[img]) for img in images}
        report["identity"] = identities
        oci_images(layout, plan, epoch, identities)
        report["oci_s"] = round(time.time() - t1, 1)
        for img in images:
            r = report["images"][img]
            r.update(image_sizes(layout, img))
            r["uncompressed_bytes"] = r["base_bytes"] + r["payload_bytes"]
            r["digest"] = manifest_digest(layout, img)
            r["sbom"] = os.path.join(args.out, "sbom-%s.spdx.json" % img)
            run(["skopeo", "inspect", "oci:%s:%s" % (layout, img)], stdout=subprocess.DEVNULL)
            log("%s: %s, %.1f MB compressed, %.1f MB unpacked (oci:%s:%s), SBOM %s" % (
                img, r["digest"], r["compressed_bytes"] / 1e6, r["uncompressed_bytes"] / 1e6,
                layout, img, r["sbom"]))
        report["layout"] = layout
        report["total_s"] = round(time.time() - t0, 1)
        with open(os.path.join(args.out, "report.json"), "w") as f:
            json.dump(report, f, indent=1)
        log("done in %.0f s" % report["total_s"])
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
