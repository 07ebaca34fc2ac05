"""The SPDX 2.3 SBOM of an image build_image.py makes (JSON; schema: spdx-2.3-schema.json
here, from spdx/spdx-spec v2.3, validated by image_test.py).

What it lists: every Debian package of the image, read from the image's own dpkg database
(name, version, architecture, the source package it was built from, a purl; licences as
NOASSERTION: Debian's copyright files are in the image under /usr/share/doc, not in a
machine-readable form), and each file build_image.py adds (the Weft binaries, the CUDA
libraries of the gpu image) with its sha256; the image CONTAINS each of them. Everything
in it is derived from the image's content and SOURCE_DATE_EPOCH (its namespace is a UUID
of that content), so the same image gives the same bytes.
"""
import hashlib
import json
import re
import time
import urllib.parse
import uuid


def dpkg_status(path):
    """[{field: value}] of the installed packages in a dpkg status file."""
    out = []
    for stanza in open(path, encoding="utf-8").read().split("\n\n"):
        fields, key = {}, None
        for line in stanza.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line[1:]
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Status", "").endswith(" installed"):
            out.append(fields)
    return sorted(out, key=lambda f: f["Package"])


def _spdx_id(kind, name):
    return "SPDXRef-%s-%s" % (kind, re.sub(r"[^A-Za-z0-9.-]", "-", name))


def _purl(fields, codename):
    version = urllib.parse.quote(fields["Version"], safe="")
    return "pkg:deb/debian/%s@%s?arch=%s&distro=debian-%s" % (
        fields["Package"], version, fields.get("Architecture", "all"), codename)


def document(image, status_path, files, epoch, codename):
    """The SBOM (a dict) of image `image` (e.g. "weft-cpu"): its dpkg database at
    `status_path`, the added `files` [(path in the image, local path, purpose)]."""
    packages = [{
        "SPDXID": "SPDXRef-Image", "name": image, "versionInfo": "NOASSERTION",
        "downloadLocation": "NOASSERTION", "filesAnalyzed": False,
        "primaryPackagePurpose": "CONTAINER", "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "NOASSERTION", "copyrightText": "NOASSERTION",
        "comment": "OCI image built by deploy/image/build_image.py"}]
    for f in dpkg_status(status_path):
        source = f.get("Source", f["Package"])
        source_name, _, source_version = source.partition(" ")
        pkg = {
            "SPDXID": _spdx_id("deb", f["Package"]), "name": f["Package"],
            "versionInfo": f["Version"], "downloadLocation": "NOASSERTION",
            "filesAnalyzed": False, "primaryPackagePurpose": "LIBRARY"
            if f.get("Section", "").endswith("libs") else "APPLICATION",
            "supplier": "Organization: Debian", "licenseConcluded": "NOASSERTION",
            "licenseDeclared": "NOASSERTION", "copyrightText": "NOASSERTION",
            "sourceInfo": "built from the Debian source package %s %s" % (
                source_name, source_version.strip("()") or f["Version"]),
            "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                              "referenceLocator": _purl(f, codename)}]}
        packages.append(pkg)
    for in_image, local, purpose in sorted(files):
        digest = hashlib.sha256(open(local, "rb").read()).hexdigest()
        packages.append({
            "SPDXID": _spdx_id("file", in_image.strip("/")), "name": in_image,
            "versionInfo": "NOASSERTION", "downloadLocation": "NOASSERTION",
            "filesAnalyzed": False, "primaryPackagePurpose": purpose,
            "checksums": [{"algorithm": "SHA256", "checksumValue": digest}],
            "licenseConcluded": "NOASSERTION", "licenseDeclared": "NOASSERTION",
            "copyrightText": "NOASSERTION"})
    relationships = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                      "relatedSpdxElement": "SPDXRef-Image"}]
    relationships += [{"spdxElementId": "SPDXRef-Image", "relationshipType": "CONTAINS",
                       "relatedSpdxElement": p["SPDXID"]} for p in packages[1:]]
    content = json.dumps([packages, relationships], sort_keys=True).encode()
    return {
        "spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT",
        "name": image,
        "documentNamespace": "urn:uuid:%s" % uuid.uuid5(uuid.NAMESPACE_OID,
                                                       hashlib.sha256(content).hexdigest()),
        "creationInfo": {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)),
                         "creators": ["Tool: weft-build_image"]},
        "packages": packages, "relationships": relationships,
    }


def write(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
