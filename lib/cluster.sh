# shellcheck shell=bash
# What kube/kube.sh and yarn/yarn.sh share: a test cluster of daemons started in sessions of
# their own, one pid file each, on free ports of 127.0.0.1. Sourced, never run.
#
# The script that sources it sets, first:
#   CLUSTER      its name in messages (kube, yarn)
#   STATE        its state directory in the repository (.kube, .yarn: git-ignored)
#   RUN          where the pid files live ($RUN/pids/NAME)
#   LOGS         where each daemon's output goes ($LOGS/NAME.log)
#   UNAVAILABLE  the file that says why `up` failed (the tests print it when they skip)
# and defines cmd_down, which fail calls to undo a half-started `up` (when STARTING is set).

log() { echo "$CLUSTER: $*" >&2; }

fail() {  # fail WHY: say why, leave it in $UNAVAILABLE, stop what a failed `up` started
    echo "$CLUSTER: $*" >&2
    mkdir -p "$STATE"
    echo "$*" > "$UNAVAILABLE"
    [ -n "${STARTING:-}" ] && cmd_down > /dev/null 2>&1
    exit 1
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {  # start NAME COMMAND ARGS...: in its own session, pid in $RUN/pids/NAME
    local name=$1
    shift
    setsid "$@" > "$LOGS/$name.log" 2>&1 < /dev/null &
    echo $! > "$RUN/pids/$name"
}

alive() {  # alive NAME: the daemon of pid file NAME runs
    [ -f "$RUN/pids/$1" ] && kill -0 "$(cat "$RUN/pids/$1")" 2> /dev/null
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds; fails if a daemon exits
    local limit=$1 what=$2
    shift 2
    local until=$((SECONDS + limit))
    until "$@" > /dev/null 2>&1; do
        [ $SECONDS -lt $until ] || fail "$what not ready after ${limit}s; see ${STATE##*/}/logs/"
        for pidfile in "$RUN"/pids/*; do
            kill -0 "$(cat "$pidfile")" 2> /dev/null || fail "$(basename "$pidfile") exited; see ${STATE##*/}/logs/$(basename "$pidfile").log"
        done
        sleep 0.5
    done
}

term_own() {  # term_own PIDFILE PATTERN: SIGTERM the file's process if its command line holds
    # PATTERN (only our own: the pid may have been reused since) and print its pid; the file goes
    local file=$1 pattern=$2 pid
    [ -f "$file" ] || return 1
    pid=$(cat "$file")
    local ours=1
    if kill -0 "$pid" 2> /dev/null && grep -q "$pattern" "/proc/$pid/cmdline" 2> /dev/null; then
        kill "$pid" 2> /dev/null || true
        echo "$pid"
        ours=0
    fi
    rm -f "$file"
    return $ours
}

kill_after() {  # kill_after SECONDS PID...: give each up to SECONDS to exit, then SIGKILL it
    local tries=$(($1 * 5)) pid
    shift
    for pid in "$@"; do
        for _ in $(seq "$tries"); do kill -0 "$pid" 2> /dev/null || break; sleep 0.2; done
        kill -9 "$pid" 2> /dev/null || true
    done
}
