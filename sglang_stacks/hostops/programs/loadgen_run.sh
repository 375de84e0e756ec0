# Runs the load generator on the host against the server (loadgen_run_contract.py beside this file
# declares its parameters, answer and exit codes). Its package arrives as a tar stream on stdin,
# with the workload's dataset, and runs from a scratch folder that goes when this ends; its
# progress file stays for `sglang-stacks logs`. It runs under BOUND (bound.py): it stops when the
# session that started it dies (a killed update, a dropped connection), and one an earlier session
# left behind is stopped before this one starts, so a benchmark always measures alone.
#   PYTHON    the environment's python;  PACKAGE  the load generator's package in the stream
#   RUNFILE   where bound.py records the running load generator;  LABEL  how it names it
#   OPTIONS   the load generator's options, one a line;  PROGRESS  its progress file
set -e
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$(dirname "$PROGRESS")"
: >"$PROGRESS"
tar -x -f - -C "$scratch" --no-same-owner
cd "$scratch"
readarray -t options <<<"$OPTIONS"
"$PYTHON" -c "$BOUND" "$RUNFILE" "$LABEL" -- "$PYTHON" -m "$PACKAGE" "${options[@]}" --progress-file="$PROGRESS"
