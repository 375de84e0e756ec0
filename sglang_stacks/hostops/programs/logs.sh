# A stack's server log and benchmark progress, for `sglang-stacks logs`.
#   MODE      show:     the last LINES lines of the newest server log and of the progress file
#             follow:   the same, then every new line, until this session's stdin ends
#             progress: empty the progress file for a benchmark about to start, say `ready`, then
#                       print each line written to it, until this session's stdin ends
#   LOG_DIR   the folder of the server's logs (absolute: the caller's HostPath expands ~/)
#   STACK     the stack; each launch of its server writes <STACK>-<12 hex digits>.log
#   PROGRESS  the benchmark's progress file (absent until the first benchmark)
#   LINES     lines of each file to show first
#
# A new launch means a new log file, so following one file by name would miss a server launched
# (or replaced) after this began: the newest log is followed, and a newer one, once it appears,
# from its first line.
set -u
h='[0-9a-f]'

newest() {
    # Unquoted, the hex pattern is a glob; ls -t puts the most recently written first.
    ls -t "$LOG_DIR/$STACK"-$h$h$h$h$h$h$h$h$h$h$h$h.log 2>/dev/null | head -n 1
}

show() {
    local file
    for file in "$(newest)" "$PROGRESS"; do
        [ -f "$file" ] || continue
        echo "==> $file <=="
        tail -n "$LINES" "$file"
    done
}

follow() {
    local followers=() current latest server=''
    trap 'kill "${followers[@]}" 2>/dev/null' EXIT
    tail -n "$LINES" -F "$PROGRESS" 2>/dev/null &
    followers+=($!)
    current=$(newest)
    if [ -n "$current" ]; then
        tail -n "$LINES" -F "$current" 2>/dev/null &
        server=$!
        followers+=("$server")
    fi
    while :; do
        latest=$(newest)
        if [ -n "$latest" ] && [ "$latest" != "$current" ]; then
            [ -n "$server" ] && kill "$server" 2>/dev/null
            tail -n +1 -F "$latest" 2>/dev/null &
            server=$!
            followers+=("$server")
            current=$latest
        fi
        # A line or a second of quiet: look again. End of stdin: the follower has gone.
        read -r -t 1 _ || [ $? -gt 128 ] || exit 0
    done
}

progress() {
    local follower
    mkdir -p "$(dirname "$PROGRESS")"
    : >"$PROGRESS"
    echo ready
    tail -n +1 -F "$PROGRESS" 2>/dev/null &
    follower=$!
    trap 'kill "$follower" 2>/dev/null' EXIT
    while read -r _; do :; done
    exit 0
}

case "$MODE" in
    show) show ;;
    follow) follow ;;
    progress) progress ;;
    *)
        echo "logs.sh: unknown MODE '$MODE'" >&2
        exit 2
        ;;
esac
