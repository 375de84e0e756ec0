# The host's note of the server it serves (serving.json beside the claim); serving_note_contract.py
# beside this file declares each mode's parameters, its answer and every exit code.
#   MODE  record: replace the note with stdin, in one rename
#         forget: remove the note if it is about the server with pid PID
#         read:   print the note (nothing when there is none)
#   NOTE  the note's path (absolute: the caller's HostPath expands ~/)

case "$MODE" in
record)
    set -e
    mkdir -p "$(dirname "$NOTE")"
    cat >"$NOTE.tmp"
    mv -f "$NOTE.tmp" "$NOTE"
    ;;
forget)
    # The note is written by json.dumps(sort_keys=True): the pid is followed by , or }.
    if grep -q "\"pid\": $PID[,}]" "$NOTE" 2>/dev/null; then rm -f "$NOTE"; fi
    ;;
read)
    cat "$NOTE" 2>/dev/null || true
    ;;
*)
    echo "serving_note.sh: unknown MODE $MODE" >&2
    exit 2
    ;;
esac
