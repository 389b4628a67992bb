#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1 for the tests: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok (fake nodes, pod lifecycles from
# kube/stages.yaml), and the JobSet controller with its CRD and webhooks; then kube/node.sh
# adds one real node (containerd, a kubelet, CoreDNS) for the real-pod tests.
#
#   kube/kube.sh build   build what is missing (from the Go modules pinned in kube/gomod/)
#   kube/kube.sh up      build, start, create two fake nodes, wait until they are Ready;
#                        writes the admin kubeconfig to .kube/config
#   kube/kube.sh down    stop everything it started (pid files) and remove its state
#   kube/kube.sh status  one line: running or not
#
# Binaries and the Go caches live outside the repository, in
# ${TFDIST_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfdist-kube}; a second `up` only starts.
# State (certificates, etcd data, logs, pid files, the build log) lives in .kube/ (git-ignored).
# When `up` fails, .kube/unavailable holds one line saying why; the tests print it when they skip.
#   kube/kube.sh crds    only the CRD schemas the tests validate against (TFJob, JobSet), from
#                        their Go modules into .kube/crds/ (also done by build and up; kept by down)
# The JobSet controller is optional: when it cannot be built or started, `up` still succeeds,
# .kube/jobset-unavailable says why, and only the JobSet tests skip.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
# The versions are pinned once, in the wrapper modules (go.mod + go.sum); they name the cache.
K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$HERE/gomod/k8s/go.mod")  # with etcd
KWOK_VERSION=$(awk '$1 == "sigs.k8s.io/kwok" {print $2}' "$HERE/gomod/kwok/go.mod")
REPO="$(dirname "$HERE")"
CACHE="${TFDIST_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfdist-kube}"
K8S_BIN="$CACHE/k8s-$K8S_VERSION/bin"
KWOK_BIN="$CACHE/kwok-$KWOK_VERSION/bin"
JOBSET_VERSION=$(awk '$1 == "sigs.k8s.io/jobset" {print $2}' "$HERE/gomod/jobset/go.mod")
JOBSET_BIN="$CACHE/jobset-$JOBSET_VERSION/bin"
# The TFJob CRD (kubeflow.org/v1) comes from the training operator's Go module, through the Go
# module proxy like the rest (its v1.9.x branch is where TFJob v1 lives); the tests validate
# and create `--as tfjob` manifests with it. No TFJob controller runs.
TFJOB_MODULE=github.com/kubeflow/training-operator
TFJOB_VERSION=v1.9.2
STATE="$REPO/.kube"
RUN="$STATE/run"
PKI="$RUN/pki"
CONFIG="$STATE/config"
BUILD_LOG="$STATE/build.log"
LOGS="$STATE/logs"
UNAVAILABLE="$STATE/unavailable"
NODES=(kwok-node-0 kwok-node-1)
# A cold build takes most of an hour on 2 busy cores (docs/benchmarks.md); past this, give up
# (CI has 90 minutes in all).
BUILD_TIMEOUT="${TFDIST_KUBE_BUILD_TIMEOUT:-2700}"
# The JobSet manager, built after the rest (docs/benchmarks.md has its cold time); past this it
# is skipped, and with it only the JobSet tests.
JOBSET_BUILD_TIMEOUT="${TFDIST_KUBE_JOBSET_BUILD_TIMEOUT:-900}"
JOBSET_UNAVAILABLE="$STATE/jobset-unavailable"
CLUSTER=kube
# log, fail, free_port, start, alive, wait_for, term_own, kill_after
# shellcheck source=lib/cluster.sh
source "$REPO/lib/cluster.sh"

go_env() {
    export GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gobuild" GOFLAGS="-mod=readonly -trimpath -buildvcs=false"
    export GOTOOLCHAIN=local CGO_ENABLED=0
}

# The time limits are budgets for a whole build (Kubernetes, etcd and kwok: BUILD_TIMEOUT; the
# JobSet manager: JOBSET_BUILD_TIMEOUT), not for each `go build` in it: build_one gets what is
# left before BUILD_DEADLINE (in $SECONDS), so a slow first module cannot leave the next one
# a full budget of its own and push a cold CI run past its 90 minutes.
BUILD_DEADLINE=0

build_one() {  # build_one MODULE_DIR OUT_DIR LDFLAGS PACKAGE...
    local dir=$1 out=$2 ldflags=$3
    shift 3
    local left=$((BUILD_DEADLINE - SECONDS))
    if [ "$left" -le 0 ]; then
        echo "== no time left for $dir (the build's budget is used up)" >> "$BUILD_LOG"
        return 1
    fi
    mkdir -p "$out.tmp"
    (cd "$dir" && timeout "$left" nice -n 19 go build -ldflags "$ldflags" -o "$out.tmp/" "$@") \
        >> "$BUILD_LOG" 2>&1 || { echo "== go build failed or ran out of its ${left}s" >> "$BUILD_LOG"; return 1; }
    mkdir -p "$out" && mv "$out.tmp"/* "$out/" && rmdir "$out.tmp"
}

cmd_build() {
    local start=$SECONDS
    build_core
    build_jobset || true
    cmd_crds || true
    # the real node's kubelet and CoreDNS (optional, like JobSet) get what is left of an hour
    # of building, so a cold CI run stays inside its 90 minutes
    local left=$((${TFDIST_KUBE_BUILDS_TIMEOUT:-3600} - (SECONDS - start)))
    local node=${TFDIST_KUBE_NODE_BUILD_TIMEOUT:-900}
    TFDIST_KUBE_NODE_BUILD_TIMEOUT=$((left < node ? left : node)) "$HERE/node.sh" build || true
}

CRDS="$STATE/crds"

cmd_crds() {  # the CRDs of the pinned TFJob and JobSet modules, copied into .kube/crds/
    local stamp="$TFJOB_MODULE $TFJOB_VERSION sigs.k8s.io/jobset $JOBSET_VERSION"
    [ "$(cat "$CRDS/versions" 2> /dev/null)" = "$stamp" ] && return 0
    command -v go > /dev/null || { log "no CRDs: Go is not installed (the CRD tests skip)"; return 1; }
    go_env
    mkdir -p "$STATE"
    rm -rf "$CRDS.tmp"; mkdir -p "$CRDS.tmp"
    local tfjob jobset
    if tfjob=$(crd_module_dir "$TFJOB_MODULE@$TFJOB_VERSION") \
        && jobset=$(crd_module_dir "sigs.k8s.io/jobset@$JOBSET_VERSION") \
        && install -m 0644 "$tfjob/manifests/base/crds/kubeflow.org_tfjobs.yaml" "$CRDS.tmp/" \
        && install -m 0644 "$jobset/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$CRDS.tmp/"; then
        echo "$stamp" > "$CRDS.tmp/versions"
        rm -rf "$CRDS" && mv "$CRDS.tmp" "$CRDS"
        log "CRDs of $TFJOB_MODULE $TFJOB_VERSION and sigs.k8s.io/jobset $JOBSET_VERSION in .kube/crds"
    else
        rm -rf "$CRDS.tmp"
        log "no CRDs: downloading their modules failed (see .kube/build.log; the CRD tests skip)"
        return 1
    fi
}

crd_module_dir() {  # crd_module_dir MODULE@VERSION: download it (cached), print its directory
    echo "== $(date -u +%FT%TZ) go mod download $1" >> "$BUILD_LOG"
    (cd "$STATE" && timeout 300 go mod download -json "$1" 2>> "$BUILD_LOG") \
        | awk -F'"' '$2 == "Dir" {print $4}' | grep .
}

build_core() {
    local need=()
    for b in etcd kube-apiserver kube-controller-manager kube-scheduler; do
        [ -x "$K8S_BIN/$b" ] || need+=("$b")
    done
    [ -x "$KWOK_BIN/kwok" ] || need+=(kwok)
    [ ${#need[@]} -eq 0 ] && return 0
    command -v go > /dev/null || fail "Go is not installed (needed to build the control plane; see docs/kubernetes.md)"
    go_env
    mkdir -p "$STATE"
    local start=$SECONDS
    BUILD_DEADLINE=$((SECONDS + BUILD_TIMEOUT))
    log "building ${need[*]} (cold: many minutes on 2 cores; log: .kube/build.log)"
    echo "== $(date -u +%FT%TZ) building ${need[*]} with $(go version)" >> "$BUILD_LOG"
    local v=k8s.io/component-base/version
    local minor
    minor=$(echo "$K8S_VERSION" | cut -d. -f2)
    local ver="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
    if [ ! -x "$K8S_BIN/kube-scheduler" ] || [ ! -x "$K8S_BIN/etcd" ] || [ ! -x "$K8S_BIN/kube-apiserver" ] || [ ! -x "$K8S_BIN/kube-controller-manager" ]; then
        build_one "$HERE/gomod/k8s" "$K8S_BIN" "$ver" go.etcd.io/etcd/server/v3 \
            k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
            k8s.io/kubernetes/cmd/kube-scheduler || fail "building Kubernetes failed; see .kube/build.log"
        if [ -x "$K8S_BIN/server" ]; then mv "$K8S_BIN/server" "$K8S_BIN/etcd"; fi
    fi
    if [ ! -x "$KWOK_BIN/kwok" ]; then
        build_one "$HERE/gomod/kwok" "$KWOK_BIN" "-s -w" sigs.k8s.io/kwok/cmd/kwok \
            || fail "building kwok failed; see .kube/build.log"
    fi
    echo "== built in $((SECONDS - start))s" >> "$BUILD_LOG"
    log "built in $((SECONDS - start))s"
}

make_certs() {
    mkdir -p "$PKI"
    local o="openssl"
    (
        cd "$PKI"
        $o req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
            -keyout ca.key -out ca.crt -subj "/CN=tfdist-kube-ca" 2> /dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' > server.ext
        $o req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout apiserver.key \
            -out apiserver.csr -subj "/CN=kube-apiserver" 2> /dev/null
        $o x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
            -extfile server.ext -out apiserver.crt 2> /dev/null
        printf 'extendedKeyUsage=clientAuth\n' > client.ext
        $o req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout admin.key \
            -out admin.csr -subj "/O=system:masters/CN=tfdist-admin" 2> /dev/null
        $o x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
            -extfile client.ext -out admin.crt 2> /dev/null
        $o genrsa -out sa.key 2048 2> /dev/null
        $o rsa -in sa.key -pubout -out sa.pub 2> /dev/null
    )
}

write_kubeconfig() {  # write_kubeconfig PATH SERVER
    local b64="base64 -w0"
    cat > "$1" << EOF
apiVersion: v1
kind: Config
clusters:
- name: tfdist-kube
  cluster:
    server: $2
    certificate-authority-data: $($b64 < "$PKI/ca.crt")
users:
- name: tfdist-admin
  user:
    client-certificate-data: $($b64 < "$PKI/admin.crt")
    client-key-data: $($b64 < "$PKI/admin.key")
contexts:
- name: tfdist-kube
  context: {cluster: tfdist-kube, user: tfdist-admin}
current-context: tfdist-kube
EOF
}

api() {  # api METHOD PATH [JSON]: the API as the admin; prints the body
    local args=(-sS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" -X "$1")
    [ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' --data "$3")
    curl "${args[@]}" "$(cat "$RUN/server")$2"
}

running() { alive kube-apiserver; }

nodes_ready() {
    api GET /api/v1/nodes | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
ready = [n for n in items if any(c["type"] == "Ready" and c["status"] == "True"
                                 for c in n.get("status", {}).get("conditions", []))]
sys.exit(0 if len(ready) >= int(sys.argv[1]) else 1)' "${#NODES[@]}"
}

# -- the JobSet controller (optional: its failure skips only the JobSet tests) -----------

jobset_skip() {  # jobset_skip REASON: say why, stop the manager and its webhooks
    log "JobSet controller unavailable: $*"
    mkdir -p "$STATE"
    echo "$*" > "$JOBSET_UNAVAILABLE"
    if [ -f "$RUN/server" ]; then
        api DELETE /apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/tfdist-jobset > /dev/null 2>&1
        api DELETE /apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/tfdist-jobset > /dev/null 2>&1
    fi
    local file="$RUN/pids/jobset"
    if [ -f "$file" ]; then
        kill "$(cat "$file")" 2> /dev/null
        rm -f "$file"
    fi
    return 1
}

build_jobset() {  # the manager, and the CRD of the same version next to it
    rm -f "$JOBSET_UNAVAILABLE"
    [ -x "$JOBSET_BIN/jobset" ] && [ -f "$JOBSET_BIN/crd.yaml" ] && return 0
    command -v go > /dev/null || { jobset_skip "Go is not installed (needed to build it)"; return 1; }
    go_env
    mkdir -p "$STATE"
    local start=$SECONDS
    log "building the JobSet controller $JOBSET_VERSION (log: .kube/build.log)"
    echo "== $(date -u +%FT%TZ) building jobset $JOBSET_VERSION with $(go version)" >> "$BUILD_LOG"
    BUILD_DEADLINE=$((SECONDS + JOBSET_BUILD_TIMEOUT))
    build_one "$HERE/gomod/jobset" "$JOBSET_BIN" "-s -w" sigs.k8s.io/jobset \
        || { jobset_skip "building it failed or took over ${JOBSET_BUILD_TIMEOUT}s; see .kube/build.log"; return 1; }
    local dir
    if ! { dir=$(cd "$HERE/gomod/jobset" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset) \
        && install -m 0644 "$dir/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$JOBSET_BIN/crd.yaml"; }; then
        jobset_skip "its CRD is not in the module (see .kube/build.log)"
        return 1
    fi
    echo "== jobset built in $((SECONDS - start))s" >> "$BUILD_LOG"
    log "JobSet controller built in $((SECONDS - start))s"
}

make_jobset_certs() {  # the webhook server's certificate, for 127.0.0.1, signed by the test CA
    mkdir -p "$PKI/jobset"
    (
        cd "$PKI"
        printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > jobset.ext
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout jobset/tls.key \
            -out jobset.csr -subj "/CN=jobset-webhook" 2> /dev/null
        openssl x509 -req -in jobset.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
            -extfile jobset.ext -out jobset/tls.crt 2> /dev/null
    )
}

jobset_webhooks() {  # jobset_webhooks PORT: the controller's webhooks (its config/components/webhook)
    # at https://127.0.0.1:PORT, there being no in-cluster Service; pods only with a JobSet label
    local url="https://127.0.0.1:$1" ca
    ca=$(base64 -w0 < "$PKI/ca.crt")
    local common="\"admissionReviewVersions\":[\"v1\"],\"failurePolicy\":\"Fail\",\"sideEffects\":\"None\""
    local jobsets="\"rules\":[{\"apiGroups\":[\"jobset.x-k8s.io\"],\"apiVersions\":[\"v1alpha2\"],\"resources\":[\"jobsets\"],"
    local pods="\"objectSelector\":{\"matchExpressions\":[{\"key\":\"jobset.sigs.k8s.io/jobset-name\",\"operator\":\"Exists\"}]},
        \"rules\":[{\"apiGroups\":[\"\"],\"apiVersions\":[\"v1\"],\"resources\":[\"pods\"],\"operations\":[\"CREATE\"]}]"
    api POST /apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations "{
        \"apiVersion\":\"admissionregistration.k8s.io/v1\",\"kind\":\"MutatingWebhookConfiguration\",
        \"metadata\":{\"name\":\"tfdist-jobset\"},\"webhooks\":[
        {\"name\":\"mjobset.kb.io\",$common,$jobsets\"operations\":[\"CREATE\"]}],
         \"clientConfig\":{\"url\":\"$url/mutate-jobset-x-k8s-io-v1alpha2-jobset\",\"caBundle\":\"$ca\"}},
        {\"name\":\"mpod.kb.io\",$common,$pods,
         \"clientConfig\":{\"url\":\"$url/mutate--v1-pod\",\"caBundle\":\"$ca\"}}]}" | grep '"uid"' > /dev/null || return 1
    api POST /apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations "{
        \"apiVersion\":\"admissionregistration.k8s.io/v1\",\"kind\":\"ValidatingWebhookConfiguration\",
        \"metadata\":{\"name\":\"tfdist-jobset\"},\"webhooks\":[
        {\"name\":\"vjobset.kb.io\",$common,$jobsets\"operations\":[\"CREATE\",\"UPDATE\"]}],
         \"clientConfig\":{\"url\":\"$url/validate-jobset-x-k8s-io-v1alpha2-jobset\",\"caBundle\":\"$ca\"}},
        {\"name\":\"vpod.kb.io\",$common,$pods,
         \"clientConfig\":{\"url\":\"$url/validate--v1-pod\",\"caBundle\":\"$ca\"}}]}" | grep '"uid"' > /dev/null
}

crd_established() {  # crd_established NAME
    api GET "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/$1" | python3 -c '
import json, sys
conditions = json.load(sys.stdin).get("status", {}).get("conditions", [])
sys.exit(0 if any(c["type"] == "Established" and c["status"] == "True" for c in conditions) else 1)'
}

jobset_wait() {  # jobset_wait SECONDS WHAT COMMAND...: like wait_for, but a failure skips only JobSet
    local limit=$1 what=$2
    shift 2
    local until=$((SECONDS + limit))
    until "$@" > /dev/null 2>&1; do
        [ $SECONDS -lt $until ] || { jobset_skip "$what not ready after ${limit}s; see .kube/logs/jobset.log"; return 1; }
        if [ -f "$RUN/pids/jobset" ] && ! kill -0 "$(cat "$RUN/pids/jobset")" 2> /dev/null; then
            jobset_skip "it exited; see .kube/logs/jobset.log"
            return 1
        fi
        sleep 0.5
    done
}

start_jobset() {  # after the core is up: the CRD, the manager, then its webhooks
    [ -x "$JOBSET_BIN/jobset" ] || return 1  # build_jobset said why
    make_jobset_certs
    local webhook_port health_port
    webhook_port=$(free_port) health_port=$(free_port)
    # its own certificate management is off (it would write a Secret for an in-cluster
    # Service); metrics off, health on loopback
    cat > "$RUN/jobset-config.yaml" << EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {host: 127.0.0.1, port: $webhook_port, certDir: $PKI/jobset}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "127.0.0.1:$health_port"}
EOF
    # the CRD of the controller's own version, without its conversion-webhook patch (one API
    # version: nothing to convert)
    curl -sS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" -X POST \
        -H 'Content-Type: application/yaml' --data-binary "@$JOBSET_BIN/crd.yaml" \
        "$(cat "$RUN/server")/apis/apiextensions.k8s.io/v1/customresourcedefinitions" | grep '"uid"' > /dev/null \
        || { jobset_skip "the API server refused its CRD"; return 1; }
    jobset_wait 60 "its CRD" crd_established jobsets.jobset.x-k8s.io || return 1
    start jobset "$JOBSET_BIN/jobset" --kubeconfig "$RUN/admin.kubeconfig" \
        --config "$RUN/jobset-config.yaml" --metrics-bind-address 0
    jobset_wait 120 "the JobSet controller" curl -sf "http://127.0.0.1:$health_port/readyz" || return 1
    jobset_webhooks "$webhook_port" || { jobset_skip "the API server refused its webhook configurations"; return 1; }
    log "JobSet controller $JOBSET_VERSION up (webhooks on 127.0.0.1:$webhook_port)"
}

# -- kwok's kubelet-like server: pod logs (the API server's pods/log calls land here) -----

kwok_server() {  # kwok_server PORT: its certificate; prints kwok's arguments, one a line
    local port=$1
    (
        cd "$PKI"
        printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > kwok.ext
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout kwok.key \
            -out kwok.csr -subj "/CN=kwok-kubelet" 2> /dev/null
        openssl x509 -req -in kwok.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
            -extfile kwok.ext -out kwok.crt 2> /dev/null
    )
    printf '%s\n' --node-port "$port" --server-address "127.0.0.1:$port" \
        --tls-cert-file "$PKI/kwok.crt" --tls-private-key-file "$PKI/kwok.key"
}

kwok_logs() {  # kwok's Logs CRD (from its module): a test creates a Logs object naming a
    # pod and a file in the CRI log format, and kwok serves that file as the pod's log;
    # prints kwok's argument to watch them (nothing when the CRD is not at hand)
    local crd="$CACHE/gomod/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/crd/bases/kwok.x-k8s.io_logs.yaml"
    [ -f "$crd" ] || return 0
    curl -sS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" -X POST \
        -H 'Content-Type: application/yaml' --data-binary "@$crd" \
        "$(cat "$RUN/server")/apis/apiextensions.k8s.io/v1/customresourcedefinitions" | grep '"uid"' > /dev/null || return 0
    for _ in $(seq 60); do
        if crd_established logs.kwok.x-k8s.io > /dev/null 2>&1; then
            printf '%s\n' --enable-crds Logs
            return 0
        fi
        sleep 0.5
    done
}

cmd_up() {
    if running; then
        log "already running (.kube/config)"
        return 0
    fi
    cmd_down > /dev/null 2>&1 || true
    rm -f "$UNAVAILABLE"
    command -v openssl > /dev/null || fail "openssl is not installed (needed for the test certificates)"
    command -v curl > /dev/null || fail "curl is not installed"
    cmd_build
    local begin=$SECONDS
    mkdir -p "$RUN/pids"; rm -rf "$LOGS"; mkdir -p "$LOGS"
    STARTING=1
    make_certs
    local etcd_port peer_port api_port
    etcd_port=$(free_port) peer_port=$(free_port) api_port=$(free_port)
    local kwok_server_args
    mapfile -t kwok_server_args < <(kwok_server "$(free_port)")
    echo "https://127.0.0.1:$api_port" > "$RUN/server"
    write_kubeconfig "$RUN/admin.kubeconfig" "https://127.0.0.1:$api_port"

    start etcd "$K8S_BIN/etcd" --name tfdist --data-dir "$RUN/etcd" --unsafe-no-fsync \
        --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-cluster "tfdist=http://127.0.0.1:$peer_port" --log-level warn
    wait_for 60 etcd curl -sf "http://127.0.0.1:$etcd_port/health"

    start kube-apiserver "$K8S_BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
        --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
        --client-ca-file "$PKI/ca.crt" --cert-dir "$PKI" \
        --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
        --service-cluster-ip-range 10.96.0.0/16 --authorization-mode RBAC --profiling=false \
        --kubelet-preferred-address-types InternalIP --endpoint-reconciler-type none \
        --kubelet-certificate-authority "$PKI/ca.crt" \
        --kubelet-client-certificate "$PKI/admin.crt" --kubelet-client-key "$PKI/admin.key"
    wait_for 120 kube-apiserver api GET /readyz --fail

    start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
        --kubeconfig "$RUN/admin.kubeconfig" --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 \
        --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
        --cluster-cidr 10.244.0.0/16 --profiling=false
    # client QPS/burst raised from 50/100 (binding 1,000 pods took 20 s): see kube/scheduler.yaml
    sed "s|@KUBECONFIG@|$RUN/admin.kubeconfig|" "$HERE/scheduler.yaml" > "$RUN/scheduler.yaml"
    start kube-scheduler "$K8S_BIN/kube-scheduler" --config "$RUN/scheduler.yaml" \
        --bind-address 127.0.0.1 --secure-port 0
    # Node addresses are 127.0.0.1 (and the API server uses only InternalIP), so any call it
    # makes to a "kubelet" (logs, exec) stays on this machine; pod IPs are records nothing dials.
    local kwok_logs_args
    mapfile -t kwok_logs_args < <(kwok_logs)
    start kwok "$KWOK_BIN/kwok" --kubeconfig "$RUN/admin.kubeconfig" --config "$HERE/stages.yaml" \
        --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
        --node-lease-duration-seconds 40 --cidr 10.244.0.0/16 --node-ip 127.0.0.1 \
        "${kwok_server_args[@]}" "${kwok_logs_args[@]}"

    for node in "${NODES[@]}"; do
        api POST /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$node\",
            \"annotations\":{\"kwok.x-k8s.io/node\":\"fake\"},
            \"labels\":{\"kubernetes.io/hostname\":\"$node\",\"kubernetes.io/os\":\"linux\",\"type\":\"kwok\"}}}" > /dev/null
    done
    wait_for 120 "the fake nodes" nodes_ready
    wait_for 60 "the default service account" api GET /api/v1/namespaces/default/serviceaccounts/default --fail
    start_jobset || true
    cp "$RUN/admin.kubeconfig" "$CONFIG"
    log "up in $((SECONDS - begin))s: $(cat "$RUN/server"), kubeconfig .kube/config, nodes ${NODES[*]}"
    # the real node (optional: when it cannot start, .kube/node-unavailable says why and only
    # the real-pod tests skip)
    TFDIST_KUBE_NODE_BUILT=1 "$HERE/node.sh" up || true  # built (or not) by cmd_build above
}

cmd_down() {
    "$HERE/node.sh" down || true
    local pids=() pid
    for name in jobset kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
        if pid=$(term_own "$RUN/pids/$name" "$name"); then pids+=("$pid"); fi
    done
    kill_after 10 "${pids[@]}"
    rm -rf "$RUN" "$CONFIG"
    log "down"
}

cmd_status() {
    if running; then echo "running: $(cat "$RUN/server") (.kube/config)"; else echo "not running"; exit 1; fi
}

case "${1:-}" in
    build) cmd_build ;;
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    crds) cmd_crds ;;
    *) echo "usage: kube/kube.sh build|up|down|status|crds" >&2; exit 2 ;;
esac
