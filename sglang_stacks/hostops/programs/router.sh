# SGLang's router (the sglang-router package) on the machine that fronts the fleet. MODE selects
# (router_contract.py beside this file declares each mode's parameters, answer and exit codes):
#   start  check that PYTHON has sglang-router RELEASE (exits 10 printing the release it has
#          otherwise), start it detached on HOST:PORT (its metrics on METRICS_PORT) with POLICY and
#          HEALTH_INTERVAL_S (in PD mode when PD_DISAGGREGATION is 1), logging to LOG, and wait up to TIMEOUT_S for its /liveness: prints
#          "ready PID START_TICKS", or exits 12 printing "exited"/"timeout" then ---log--- and the
#          log's last lines; exits 11 when PORT already answers
#   alive  prints running while PID runs (and is the process started at START_TICKS), else gone
#   stop   TERM PID, KILL it after TIMEOUT_S
#   leftover  "running PID START_TICKS" while the router the last start launched (recorded in
#          LOG.pid the moment it started) still runs, else "none": what a start that was
#          interrupted before it could answer left behind
# The router starts with no workers: each replica is added through its worker API once ready.
set -u

stat_field() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f"$2"; }

alive() {
    local state
    state=$(stat_field "$PID" 1)
    [ -n "$state" ] && [ "$state" != "Z" ] && [ "$(stat_field "$PID" 20)" = "$START_TICKS" ]
}

answers() {
    "$PYTHON" -c 'import sys, urllib.request
try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=5).status == 200 else 1)
except Exception:
    sys.exit(1)' "http://$HOST:$PORT/liveness"
}

start() {
    local found deadline pid ticks
    found=$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("sglang-router"))' 2>/dev/null || echo none)
    if [ "$found" != "$RELEASE" ]; then echo "$found"; exit 10; fi
    if answers; then exit 11; fi
    mkdir -p "$(dirname "$LOG")"
    local mode=()
    if [ "${PD_DISAGGREGATION:-}" = 1 ]; then mode=(--pd-disaggregation); fi
    setsid nohup "$PYTHON" -m sglang_router.launch_router --host "$HOST" --port "$PORT" \
        --policy "$POLICY" --health-check-interval-secs "$HEALTH_INTERVAL_S" --log-level warn \
        --prometheus-host "$HOST" --prometheus-port "$METRICS_PORT" "${mode[@]}" \
        >"$LOG" 2>&1 </dev/null &
    pid=$!
    ticks=$(stat_field "$pid" 20)
    echo "$pid $ticks" >"$LOG.pid"
    deadline=$((SECONDS + ${TIMEOUT_S%.*}))
    while true; do
        PID=$pid START_TICKS=$ticks
        if ! alive; then echo exited; break; fi
        if answers; then echo "ready $pid $ticks"; return 0; fi
        if [ "$SECONDS" -ge "$deadline" ]; then kill "$pid"; echo timeout; break; fi
        sleep 0.5
    done
    echo ---log---
    tail -n 20 "$LOG" 2>/dev/null || true
    exit 12
}

stop() {
    local deadline=$((SECONDS + ${TIMEOUT_S%.*}))
    alive || return 0
    kill -TERM "$PID" 2>/dev/null || true
    while alive; do
        if [ "$SECONDS" -ge "$deadline" ]; then kill -KILL "$PID" 2>/dev/null || true; fi
        sleep 0.2
    done
}

leftover() {
    local recorded
    recorded=$(cat "$LOG.pid" 2>/dev/null) || recorded=""
    read -r PID START_TICKS <<<"$recorded" || true
    if [ -n "${PID:-}" ] && [ -n "${START_TICKS:-}" ] && alive; then
        echo "running $PID $START_TICKS"
    else
        echo none
    fi
}

case "$MODE" in
    start) start ;;
    alive) if alive; then echo running; else echo gone; fi ;;
    stop) stop ;;
    leftover) leftover ;;
    *) echo "router.sh: unknown MODE $MODE" >&2; exit 2 ;;
esac
