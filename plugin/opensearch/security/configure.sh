#!/usr/bin/env bash
# Turns an OpenSearch config folder into a secured node's: TLS certificates made here with
# openssl (never downloaded), kgqr's roles, and users whose passwords come from the
# environment (hashed by the security plugin's own hash.sh). Used by
# `kgqr services up opensearch-secured` and, in the OpenSearch image, by docker/compose.yml.
# Runs once per folder (a marker file); the demo configuration is never used.
#
#   OPENSEARCH_PATH_CONF            the config folder to change (default the image's)
#   OPENSEARCH_HOME                 the install (its security plugin's tools/hash.sh)
#   KGQR_SECURITY_ADMIN_PASSWORD    admin (all_access; also the admin certificate)
#   KGQR_SECURITY_KGQR_PASSWORD     kgqr, the proxy's account (role kgqr_service)
#   KGQR_SECURITY_INGEST_PASSWORD   kgqr-ingest, the ingest workers' (role kgqr_ingest)
#   KGQR_SECURITY_DASHBOARDS_PASSWORD  kibanaserver, OpenSearch Dashboards' server user
#   KGQR_SECURITY_HOSTS             names the node certificate holds (default localhost)
#   KGQR_SECURITY_CA_OUT            a folder to copy the root CA to, for clients (optional)
#   KGQR_SECURITY_OWNER             user:group to hand the config folder to (optional)
#   KGQR_SECURITY_KEYS_OUT          a folder to keep the CA's and the admin certificate's
#                                   keys in, one the node does not mount (else deleted)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
home=${OPENSEARCH_HOME:-/usr/share/opensearch}
config=${OPENSEARCH_PATH_CONF:-$home/config}

# The CA's key signs certificates every node trusts (one named kgqr-node joins the cluster
# and reads everything), and the admin certificate's key passes every role. The node needs
# neither, so neither stays in the config folder it reads: a container mounts that folder,
# and whoever reads it would have held the cluster. Folders configured before are cleared
# too.
keys_out_of_config() {
  local name
  for name in root-ca-key.pem root-ca.srl admin-key.pem admin.pem node.ext admin.ext; do
    [ -f "$config/certs/$name" ] || continue
    if [ -n "${KGQR_SECURITY_KEYS_OUT:-}" ]; then
      (umask 077 && mkdir -p "$KGQR_SECURITY_KEYS_OUT")
      mv "$config/certs/$name" "$KGQR_SECURITY_KEYS_OUT/"
    else
      rm "$config/certs/$name"
    fi
  done
}

if [ -f "$config/.kgqr-configured" ]; then
  keys_out_of_config
  echo "kgqr security: $config is already configured" >&2
  exit 0
fi
for name in KGQR_SECURITY_ADMIN_PASSWORD KGQR_SECURITY_KGQR_PASSWORD KGQR_SECURITY_INGEST_PASSWORD \
            KGQR_SECURITY_DASHBOARDS_PASSWORD; do
  if [ -z "${!name:-}" ]; then
    echo "kgqr security: set $name" >&2
    exit 2
  fi
done

certs=$config/certs
mkdir -p "$certs"
cd "$certs"
san="IP:127.0.0.1"
IFS=, read -ra hosts <<< "${KGQR_SECURITY_HOSTS:-localhost}"
for host in "${hosts[@]}"; do san="$san,DNS:$host"; done
openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out root-ca-key.pem
openssl req -x509 -new -key root-ca-key.pem -sha256 -days 3650 \
  -subj "/O=kgqr local/CN=kgqr local root CA" -out root-ca.pem
sign() {  # name subject extensions
  openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1-key.pem"
  openssl req -new -key "$1-key.pem" -subj "$2" -out "$1.csr"
  printf '%b\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA root-ca.pem -CAkey root-ca-key.pem -CAcreateserial \
    -sha256 -days 3650 -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm "$1.csr"
}
sign node "/O=kgqr local/CN=kgqr-node" "subjectAltName=$san\nextendedKeyUsage=serverAuth,clientAuth"
sign admin "/O=kgqr local/CN=kgqr-admin" "extendedKeyUsage=clientAuth"
chmod 600 ./*-key.pem
if [ -n "${KGQR_SECURITY_CA_OUT:-}" ]; then
  mkdir -p "$KGQR_SECURITY_CA_OUT" && cp root-ca.pem "$KGQR_SECURITY_CA_OUT/"
fi
keys_out_of_config

# By the variable's name (-env), never the password itself: an argument is in every local
# user's `ps` while the hashing JVM starts.
hash() {
  local hashed
  hashed=$(bash "$home/plugins/opensearch-security/tools/hash.sh" -env "$1" | tail -n 1)
  case $hashed in
    '$2'*) echo "$hashed" ;;
    *) echo "kgqr security: hash.sh gave no bcrypt hash: $hashed" >&2; exit 1 ;;
  esac
}
security=$config/opensearch-security
# Hashed first: a failing command inside the here-document below would not stop the script.
admin_hash=$(hash KGQR_SECURITY_ADMIN_PASSWORD)
kgqr_hash=$(hash KGQR_SECURITY_KGQR_PASSWORD)
ingest_hash=$(hash KGQR_SECURITY_INGEST_PASSWORD)
dashboards_hash=$(hash KGQR_SECURITY_DASHBOARDS_PASSWORD)
cat > "$security/internal_users.yml" <<USERS
_meta: {type: "internalusers", config_version: 2}
admin: {hash: "$admin_hash", reserved: true, backend_roles: ["admin"]}
kgqr: {hash: "$kgqr_hash", reserved: false}
kgqr-ingest: {hash: "$ingest_hash", reserved: false}
kibanaserver: {hash: "$dashboards_hash", reserved: true}
USERS
{ echo; cat "$here/kgqr-roles.yml"; } >> "$security/roles.yml"
cat >> "$security/roles_mapping.yml" <<MAPPING

kgqr_service: {users: ["kgqr"]}
kgqr_ingest: {users: ["kgqr-ingest"]}
MAPPING

cat >> "$config/opensearch.yml" <<SETTINGS

# kgqr: the security plugin, set up by plugin/opensearch/security/configure.sh
plugins.security.ssl.transport.pemcert_filepath: certs/node.pem
plugins.security.ssl.transport.pemkey_filepath: certs/node-key.pem
plugins.security.ssl.transport.pemtrustedcas_filepath: certs/root-ca.pem
plugins.security.ssl.transport.enforce_hostname_verification: false
plugins.security.ssl.http.enabled: true
plugins.security.ssl.http.pemcert_filepath: certs/node.pem
plugins.security.ssl.http.pemkey_filepath: certs/node-key.pem
plugins.security.ssl.http.pemtrustedcas_filepath: certs/root-ca.pem
plugins.security.allow_default_init_securityindex: true
plugins.security.authcz.admin_dn: ["CN=kgqr-admin,O=kgqr local"]
plugins.security.nodes_dn: ["CN=kgqr-node,O=kgqr local"]
plugins.security.restapi.roles_enabled: ["all_access"]
plugins.security.audit.type: noop
plugins.security.check_snapshot_restore_write_privileges: true
SETTINGS
touch "$config/.kgqr-configured"
if [ -n "${KGQR_SECURITY_OWNER:-}" ]; then chown -R "$KGQR_SECURITY_OWNER" "$config"; fi
echo "kgqr security: configured $config" >&2
