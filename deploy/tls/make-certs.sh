#!/usr/bin/env bash
# Make a CA and one certificate per PowerTrip component for mutual TLS, with openssl.
#
#   deploy/tls/make-certs.sh OUT_DIR [NAME ...]      (default names: aggregator profiler
#                                                      policy site-worker client)
#   SANS="DNS:agg.example.org,IP:10.0.0.5" deploy/tls/make-certs.sh certs aggregator
#   SITES=100 deploy/tls/make-certs.sh certs          also writes OUT_DIR/site-tokens.yaml
#   JOIN_TOKEN=1 deploy/tls/make-certs.sh certs       also writes OUT_DIR/join-token (kept
#                                                      when it exists: workers hold it)
#
# Each certificate is valid for both serverAuth and clientAuth (a service also dials out
# with it) and names DNS:NAME, DNS:localhost and IP:127.0.0.1 plus $SANS. Keys are 0600.
# Pass them as --tls-cert OUT/NAME.crt --tls-key OUT/NAME.key --tls-ca OUT/ca.crt.
set -euo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || usage
out=$1; shift
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(aggregator profiler policy site-worker client)
days=${DAYS:-825}
command -v openssl >/dev/null || { echo "make-certs.sh: openssl not found" >&2; exit 1; }
mkdir -p "$out"
umask 077

if [[ ! -f $out/ca.key ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$days" \
    -subj "/CN=PowerTrip CA" -keyout "$out/ca.key" -out "$out/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
  echo "CA: $out/ca.crt"
fi

for name in "${names[@]}"; do
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || { echo "make-certs.sh: bad name '$name'" >&2; exit 2; }
  san="DNS:$name,DNS:localhost,IP:127.0.0.1${SANS:+,$SANS}"
  ext=$(mktemp)
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth,clientAuth" "subjectAltName=$san" > "$ext"
  openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=$name" \
    -keyout "$out/$name.key" -out "$out/$name.csr" 2>/dev/null
  openssl x509 -req -in "$out/$name.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
    -CAcreateserial -days "$days" -sha256 -extfile "$ext" -out "$out/$name.crt" 2>/dev/null
  rm -f "$out/$name.csr" "$ext"
  openssl verify -CAfile "$out/ca.crt" "$out/$name.crt" >/dev/null
  echo "$name: $out/$name.crt ($san)"
done

if [[ -n ${JOIN_TOKEN:-} && ! -s $out/join-token ]]; then
  # 0600 (umask above): the aggregator and the workers read it as a secret file
  openssl rand -hex 32 > "$out/join-token"
  echo "join token: $out/join-token"
fi

if [[ -n ${SITES:-} ]]; then
  tokens=$out/site-tokens.yaml
  : > "$tokens"
  for ((i = 0; i < SITES; i++)); do
    printf 'site-%03d: %s\n' "$i" "$(openssl rand -hex 24)" >> "$tokens"
  done
  echo "site tokens: $tokens ($SITES sites; give each worker only its own lines)"
fi
chmod 644 "$out"/*.crt
