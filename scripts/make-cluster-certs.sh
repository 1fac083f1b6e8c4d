#!/usr/bin/env bash
# Makes the TLS files of a Troupe cluster (docs/cluster.md): a cluster CA and one certificate per
# node name, each signed by that CA. Every node (the front and each worker) sets
#   cluster.tls_ca = "DIR/ca.pem", cluster.tls_certificate = "DIR/NAME.pem", cluster.tls_key = "DIR/NAME.key"
# A peer without a certificate from this CA cannot connect. Keep ca.key off the nodes.
# Usage: bash scripts/make-cluster-certs.sh DIR [NAME ...]   (default NAME: node)
set -euo pipefail
dir="${1:?usage: make-cluster-certs.sh DIR [NAME ...]}"
shift
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(node)
command -v openssl >/dev/null || { echo "make-cluster-certs: openssl not found (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$dir"
umask 077
if [ ! -f "$dir/ca.pem" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -subj "/CN=troupe cluster CA" \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  echo "make-cluster-certs: cluster CA $dir/ca.pem"
fi
for n in "${names[@]}"; do
  openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=troupe $n" -keyout "$dir/$n.key" -out "$dir/$n.csr" 2>/dev/null
  openssl x509 -req -sha256 -days 3650 -in "$dir/$n.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -out "$dir/$n.pem" 2>/dev/null
  rm -f "$dir/$n.csr"
  echo "make-cluster-certs: $dir/$n.pem, $dir/$n.key"
done
