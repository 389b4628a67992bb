#!/usr/bin/env bash
# One real node beside kwok's fake ones, for the real-pod tests: Debian's containerd and runc,
# a kubelet built from the same k8s.io/kubernetes module as the control plane, CoreDNS built
# with only the plugins it needs (kube/gomod/coredns), a pod network on a bridge this script
# makes (a documentation /24 of RFC 5737 that nothing on the machine uses, chosen by
# kube/pod_network.py and written to .kube/pod-network: no route out, no forwarding), and the image
# localhost/tfdist:dev loaded without a registry (kube/image.py). kube/kube.sh calls it.
#
#   kube/node.sh build   build the kubelet and CoreDNS when missing (cached, bounded)
#   kube/node.sh up      start it (the control plane must be up); never fails `kube.sh up`:
#                        when it cannot build or start, .kube/node-unavailable says why
#   kube/node.sh down    stop it, remove what it made, restore the kernel settings the kubelet
#                        changed; also cleans what a killed run left behind
#
# The kubelet and containerd write to fixed places of the machine (/var/log/pods, network
# namespaces in /run/netns, cgroups, three sysctls), so there is one such node per machine:
# its own state is in /var/lib/tfdist-node and /run/tfdist-node, whatever checkout runs it; a
# second checkout's `up` leaves a live node of another alone and says so.
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$HERE/gomod/k8s/go.mod")
COREDNS_VERSION=$(awk '$2 == "github.com/coredns/coredns" {print $3}' "$HERE/gomod/coredns/go.mod")
CACHE="${TFDIST_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfdist-kube}"
K8S_BIN="$CACHE/k8s-$K8S_VERSION/bin"
COREDNS_BIN="$CACHE/coredns-$COREDNS_VERSION/bin"
STATE="$REPO/.kube"
RUN="$STATE/run"
PKI="$RUN/pki"
LOGS="$STATE/logs"
BUILD_LOG="$STATE/build.log"
UNAVAILABLE="$STATE/node-unavailable"
# Machine-wide (see above); removed by `down`.
LIB=/var/lib/tfdist-node
NRUN=/run/tfdist-node
SAVED="$LIB/sysctl.saved"      # the kernel settings before the kubelet's first start
MADE="$LIB/made"               # fixed paths this node created (removed by `down`)
NODE=tfdist-node-0
BRIDGE=tfdist-br0
POD_NETWORK="$STATE/pod-network"  # the /24 `up` chose (kube/pod_network.py); the host bed uses 198.18.0.0/15
PREFIX=                        # its first three octets, and the node's address on it: set by `up`
NODE_IP=
#: The label and taint of the real node: only pods that ask for it land on it (kwok's fake
#: nodes keep every other test's pods).
NODE_LABEL=tfdist.io/real-node
SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops)
# Cold, the kubelet reuses most of the control plane's build cache (about 1-2 min) and CoreDNS
# takes a few minutes; past this budget, give up (CI has 90 minutes in all).
BUILD_TIMEOUT="${TFDIST_KUBE_NODE_BUILD_TIMEOUT:-900}"
CLUSTER=node

log() { echo "$CLUSTER: $*" >&2; }

skip() {  # skip WHY: say why (the real-pod tests print it), undo a half-started `up`
    log "unavailable: $*"
    mkdir -p "$STATE"
    echo "$*" > "$UNAVAILABLE"
    cmd_down > /dev/null 2>&1
    exit 1
}

go_env() {
    export GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gobuild" GOFLAGS="-mod=readonly -trimpath -buildvcs=false"
    export GOTOOLCHAIN=local CGO_ENABLED=0
}

build_one() {  # build_one DEADLINE MODULE_DIR OUT_DIR LDFLAGS PACKAGE...
    local deadline=$1 dir=$2 out=$3 ldflags=$4
    shift 4
    local left=$((deadline - SECONDS))
    [ "$left" -gt 0 ] || { echo "== no time left for $dir" >> "$BUILD_LOG"; return 1; }
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    (cd "$dir" && timeout "$left" nice -n 10 go build -ldflags "$ldflags" -o "$out.tmp/" "$@") \
        >> "$BUILD_LOG" 2>&1 || { echo "== go build failed or ran out of its ${left}s" >> "$BUILD_LOG"; return 1; }
    mkdir -p "$out" && mv "$out.tmp"/* "$out/" && rmdir "$out.tmp"
}

cmd_build() {  # returns 1 (having said why in $UNAVAILABLE) when a binary cannot be had
    [ -x "$K8S_BIN/kubelet" ] && [ -x "$COREDNS_BIN/coredns" ] && return 0
    command -v go > /dev/null || { echo "Go is not installed (it builds the kubelet and CoreDNS)" > "$UNAVAILABLE"; return 1; }
    if [ "$BUILD_TIMEOUT" -le 0 ]; then
        echo "the kubelet and CoreDNS are not built: no build time left after the control plane's (an hour in all)" > "$UNAVAILABLE"
        return 1
    fi
    go_env
    mkdir -p "$STATE"
    local start=$SECONDS deadline=$((SECONDS + BUILD_TIMEOUT))
    log "building the kubelet and CoreDNS (log: .kube/build.log)"
    echo "== $(date -u +%FT%TZ) building the kubelet $K8S_VERSION, CoreDNS $COREDNS_VERSION" >> "$BUILD_LOG"
    if [ ! -x "$K8S_BIN/kubelet" ]; then
        local v=k8s.io/component-base/version minor
        minor=$(echo "$K8S_VERSION" | cut -d. -f2)
        build_one "$deadline" "$HERE/gomod/k8s" "$K8S_BIN.kubelet" \
            "-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
            k8s.io/kubernetes/cmd/kubelet \
            || { echo "building the kubelet failed or took over ${BUILD_TIMEOUT}s; see .kube/build.log" > "$UNAVAILABLE"; return 1; }
        mv "$K8S_BIN.kubelet/kubelet" "$K8S_BIN/kubelet" && rmdir "$K8S_BIN.kubelet"
    fi
    if [ ! -x "$COREDNS_BIN/coredns" ]; then
        build_one "$deadline" "$HERE/gomod/coredns" "$COREDNS_BIN" "-s -w" . \
            || { echo "building CoreDNS failed or took over ${BUILD_TIMEOUT}s; see .kube/build.log" > "$UNAVAILABLE"; return 1; }
    fi
    echo "== node binaries built in $((SECONDS - start))s" >> "$BUILD_LOG"
    log "built in $((SECONDS - start))s"
}

start() {  # start NAME COMMAND ARGS...: in its own session, pid in $RUN/pids/NAME
    local name=$1
    shift
    setsid "$@" > "$LOGS/$name.log" 2>&1 < /dev/null &
    echo $! > "$RUN/pids/$name"
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...
    local limit=$1 what=$2
    shift 2
    local until=$((SECONDS + limit))
    until "$@" > /dev/null 2>&1; do
        [ $SECONDS -lt $until ] || skip "$what not ready after ${limit}s; see .kube/logs/"
        for name in containerd kubelet coredns; do
            local file="$RUN/pids/$name"
            [ -f "$file" ] && ! kill -0 "$(cat "$file")" 2> /dev/null && skip "$name exited; see .kube/logs/$name.log"
        done
        sleep 0.5
    done
}

api() {  # api METHOD PATH [JSON]
    local args=(-sS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" -X "$1")
    [ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' --data "$3")
    curl "${args[@]}" "$(cat "$RUN/server")$2"
}

node_ready() {
    api GET "/api/v1/nodes/$NODE" | python3 -c '
import json, sys
conditions = json.load(sys.stdin).get("status", {}).get("conditions", [])
sys.exit(0 if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else 1)'
}

made() {  # made PATH: PATH did not exist and this node creates it; `down` removes it
    [ -e "$1" ] || echo "$1" >> "$MADE"
}

kubelet_certs() {  # its serving certificate, for the node's address, signed by the test CA
    (
        cd "$PKI" || exit 1
        printf 'subjectAltName=IP:%s,DNS:%s\nextendedKeyUsage=serverAuth\n' "$NODE_IP" "$NODE" > kubelet.ext
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout kubelet.key \
            -out kubelet.csr -subj "/CN=$NODE" 2> /dev/null
        openssl x509 -req -in kubelet.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
            -extfile kubelet.ext -out kubelet.crt 2> /dev/null
    )
}

write_configs() {
    mkdir -p "$LIB/cni/net.d" "$LIB/cni/ipam"
    # the CNI bridge plugin on the bridge made below: no isGateway (it would turn on IP
    # forwarding host-wide), no masquerade, no default route in pods: they reach each other
    # and the node's address (CoreDNS), nothing else
    cat > "$LIB/cni/net.d/10-tfdist.conflist" << EOF
{"cniVersion": "1.0.0", "name": "tfdist", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$LIB/cni/ipam",
            "ranges": [[{"subnet": "$PREFIX.0/24", "rangeStart": "$PREFIX.16", "rangeEnd": "$PREFIX.254"}]]}}]}
EOF
    cat > "$LIB/containerd.toml" << EOF
version = 2
root = "$LIB/containerd"
state = "$NRUN/containerd"
[grpc]
  address = "$NRUN/containerd.sock"
[ttrpc]
  address = "$NRUN/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$LIB/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/tfdist-pause:dev"
  # without CAP_SYS_RESOURCE runc cannot lower oom_score_adj below containerd's own
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$HERE/runc-host-mounts"
        Root = "$NRUN/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$LIB/cni/net.d"
EOF
    cat > "$LIB/kubelet.yaml" << EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
makeIPTablesUtilChains: false
failSwapOn: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$NRUN/containerd.sock
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
clusterDNS: [$NODE_IP]
clusterDomain: cluster.local
resolvConf: ""
registerWithTaints:
- {key: $NODE_LABEL, value: "true", effect: NoSchedule}
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
    cat > "$LIB/Corefile" << EOF
cluster.local:53 {
    bind $NODE_IP
    errors
    log
    kubernetes cluster.local {
        kubeconfig $RUN/admin.kubeconfig tfdist-kube
        pods verified
    }
}
EOF
}

other_owner() {  # prints the checkout whose node runs on this machine, when not this one
    [ -f "$LIB/owner" ] || return 1
    local owner pid
    { read -r owner; read -r pid; } < "$LIB/owner"
    [ "$owner" != "$REPO" ] && kill -0 "$pid" 2> /dev/null && grep -q kubelet "/proc/$pid/cmdline" 2> /dev/null \
        && echo "$owner"
}

cmd_up() {
    rm -f "$UNAVAILABLE"
    local other
    if other=$(other_owner); then
        log "unavailable: the machine's one real node runs for another checkout ($other)"
        echo "the machine's one real node runs for another checkout ($other); stop it there first" > "$UNAVAILABLE"
        exit 1
    fi
    [ -f "$RUN/server" ] || skip "the control plane is not up (kube/kube.sh up)"
    [ "$(id -u)" = 0 ] || skip "a real node needs root (containerd, network namespaces, a bridge)"
    local missing=()
    for tool in containerd ctr runc ip nsenter python3; do command -v "$tool" > /dev/null || missing+=("$tool"); done
    [ -x /usr/lib/cni/bridge ] || missing+=("/usr/lib/cni/bridge")
    [ ${#missing[@]} -eq 0 ] || skip "not installed: ${missing[*]} (Debian: containerd runc containernetworking-plugins iproute2)"
    if [ -n "${TFDIST_KUBE_NODE_BUILT:-}" ]; then  # kube.sh's build step tried: no second try
        if [ ! -x "$K8S_BIN/kubelet" ] || [ ! -x "$COREDNS_BIN/coredns" ]; then
            skip "the kubelet or CoreDNS could not be built; see .kube/build.log"
        fi
    else
        cmd_build || skip "$(cat "$UNAVAILABLE")"
    fi
    cmd_down > /dev/null 2>&1  # leftovers of a killed run
    local begin=$SECONDS
    mkdir -p "$LIB" "$NRUN" "$RUN/pids" "$LOGS"
    : > "$MADE"
    # fixed paths: the kubelet's device-plugin socket, the shims' sockets (containerd 1.6)
    for path in /var/log/pods /var/log/containers /var/lib/kubelet /run/containerd; do made "$path"; done
    local s
    for s in "${SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")"; done > "$SAVED" || skip "cannot read the kernel settings the kubelet changes"
    local network
    network=$(python3 "$HERE/pod_network.py" 2> "$LOGS/pod-network.log") || skip "$(cat "$LOGS/pod-network.log")"
    PREFIX=${network%.0/24}
    NODE_IP=$PREFIX.1
    echo "$network" > "$POD_NETWORK"
    ip link add "$BRIDGE" type bridge 2> /dev/null || skip "cannot make the bridge $BRIDGE (needs CAP_NET_ADMIN)"
    { ip addr add "$NODE_IP/24" dev "$BRIDGE" && ip link set "$BRIDGE" up; } || skip "cannot address the bridge $BRIDGE"
    write_configs
    kubelet_certs
    start containerd containerd --config "$LIB/containerd.toml"
    wait_for 60 containerd ctr --address "$NRUN/containerd.sock" version
    # the Python environment the pods use: the checkout's venv (make setup), else as told
    local python="${TFDIST_NODE_PYTHON:-$REPO/.venv/bin/python}"
    [ -x "$python" ] || skip "no Python environment for the pods: $python (make setup, or set TFDIST_NODE_PYTHON)"
    "$python" "$HERE/image.py" "$LIB/images" > "$LOGS/image.log" 2>&1 || skip "writing the image failed; see .kube/logs/image.log"
    for tar in "$LIB/images"/*.tar; do
        ctr --address "$NRUN/containerd.sock" -n k8s.io images import --no-unpack=false "$tar" >> "$LOGS/image.log" 2>&1 \
            || skip "ctr could not import $(basename "$tar"); see .kube/logs/image.log"
    done
    start coredns "$COREDNS_BIN/coredns" -conf "$LIB/Corefile"
    start kubelet "$K8S_BIN/kubelet" --config "$LIB/kubelet.yaml" --kubeconfig "$RUN/admin.kubeconfig" \
        --root-dir "$LIB/kubelet" --hostname-override "$NODE" --node-ip "$NODE_IP" \
        --node-labels "$NODE_LABEL=true"
    printf '%s\n%s\n' "$REPO" "$(cat "$RUN/pids/kubelet")" > "$LIB/owner"
    wait_for 120 "the real node $NODE" node_ready
    log "node $NODE Ready in $((SECONDS - begin))s (pods on $PREFIX.0/24, DNS on $NODE_IP:53)"
}

stop_pid() {  # stop_pid NAME PATTERN: SIGTERM our own daemon, SIGKILL after 10 s
    local file="$RUN/pids/$1" pid
    [ -f "$file" ] || return 0
    pid=$(cat "$file")
    rm -f "$file"
    grep -q "$2" "/proc/$pid/cmdline" 2> /dev/null || return 0
    kill "$pid" 2> /dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || return 0; sleep 0.2; done
    kill -9 "$pid" 2> /dev/null
}

cmd_down() {
    other_owner > /dev/null && return 0  # another checkout's live node: not this one's to stop
    [ -f "$RUN/server" ] && api DELETE "/api/v1/nodes/$NODE" > /dev/null 2>&1
    stop_pid kubelet kubelet
    stop_pid coredns coredns
    # every container and sandbox of the node, then containerd and the shims it started
    if [ -S "$NRUN/containerd.sock" ]; then
        local c=(ctr --address "$NRUN/containerd.sock" -n k8s.io)
        for id in $("${c[@]}" tasks ls -q 2> /dev/null); do "${c[@]}" tasks kill -s SIGKILL "$id" > /dev/null 2>&1; done
        sleep 1
        for id in $("${c[@]}" tasks ls -q 2> /dev/null); do "${c[@]}" tasks delete -f "$id" > /dev/null 2>&1; done
        for id in $("${c[@]}" containers ls -q 2> /dev/null); do "${c[@]}" containers delete "$id" > /dev/null 2>&1; done
    fi
    stop_pid containerd containerd
    local pid
    for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $NRUN/containerd.sock" 2> /dev/null); do
        kill -9 "$pid" 2> /dev/null
    done
    # a killed run: its containerd may still run without a pid file
    for pid in $(pgrep -f "containerd --config $LIB/containerd.toml" 2> /dev/null); do kill -9 "$pid" 2> /dev/null; done
    for pid in $(pgrep -f "kubelet --config $LIB/kubelet.yaml" 2> /dev/null); do kill -9 "$pid" 2> /dev/null; done
    for pid in $(pgrep -f "coredns -conf $LIB/Corefile" 2> /dev/null); do kill -9 "$pid" 2> /dev/null; done
    # the pods' network namespaces (containerd's CRI names them cni-<uuid>) and whatever is
    # mounted under the node's directories
    if [ -d "$LIB" ]; then
        for ns in /run/netns/cni-*; do [ -e "$ns" ] && ip netns delete "$(basename "$ns")" 2> /dev/null; done
        awk '{print $2}' /proc/mounts | grep -E "^($LIB|$NRUN)/" | sort -r | while read -r m; do umount -l "$m" 2> /dev/null; done
    fi
    ip link delete "$BRIDGE" 2> /dev/null
    rm -f "$POD_NETWORK"
    # what still runs in the kubelet's cgroups (a killed run's containers outlive their
    # shims), then the cgroups (kubepods), deepest first, in every hierarchy
    local left
    for _ in 1 2 3; do
        left=$(find /sys/fs/cgroup -path '*/kubepods*' -name cgroup.procs -exec cat {} + 2> /dev/null | sort -u)
        [ -n "$left" ] || break
        # shellcheck disable=SC2086
        kill -9 $left 2> /dev/null
        sleep 0.5
    done
    find /sys/fs/cgroup -depth -type d -path '*/kubepods*' -exec rmdir {} + 2> /dev/null
    if [ -f "$SAVED" ]; then
        local line
        while read -r line; do sysctl -q -w "$line" > /dev/null 2>&1; done < "$SAVED"
    fi
    if [ -f "$MADE" ]; then
        while read -r path; do rm -rf "$path"; done < "$MADE"
    fi
    rm -rf "$LIB" "$NRUN"
    return 0
}

cmd_status() {
    [ -f "$RUN/pids/kubelet" ] && kill -0 "$(cat "$RUN/pids/kubelet")" 2> /dev/null \
        && { echo "running: node $NODE"; return 0; }
    echo "not running"
    return 1
}

case "${1:-}" in
    build) cmd_build || { log "$(cat "$UNAVAILABLE")"; exit 1; } ;;
    up) cmd_up ;;
    down) cmd_down; rm -f "$UNAVAILABLE" ;;
    status) cmd_status ;;
    *) echo "usage: kube/node.sh build|up|down|status" >&2; exit 2 ;;
esac
