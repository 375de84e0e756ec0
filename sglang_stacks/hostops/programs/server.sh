# The SGLang server process on the GPU host. MODE selects what to do (server_contract.py beside
# this file declares each mode's parameters, its answer and every exit code):
#   launch  start COMMAND detached (its own session, so stopping its group stops its workers),
#           logging to LOG; prints "PID START_TICKS"; exits 10 when PORT already answers.
#           With CLAIM_STACK set, the claim (CLAIM_PROGRAM, claim.py, run by SYSTEM_PYTHON,
#           system_python.sh) notes the server in this same run and its answer is the next line:
#           an update killed at any moment leaves no server that the claim does not know
#   ready   wait until the server PID answers its health check (or, when READY_LINE is set, until
#           its log shows that line: a node of a multi-node server other than rank 0 serves no
#           HTTP): prints ready, exited or timeout, then ---log--- and the log's last TAIL_LINES lines
#   stop    TERM the group of PID, KILL it after TIMEOUT_S, then wait until none of the group's
#           processes holds GPU memory (NVIDIA_SMI, its argv one word a line, lists them): prints
#           "freed running" (or "freed gone" when PID was not running); exits 11 printing the
#           PIDs that still hold it after TIMEOUT_S
#   alive   prints running while PID runs (and is the process started at START_TICKS), else gone
#   state   how the server PID is now: exited, or its health check's answer (healthy, unhealthy,
#           unresponsive); then ---log--- and the log's last TAIL_LINES lines
#   log-tail  the log's last TAIL_LINES lines
# PYTHON runs PORT_PROBE (port_probe.py). Secret variables are exported above this text by the
# caller, so the server inherits them without any command line showing them.
set -u

# Field 1 of /proc/PID/stat after the command name (which may hold spaces) is the state; field
# 20 the start time in clock ticks since boot: a pid is ours only while its start time matches.
stat_field() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f"$2"; }

alive() {
    local state
    state=$(stat_field "$PID" 1)
    [ -n "$state" ] && [ "$state" != "Z" ] || return 1
    if [ -z "${START_TICKS:-}" ]; then
        # No recorded start time: ours only while it still is an SGLang process.
        tr '\0' ' ' <"/proc/$PID/cmdline" | grep -q -- '-m sglang'
    else
        [ "$(stat_field "$PID" 20)" = "$START_TICKS" ]
    fi
}

log_tail() { tail -n "${TAIL_LINES:-25}" "$LOG" 2>/dev/null || true; }

launch() {
    # A session that drops (a killed update) or a cancelled update (TERM from the wire's watch)
    # must not stop this between the launch and the claim's note of it: the note is how the next
    # update finds the server. Only the watch's KILL, seconds later, could; the note takes less.
    trap '' HUP PIPE TERM
    if "$PYTHON" -c "$PORT_PROBE" listening "$PORT"; then
        exit 10
    fi
    mkdir -p "$(dirname "$LOG")"
    # The redirections release the SSH session at once; COMMAND is shell-quoted by the caller.
    # The server inherits the exported secrets, not this program's own variables, and the signals
    # this program ignores are the server's to handle again.
    eval "( trap - HUP PIPE TERM; exec setsid nohup env -u MODE -u PORT_PROBE -u PYTHON -u PORT" \
        "-u COMMAND -u CLAIM_PROGRAM -u CLAIM_STACK -u STATE_DIR -u SYSTEM_PYTHON $COMMAND )" \
        '>"$LOG" 2>&1 </dev/null &'
    local pid=$! ticks noted=""
    ticks=$(stat_field "$pid" 20)
    if [ -n "${CLAIM_STACK:-}" ] && [ -n "$ticks" ]; then
        noted=$(SGLANG_STACKS_PROGRAM=$CLAIM_PROGRAM bash -c "$SYSTEM_PYTHON" system_python \
            record-server "$CLAIM_STACK" "$STATE_DIR" --server-pid "$pid" --server-start-ticks "$ticks" 2>&1)
    fi
    echo "$pid $ticks"
    [ -z "$noted" ] || printf '%s\n' "$noted"
}

ready() {
    local deadline=$((SECONDS + ${TIMEOUT_S%.*}))
    while true; do
        if ! alive; then echo exited; break; fi
        if [ -n "${READY_LINE:-}" ]; then
            if grep -qF -- "$READY_LINE" "$LOG" 2>/dev/null; then echo ready; break; fi
        elif "$PYTHON" -c "$PORT_PROBE" healthy "$PORT"; then echo ready; break; fi
        if [ "$SECONDS" -ge "$deadline" ]; then echo timeout; break; fi
        sleep 1
    done
    echo ---log---
    log_tail
}

stop() {
    local deadline=$((SECONDS + ${TIMEOUT_S%.*})) group listed held p was=gone smi
    readarray -t smi <<<"$NVIDIA_SMI"
    group=$(ps -eo pid=,pgid= | awk -v g="$PID" '$2 == g {print $1}' | tr '\n' ' ')
    if alive; then
        was=running
        kill -TERM -- "-$PID" 2>/dev/null || kill -TERM "$PID" 2>/dev/null || true
        while alive && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
        if alive; then kill -KILL -- "-$PID" 2>/dev/null || true; fi
    fi
    while true; do
        listed=$("${smi[@]}" --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ')
        held=""
        for p in $group $PID; do printf '%s\n' "$listed" | grep -qx "$p" && held="$held $p"; done
        [ -z "$held" ] && { echo "freed $was"; break; }
        [ "$SECONDS" -ge "$deadline" ] && { echo "$held"; exit 11; }
        sleep 0.5
    done
}

state() {
    local health=exited waited=0
    if alive; then
        health=$("$PYTHON" -c "$PORT_PROBE" health "$PORT")
        # A failing server may take a moment to exit (SGLang's launcher stops its whole tree once
        # a child failed): it is unhealthy or hung only if it is still there after that moment.
        while [ "$health" != healthy ] && alive && [ "$waited" -lt 5 ]; do
            sleep 1
            waited=$((waited + 1))
        done
        alive || health=exited
    fi
    echo "$health"
    echo ---log---
    log_tail
}

case "$MODE" in
    launch) launch ;;
    ready) ready ;;
    stop) stop ;;
    alive) if alive; then echo running; else echo gone; fi ;;
    state) state ;;
    log-tail) log_tail ;;
    *) echo "server.sh: unknown MODE $MODE" >&2; exit 2 ;;
esac
