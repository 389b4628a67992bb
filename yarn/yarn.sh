#!/usr/bin/env bash
# A real YARN cluster on 127.0.0.1 for the tests: one ResourceManager (CapacityScheduler,
# queues root.default and root.tfdist) and two NodeManagers, from Hadoop's own jars; beside it
# a real HDFS of the same release: one NameNode and two DataNodes (replication 2, WebHDFS on).
# YARN's file system stays file:/// (one machine); HDFS is reached by its own URI,
# hdfs://127.0.0.1:PORT (in .yarn/hdfs-url; hdfs-site.xml in .yarn/conf names it too).
#
#   yarn/yarn.sh fetch   copy the pinned jars (yarn/pom.xml) from Maven Central into the cache
#                        (maven-dependency-plugin's copy-dependencies, by its full coordinates)
#   yarn/yarn.sh up      fetch what is missing, start, wait until both NodeManagers are RUNNING;
#                        writes the client configuration to .yarn/conf (HADOOP_CONF_DIR)
#   yarn/yarn.sh down    stop everything it started (daemons and any container left), remove state
#   yarn/yarn.sh status  one line: running or not
#   yarn/yarn.sh dfs ARGS...   `hdfs dfs ARGS` (Hadoop's FsShell), e.g. dfs -ls hdfs://127.0.0.1:PORT/
#   yarn/yarn.sh datanode stop|start dn-0|dn-1   stop one DataNode (SIGTERM, SIGKILL after 5 s)
#                        or start it again with its data (the DataNode-loss tests)
#   yarn/yarn.sh pmem-check on|off   YARN's physical-memory check on (counting from smaps:
#                        pmem_props) or off: rewrites the NodeManagers' yarn-site.xml and
#                        restarts only them (their containers end; the ResourceManager and
#                        HDFS stay up), waits until both have registered again; a NodeManager
#                        already running with the check so is left alone
#
# TFDIST_YARN_HDFS=0 leaves HDFS out (three JVMs fewer); the HDFS tests then skip, saying so.
#
# For daemons on hosts of their own (the multi-host test bed, tests/hosts/clusters.py), at
# Hadoop's default ports on each host's address:
#   yarn/yarn.sh conf DIR RM_HOST [NM_HOST NM_DIR]   write a configuration to DIR: a client's
#                        (or the ResourceManager's), or with NM_HOST a NodeManager's (its
#                        local and log dirs under NM_DIR)
#   yarn/yarn.sh hdfs-conf DIR NN_HOST [DN_HOST DN_DIR]   an HDFS configuration to DIR: a client's
#                        (or the NameNode's: its namespace in DIR/../name), or with DN_HOST a
#                        DataNode's (its blocks in DN_DIR)
#   yarn/yarn.sh daemon DIR resourcemanager|nodemanager|namenode|datanode   exec that daemon with
#                        DIR's configuration (a NameNode formats DIR/../name first when new)
#
# The jars and Maven's repository live outside the repository, in
# ${TFDIST_YARN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfdist-yarn} (the jars of each version of
# pom.xml in a directory of their own); a second `up` only starts.
# State (configuration, NodeManager dirs, logs, pid files) lives in .yarn/ (git-ignored).
# When `up` fails, .yarn/unavailable holds one line saying why; the tests print it when they skip.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
HADOOP_VERSION=$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' "$HERE/pom.xml")
# maven-dependency-plugin's version, as pom.xml pins it (the one place it is written): `fetch`
# calls the plugin by its full coordinates, so a cold Maven needs no plugin-group metadata to
# resolve the `dependency:` prefix (a cold CI once failed "No plugin found for prefix
# 'dependency'" while Maven Central was briefly unreachable)
DEPENDENCY_PLUGIN_VERSION=$(sed -n '/<artifactId>maven-dependency-plugin<\/artifactId>/{n;s:.*<version>\(.*\)</version>.*:\1:p;}' "$HERE/pom.xml")
CACHE="${TFDIST_YARN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfdist-yarn}"
# The jars of this pom.xml: a directory per version of the file, so a worktree whose pom adds a
# jar (or an older one without it) never swaps the jars under another's running daemons.
POM_KEY=$(sha256sum "$HERE/pom.xml" | cut -c1-12)
LIB="$CACHE/hadoop-$HADOOP_VERSION-$POM_KEY/lib"
STATE="$REPO/.yarn"
CONF="$STATE/conf"
RUN="$STATE/run"
LOGS="$STATE/logs"
UNAVAILABLE="$STATE/unavailable"
NODEMANAGERS=(nm-0 nm-1)
DATANODES=(dn-0 dn-1)
HDFS="${TFDIST_YARN_HDFS:-1}"
NM_MEMORY_MB="${TFDIST_YARN_NM_MEMORY_MB:-6144}"
NM_VCORES="${TFDIST_YARN_NM_VCORES:-4}"
# YARN's physical-memory check (a container over its memory is killed, exit status -104):
# off by default (`pmem-check on` turns it on for a running cluster; the YARN memory test does).
PMEM_CHECK="${TFDIST_YARN_PMEM_CHECK:-false}"
FETCH_TIMEOUT="${TFDIST_YARN_FETCH_TIMEOUT:-900}"
CLUSTER=yarn
# log, fail, free_port, start, alive, wait_for, term_own, kill_after
# shellcheck source=lib/cluster.sh
source "$REPO/lib/cluster.sh"

java_bin() {
    if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then echo "$JAVA_HOME/bin/java"; else command -v java; fi
}

fetch_error() {  # the cause in Maven's first error line (its last ": " part), or "no error line"
    local line
    line=$(sed 's/\x1b\[[0-9;]*m//g; s/ -> \[Help [0-9]*\]$//' "$STATE/fetch.log" 2> /dev/null \
        | grep -m1 '^\[ERROR\] .' | awk -F': ' '{print $NF}' | cut -c1-200)
    echo "${line:-no error line}"
}

cmd_fetch() {
    [ -f "$LIB/.complete" ] && return 0
    command -v mvn > /dev/null || fail "Maven is not installed (it fetches Hadoop's jars: apt-get install maven)"
    [ -n "$DEPENDENCY_PLUGIN_VERSION" ] || fail "yarn/pom.xml pins no maven-dependency-plugin version"
    mkdir -p "$STATE"
    local start=$SECONDS
    log "fetching Hadoop $HADOOP_VERSION's jars from Maven Central (log: .yarn/fetch.log)"
    rm -rf "$LIB.tmp"
    (cd "$HERE" && timeout "$FETCH_TIMEOUT" mvn -B -q -Dmaven.repo.local="$CACHE/m2" \
        "org.apache.maven.plugins:maven-dependency-plugin:$DEPENDENCY_PLUGIN_VERSION:copy-dependencies" \
        -DincludeScope=runtime -DoutputDirectory="$LIB.tmp") \
        > "$STATE/fetch.log" 2>&1 || fail "fetching the jars with Maven failed or took over ${FETCH_TIMEOUT}s ($(fetch_error)); see .yarn/fetch.log"
    rm -rf "$LIB" && mv "$LIB.tmp" "$LIB" && touch "$LIB/.complete"
    log "fetched $(find "$LIB" -name "*.jar" | wc -l) jars in $((SECONDS - start))s"
}

prop() { printf '  <property><name>%s</name><value>%s</value></property>\n' "$1" "$2"; }

write_common() {  # write_common DIR TMP: core-site.xml, capacity-scheduler.xml, log4j.properties
    local dir=$1 tmp=$2
    mkdir -p "$dir"
    {
        echo '<configuration>'
        prop fs.defaultFS file:///
        prop hadoop.tmp.dir "$tmp"
        echo '</configuration>'
    } > "$dir/core-site.xml"
    # Two queues: default and tfdist (the tests' spark.yarn.queue / yarn.queue). Every
    # application may be an AM here (one-machine cluster; on a real one this is the admin's).
    {
        echo '<configuration>'
        prop yarn.scheduler.capacity.root.queues default,tfdist
        prop yarn.scheduler.capacity.root.default.capacity 50
        prop yarn.scheduler.capacity.root.default.maximum-capacity 100
        prop yarn.scheduler.capacity.root.tfdist.capacity 50
        prop yarn.scheduler.capacity.root.tfdist.maximum-capacity 100
        # one user (the tests) may fill a queue to its maximum, not only to its capacity
        prop yarn.scheduler.capacity.root.default.user-limit-factor 2
        prop yarn.scheduler.capacity.root.tfdist.user-limit-factor 2
        prop yarn.scheduler.capacity.maximum-am-resource-percent 1.0
        prop yarn.scheduler.capacity.resource-calculator org.apache.hadoop.yarn.util.resource.DominantResourceCalculator
        prop yarn.scheduler.capacity.node-locality-delay -1
        # one container per node heartbeat: a job's containers spread over the NodeManagers
        # (as on a busy cluster) instead of filling the first node that asks
        prop yarn.scheduler.capacity.per-node-heartbeat.multiple-assignments-enabled false
        echo '</configuration>'
    } > "$dir/capacity-scheduler.xml"
    cat > "$dir/log4j.properties" << 'EOF'
hadoop.root.logger=INFO,console
log4j.rootLogger=${hadoop.root.logger}
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
EOF
}

# The ResourceManager's host and ports (rm scheduler tracker admin web) the files name:
# 127.0.0.1 and free ports for `up`, a host's address and Hadoop's defaults for `conf`.
RM_HOST=127.0.0.1
declare -A RM_PORTS=()
# The configuration directory the ApplicationMasters' classpath names (yarn.application.classpath).
APP_CONF="$CONF"

# The physical-memory check's properties: the check, and with it on, what it counts. Hadoop's
# default sums the RSS of the container's processes, so the shared libraries that a task and
# its warm spare both map (TensorFlow's) count twice: a 1 GB container of a warm-spare task
# peaked at 1216 MB that way (798 MB PSS, 422 MB anonymous) and was killed. Counting from
# smaps counts each mapping's anonymous memory (what the container's end would free); Hadoop
# 3.4.2 reads that flag only when the process-tree class is named (else it builds the tree
# without the configuration: the same container was killed at 1.0 GB with the flag alone).
# Only with the check on: reading every process's smaps each second costs the NodeManager CPU.
PMEM_NAMES="pmem-check-enabled|container-monitor.procfs-tree.smaps-based-rss.enabled|container-monitor.process-tree.class"
pmem_pattern() { echo "<name>yarn\.nodemanager\.($PMEM_NAMES)</name>"; }
pmem_lines() { grep -E "$(pmem_pattern)" "$1" || true; }  # pmem_lines SITE: what the file has of them
pmem_props() {  # pmem_props true|false
    prop yarn.nodemanager.pmem-check-enabled "$1"
    if [ "$1" = true ]; then
        prop yarn.nodemanager.container-monitor.procfs-tree.smaps-based-rss.enabled true
        prop yarn.nodemanager.container-monitor.process-tree.class org.apache.hadoop.yarn.util.ProcfsBasedProcessTree
    fi
}

write_yarn_site() {  # write_yarn_site DIR [NM-HOST NM-DIR NM-PORT LOCALIZER-PORT WEB-PORT]
    local dir=$1
    local rm_host=$RM_HOST
    {
        echo '<configuration>'
        prop yarn.resourcemanager.hostname "$rm_host"
        prop yarn.resourcemanager.bind-host "$rm_host"
        prop yarn.resourcemanager.address "$rm_host:${RM_PORTS[rm]}"
        prop yarn.resourcemanager.scheduler.address "$rm_host:${RM_PORTS[scheduler]}"
        prop yarn.resourcemanager.resource-tracker.address "$rm_host:${RM_PORTS[tracker]}"
        prop yarn.resourcemanager.admin.address "$rm_host:${RM_PORTS[admin]}"
        prop yarn.resourcemanager.webapp.address "$rm_host:${RM_PORTS[web]}"
        prop yarn.resourcemanager.scheduler.class org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler
        prop yarn.scheduler.minimum-allocation-mb 128
        prop yarn.scheduler.maximum-allocation-mb 4096
        prop yarn.scheduler.maximum-allocation-vcores "$NM_VCORES"
        prop yarn.resourcemanager.nodemanagers.heartbeat-interval-ms 250
        # a NodeManager silent this long is LOST (default 10 min): the lost-node test kills one
        prop yarn.nm.liveness-monitor.expiry-interval-ms 15000
        prop yarn.resourcemanager.am.max-attempts 2
        prop yarn.timeline-service.enabled false
        prop yarn.log-aggregation-enable false
        prop yarn.nodemanager.vmem-check-enabled false
        pmem_props "$PMEM_CHECK"
        # Hadoop 3.4 skips the check while "strict" (cgroup) memory enforcement is on, its
        # default, even without the cgroup memory handler: off, so the check runs
        prop yarn.nodemanager.resource.memory.enforced false
        prop yarn.nodemanager.container-monitor.interval-ms 1000
        prop yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage 99
        prop yarn.nodemanager.resource.memory-mb "$NM_MEMORY_MB"
        prop yarn.nodemanager.resource.cpu-vcores "$NM_VCORES"
        prop yarn.nodemanager.aux-services ""
        prop yarn.nodemanager.sleep-delay-before-sigkill.ms 2000
        prop yarn.nodemanager.env-whitelist JAVA_HOME,PATH,LANG,TZ
        prop yarn.application.classpath "$APP_CONF,$LIB/*"
        if [ $# -ge 2 ]; then
            local nm_host=$2 nm_dir=$3
            prop yarn.nodemanager.hostname "$nm_host"
            prop yarn.nodemanager.bind-host "$nm_host"
            prop yarn.nodemanager.address "$nm_host:$4"
            prop yarn.nodemanager.localizer.address "$nm_host:$5"
            prop yarn.nodemanager.webapp.address "$nm_host:$6"
            prop yarn.nodemanager.local-dirs "$nm_dir/local"
            prop yarn.nodemanager.log-dirs "$nm_dir/logs"
            prop yarn.nodemanager.recovery.enabled false
        fi
        echo '</configuration>'
    } > "$dir/yarn-site.xml"
}

java_cmd() {  # java_cmd CONF-DIR CLASS LOG-DIR MARK: JAVA_CMD, the argv of a Hadoop daemon
    local conf=$1 class=$2 logs=$3 mark=$4
    # Hadoop 3.4's web apps (Guice) reflect into java.lang; Java 17 allows it only when opened
    JAVA_CMD=("$(java_bin)" -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1
        --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.util=ALL-UNNAMED
        --add-opens java.base/java.lang.reflect=ALL-UNNAMED --add-opens java.base/java.io=ALL-UNNAMED
        -Dhadoop.log.dir="$logs" -Dyarn.log.dir="$logs" -Dtfdist.yarn.state="$mark"
        -cp "$conf:$LIB/*${EXTRA_CP:+:$EXTRA_CP}" "$class")
}

start_java() {  # start_java NAME CONF-DIR CLASS: a Hadoop daemon (start: its session, pid file)
    java_cmd "$2" "$3" "$LOGS" "$STATE"
    start "$1" "${JAVA_CMD[@]}"
}

rm_url() { echo "http://127.0.0.1:$(cat "$RUN/ports/web")"; }

nodes_running() {
    curl -sf "$(rm_url)/ws/v1/cluster/nodes?states=RUNNING" | python3 -c '
import json, sys
nodes = (json.load(sys.stdin).get("nodes") or {}).get("node") or []
sys.exit(0 if len(nodes) >= int(sys.argv[1]) else 1)' "${#NODEMANAGERS[@]}"
}

running() { alive resourcemanager; }

# HDFS: a NameNode and the DataNodes, their ports (free ones of 127.0.0.1, like YARN's: no
# collision) in $RUN/ports, their data in $RUN/hdfs (formatted by every `up`, gone with `down`).
# Heartbeats every second and a DataNode declared dead 20 s after its last one (Hadoop's
# default: 10.5 min), and one silent for 3 s is stale and avoided for reads and writes, so the
# tests see a lost DataNode in seconds.
# The NameNode's host and ports, and where it keeps its namespace: 127.0.0.1, free ports and
# $RUN/hdfs/name for `up`; a host's address, Hadoop's defaults and DIR/../name for `hdfs-conf`.
NN_HOST=127.0.0.1
NN_RPC=""
NN_HTTP=""
NN_DIR="$RUN/hdfs/name"

write_hdfs_site() {  # write_hdfs_site DIR [DN-NAME]: the client's and NameNode's, or a DataNode's
    local dir=$1
    {
        echo '<configuration>'
        prop dfs.namenode.rpc-address "$NN_HOST:${NN_RPC:-$(cat "$RUN/ports/nn-rpc")}"
        prop dfs.namenode.http-address "$NN_HOST:${NN_HTTP:-$(cat "$RUN/ports/nn-http")}"
        prop dfs.namenode.name.dir "$NN_DIR"
        prop dfs.replication 2
        prop dfs.webhdfs.enabled true
        prop dfs.namenode.safemode.extension 0
        prop dfs.namenode.datanode.registration.ip-hostname-check false
        prop dfs.heartbeat.interval 1
        prop dfs.namenode.heartbeat.recheck-interval 5000
        prop dfs.namenode.stale.datanode.interval 3000
        prop dfs.namenode.avoid.read.stale.datanode true
        prop dfs.namenode.avoid.write.stale.datanode true
        if [ $# -eq 4 ]; then  # a DataNode of its own host (hdfs-conf): Hadoop's default ports
            prop dfs.datanode.data.dir "$4"
            prop dfs.datanode.hostname "$3"
            prop dfs.datanode.address "$3:9866"
            prop dfs.datanode.http.address "$3:9864"
            prop dfs.datanode.ipc.address "$3:9867"
            prop dfs.datanode.du.reserved 0
        elif [ $# -ge 2 ]; then
            local dn=$2
            prop dfs.datanode.data.dir "$RUN/hdfs/$dn"
            prop dfs.datanode.hostname 127.0.0.1
            prop dfs.datanode.address "127.0.0.1:$(cat "$RUN/ports/$dn-xfer")"
            prop dfs.datanode.http.address "127.0.0.1:$(cat "$RUN/ports/$dn-http")"
            prop dfs.datanode.ipc.address "127.0.0.1:$(cat "$RUN/ports/$dn-ipc")"
            prop dfs.datanode.du.reserved 0
        fi
        echo '</configuration>'
    } > "$dir/hdfs-site.xml"
}

nn_url() { echo "http://127.0.0.1:$(cat "$RUN/ports/nn-http")"; }

hdfs_ready() {  # the NameNode out of safe mode with every DataNode live
    curl -sf "$(nn_url)/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState" | python3 -c '
import json, sys
bean = (json.load(sys.stdin).get("beans") or [{}])[0]
sys.exit(0 if bean.get("NumLiveDataNodes", 0) >= int(sys.argv[1]) and bean.get("FSState") == "Operational" else 1)
' "$1" && curl -sf "$(nn_url)/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo" | python3 -c '
import json, sys
sys.exit(0 if not (json.load(sys.stdin).get("beans") or [{}])[0].get("Safemode") else 1)'
}

start_datanode() {  # start_datanode NAME: with the configuration and data `up` gave it
    EXTRA_CP="$RUN/hdfs/web"
    start_java "$1" "$RUN/$1/conf" org.apache.hadoop.hdfs.server.datanode.DataNode
}

start_hdfs() {
    mkdir -p "$RUN/hdfs"
    # The daemons' HTTP servers look for webapps/hdfs (the NameNode's) and webapps/datanode on
    # the classpath; Hadoop's tarball has them, the Maven jars do not. WebHDFS and /jmx need
    # no file of theirs: an empty web app each (the NameNode's HTML UI is not served).
    local web
    for web in hdfs datanode; do
        mkdir -p "$RUN/hdfs/web/webapps/$web/WEB-INF"
        echo '<web-app/>' > "$RUN/hdfs/web/webapps/$web/WEB-INF/web.xml"
    done
    EXTRA_CP="$RUN/hdfs/web"
    for p in nn-rpc nn-http; do free_port > "$RUN/ports/$p"; done
    write_hdfs_site "$CONF"
    java_cmd "$CONF" org.apache.hadoop.hdfs.server.namenode.NameNode "$LOGS" "$STATE"
    "${JAVA_CMD[@]}" -format -nonInteractive -force > "$LOGS/namenode-format.log" 2>&1 \
        || fail "formatting the NameNode failed; see .yarn/logs/namenode-format.log"
    start_java namenode "$CONF" org.apache.hadoop.hdfs.server.namenode.NameNode
    for dn in "${DATANODES[@]}"; do
        for p in xfer http ipc; do free_port > "$RUN/ports/$dn-$p"; done
        write_common "$RUN/$dn/conf" "$RUN/tmp"
        write_hdfs_site "$RUN/$dn/conf" "$dn"
        start_datanode "$dn"
    done
    echo "hdfs://127.0.0.1:$(cat "$RUN/ports/nn-rpc")" > "$STATE/hdfs-url"
}

cmd_up() {
    if running; then
        log "already running (HADOOP_CONF_DIR=.yarn/conf)"
        return 0
    fi
    cmd_down > /dev/null 2>&1 || true
    rm -f "$UNAVAILABLE"
    [ -n "$(java_bin)" ] || fail "Java is not installed (YARN needs Java 17: apt-get install openjdk-17-jre-headless)"
    command -v curl > /dev/null || fail "curl is not installed"
    cmd_fetch
    local begin=$SECONDS
    STARTING=1
    mkdir -p "$RUN/pids" "$RUN/ports" "$RUN/tmp"
    rm -rf "$LOGS"
    mkdir -p "$LOGS"
    for p in rm scheduler tracker admin web; do
        free_port > "$RUN/ports/$p"
        RM_PORTS[$p]=$(cat "$RUN/ports/$p")
    done
    write_common "$CONF" "$RUN/tmp"
    write_yarn_site "$CONF"
    start_java resourcemanager "$CONF" org.apache.hadoop.yarn.server.resourcemanager.ResourceManager
    for nm in "${NODEMANAGERS[@]}"; do
        mkdir -p "$RUN/$nm/local" "$RUN/$nm/logs"
        write_common "$RUN/$nm/conf" "$RUN/tmp"
        write_yarn_site "$RUN/$nm/conf" 127.0.0.1 "$RUN/$nm" "$(free_port)" "$(free_port)" "$(free_port)"
        start_java "$nm" "$RUN/$nm/conf" org.apache.hadoop.yarn.server.nodemanager.NodeManager
    done
    [ "$HDFS" = 0 ] || start_hdfs
    wait_for 180 "the ResourceManager" curl -sf "$(rm_url)/ws/v1/cluster/info"
    wait_for 180 "the NodeManagers" nodes_running
    rm_url > "$STATE/rm-url"
    local hdfs="no HDFS (TFDIST_YARN_HDFS=0)"
    if [ "$HDFS" != 0 ]; then
        wait_for 180 "HDFS (the NameNode and ${#DATANODES[@]} DataNodes)" hdfs_ready "${#DATANODES[@]}"
        hdfs="HDFS $(cat "$STATE/hdfs-url") (WebHDFS $(nn_url), datanodes ${DATANODES[*]})"
    fi
    log "up in $((SECONDS - begin))s: $(rm_url), HADOOP_CONF_DIR=.yarn/conf, nodemanagers ${NODEMANAGERS[*]}; $hdfs"
}

containers() {  # pids of processes started by our NodeManagers (their env names our dirs;
    # LOG_DIR_PREFIX=$RUN/nm-0/: one NodeManager's)
    local pid
    for env in /proc/[0-9]*/environ; do
        pid=${env#/proc/}
        pid=${pid%/environ}
        { tr '\0' '\n' < "$env"; } 2> /dev/null | grep -q "^LOG_DIRS=${LOG_DIR_PREFIX:-$RUN/}" && echo "$pid"
    done
    return 0
}

cmd_down() {
    local pids=() pid
    for file in "$RUN"/pids/*; do
        if pid=$(term_own "$file" "tfdist.yarn.state=$STATE"); then pids+=("$pid"); fi
    done
    # A NodeManager (or a DataNode) may ignore SIGTERM for long: 5 s, then SIGKILL.
    kill_after 5 "${pids[@]}"
    # Containers run in sessions of their own and outlive a killed NodeManager.
    local left
    left=$(containers)
    if [ -n "$left" ]; then
        # shellcheck disable=SC2086
        kill -9 $left 2> /dev/null || true
    fi
    rm -rf "$RUN" "$CONF" "$STATE/rm-url" "$STATE/hdfs-url"
    log "down"
}

# Hadoop's default ports: each daemon of `conf` has a host (a network stack) of its own.
declare -A HOST_PORTS=([rm]=8032 [scheduler]=8030 [tracker]=8031 [admin]=8033 [web]=8088)

cmd_conf() {  # cmd_conf DIR RM_HOST [NM_HOST NM_DIR]
    [ $# -eq 2 ] || [ $# -eq 4 ] || { echo "usage: yarn/yarn.sh conf DIR RM_HOST [NM_HOST NM_DIR]" >&2; exit 2; }
    local dir=$1
    RM_HOST=$2
    for p in "${!HOST_PORTS[@]}"; do RM_PORTS[$p]=${HOST_PORTS[$p]}; done
    APP_CONF=$dir
    mkdir -p "$dir"
    write_common "$dir" "$dir/../tmp"
    if [ $# -eq 4 ]; then
        mkdir -p "$4/local" "$4/logs"
        write_yarn_site "$dir" "$3" "$4" 8041 8040 8042
    else
        write_yarn_site "$dir"
    fi
}

cmd_hdfs_conf() {  # cmd_hdfs_conf DIR NN_HOST [DN_HOST DN_DIR]
    [ $# -eq 2 ] || [ $# -eq 4 ] || { echo "usage: yarn/yarn.sh hdfs-conf DIR NN_HOST [DN_HOST DN_DIR]" >&2; exit 2; }
    local dir=$1
    NN_HOST=$2 NN_RPC=8020 NN_HTTP=9870
    mkdir -p "$dir"
    NN_DIR="$(cd "$dir" && pwd)/../name"
    write_common "$dir" "$dir/../tmp"
    if [ $# -eq 4 ]; then
        mkdir -p "$4"
        write_hdfs_site "$dir" datanode "$3" "$(cd "$4" && pwd)"
    else
        write_hdfs_site "$dir"
    fi
}

cmd_daemon() {  # cmd_daemon DIR resourcemanager|nodemanager|namenode|datanode: exec it (in this process)
    local class
    case "${2:-}" in
        resourcemanager) class=org.apache.hadoop.yarn.server.resourcemanager.ResourceManager ;;
        nodemanager) class=org.apache.hadoop.yarn.server.nodemanager.NodeManager ;;
        namenode) class=org.apache.hadoop.hdfs.server.namenode.NameNode ;;
        datanode) class=org.apache.hadoop.hdfs.server.datanode.DataNode ;;
        *) echo "usage: yarn/yarn.sh daemon DIR resourcemanager|nodemanager|namenode|datanode" >&2; exit 2 ;;
    esac
    [ -f "$LIB/.complete" ] || { log "Hadoop's jars are not fetched yet: yarn/yarn.sh fetch"; exit 1; }
    local dir
    dir=$(cd "$1" && pwd)
    mkdir -p "$dir/../logs"
    if [ "$2" = namenode ] || [ "$2" = datanode ]; then
        # the HTTP servers' empty web apps (see start_hdfs), beside the configuration
        local web
        for web in hdfs datanode; do
            mkdir -p "$dir/../web/webapps/$web/WEB-INF"
            echo '<web-app/>' > "$dir/../web/webapps/$web/WEB-INF/web.xml"
        done
        EXTRA_CP="$dir/../web"
    fi
    java_cmd "$dir" "$class" "$dir/../logs" "$dir"
    if [ "$2" = namenode ] && [ ! -d "$dir/../name/current" ]; then  # a new namespace
        "${JAVA_CMD[@]}" -format -nonInteractive -force > "$dir/../logs/namenode-format.log" 2>&1 \
            || { log "formatting the NameNode failed; see $dir/../logs/namenode-format.log"; exit 1; }
    fi
    exec "${JAVA_CMD[@]}"
}

cmd_dfs() {  # cmd_dfs ARGS...: `hdfs dfs ARGS` (Hadoop's FsShell) with the cluster's configuration
    [ -f "$CONF/hdfs-site.xml" ] || { log "no HDFS of this cluster is up (yarn/yarn.sh up)"; exit 1; }
    # the JVM's own defaults, as Hadoop's `hdfs` script runs it (not the daemons' small heap
    # and quick-start compiler, which would slow the client's checksumming)
    exec "$(java_bin)" -Dhadoop.root.logger=WARN,console -Dhadoop.log.dir="$LOGS" \
        -cp "$CONF:$LIB/*" org.apache.hadoop.fs.FsShell "$@"
}

cmd_datanode() {  # cmd_datanode stop|start NAME
    local name=${2:-}
    case " ${DATANODES[*]} " in *" $name "*) ;; *) echo "usage: yarn/yarn.sh datanode stop|start ${DATANODES[*]// /|}" >&2; exit 2 ;; esac
    [ -f "$RUN/$name/conf/hdfs-site.xml" ] || { log "no HDFS of this cluster is up (yarn/yarn.sh up)"; exit 1; }
    case "${1:-}" in
        stop)
            local pid
            if pid=$(term_own "$RUN/pids/$name" "tfdist.yarn.state=$STATE"); then kill_after 5 "$pid"; fi
            log "datanode $name stopped" ;;
        start)
            alive "$name" && { log "datanode $name already runs"; return 0; }
            start_datanode "$name"
            log "datanode $name started" ;;
        *) echo "usage: yarn/yarn.sh datanode stop|start NAME" >&2; exit 2 ;;
    esac
}

cmd_pmem_check() {  # cmd_pmem_check on|off
    local value
    case "${1:-}" in
        on) value=true ;;
        off) value=false ;;
        *) echo "usage: yarn/yarn.sh pmem-check on|off" >&2; exit 2 ;;
    esac
    running || { log "no cluster of this worktree is up (yarn/yarn.sh up)"; exit 1; }
    local nm todo=() wanted
    wanted=$(pmem_props "$value")
    for nm in "${NODEMANAGERS[@]}"; do
        if ! alive "$nm" || [ "$(pmem_lines "$RUN/$nm/conf/yarn-site.xml")" != "$wanted" ]; then
            todo+=("$nm")
        fi
    done
    if [ ${#todo[@]} -eq 0 ]; then
        log "physical-memory check already $1"
        return 0
    fi
    local begin=$SECONDS pids=() pid site
    for nm in "${todo[@]}"; do
        # the check's properties replaced by pmem_props' (the rest of the file as it was)
        site="$RUN/$nm/conf/yarn-site.xml"
        { grep -v -E "$(pmem_pattern)" "$site" | grep -v '^</configuration>$'
          pmem_props "$value"
          echo '</configuration>'; } > "$site.new"
        mv "$site.new" "$site"
        if pid=$(term_own "$RUN/pids/$nm" "tfdist.yarn.state=$STATE"); then pids+=("$pid"); fi
    done
    kill_after 5 "${pids[@]}"  # a NodeManager may ignore SIGTERM for long
    local left
    for nm in "${todo[@]}"; do
        # its containers (sessions of their own) would outlive it, unknown to the new one
        left=$(LOG_DIR_PREFIX="$RUN/$nm/" containers)
        if [ -n "$left" ]; then
            # shellcheck disable=SC2086
            kill -9 $left 2> /dev/null || true
        fi
        # the new NodeManager's log starts empty: it says when it registered; keep the old one
        [ ! -f "$LOGS/$nm.log" ] || cat "$LOGS/$nm.log" >> "$LOGS/$nm.before.log"
        start_java "$nm" "$RUN/$nm/conf" org.apache.hadoop.yarn.server.nodemanager.NodeManager
    done
    for nm in "${todo[@]}"; do
        wait_for 180 "$nm (restarted)" grep -q "Registered with ResourceManager" "$LOGS/$nm.log"
    done
    wait_for 180 "the NodeManagers" nodes_running
    log "physical-memory check $1: restarted ${todo[*]} in $((SECONDS - begin))s"
}

cmd_status() {
    if ! running; then echo "not running"; exit 1; fi
    local hdfs="no HDFS"
    if [ -f "$STATE/hdfs-url" ]; then
        hdfs="HDFS $(cat "$STATE/hdfs-url")"
        alive namenode || hdfs="$hdfs (its NameNode is not running)"
    fi
    echo "running: $(rm_url) (HADOOP_CONF_DIR=.yarn/conf); $hdfs"
}

case "${1:-}" in
    fetch) cmd_fetch ;;
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    datanode) shift; cmd_datanode "$@" ;;
    pmem-check) shift; cmd_pmem_check "$@" ;;
    dfs) shift; cmd_dfs "$@" ;;
    conf) shift; cmd_conf "$@" ;;
    hdfs-conf) shift; cmd_hdfs_conf "$@" ;;
    daemon) shift; cmd_daemon "$@" ;;
    *) echo "usage: yarn/yarn.sh fetch|up|down|status|dfs|datanode|pmem-check|conf|hdfs-conf|daemon" >&2; exit 2 ;;
esac
