#!/usr/bin/env bash
# make_test_certs.sh DIR — a throwaway PKI for TLS tests, made at test time with openssl
# (never committed): EC P-256 keys, certificates valid for a day.
#   ca.crt/ca.key            the cluster CA
#   server.crt/server.key    signed by ca; SAN localhost, 127.0.0.1, weft-test.internal
#   client.crt/client.key    signed by ca (a worker's or client's certificate)
#   other-ca.crt             another CA ("wrong CA")
#   stray.crt/stray.key      signed by other-ca (a stray worker's certificate)
#   server2.crt/server2.key  signed by other-ca, same names as server (rotation tests)
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {  # name cn
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -days 1 -subj "/CN=$2" -out "$1.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}
leaf() {  # name ca cn san usage
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$3" -out "$1.csr"
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\nbasicConstraints=CA:FALSE\n' "$4" "$5" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial -days 1 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca "weft test CA"
ca other-ca "some other CA"
names="DNS:localhost,IP:127.0.0.1,DNS:weft-test.internal"
leaf server ca "weft-scheduler" "$names" "serverAuth,clientAuth"
leaf client ca "weft-worker" "DNS:weft-worker" "clientAuth,serverAuth"
leaf stray other-ca "weft-worker" "DNS:weft-worker" "clientAuth,serverAuth"
leaf server2 other-ca "weft-scheduler" "$names" "serverAuth,clientAuth"
