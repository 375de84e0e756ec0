# The GPU probe: the GPU query, the compute apps and the topology, one marked section each, in one
# round trip. Each section ends with its exit code, so a failing step still lets the others show.
#   NVIDIA_SMI  the command as argv words, one per line (the emulator host passes its stand-in)
#   GPU_FIELDS  the --query-gpu fields;  APP_FIELDS  the --query-compute-apps fields
readarray -t smi <<<"$NVIDIA_SMI"

section() {
    local name=$1
    shift
    echo "@@sglang-stacks begin $name"
    "${smi[@]}" "$@" 2>&1
    echo "@@sglang-stacks end $name $?"
}

section query-gpu "--query-gpu=$GPU_FIELDS" --format=csv,noheader,nounits
section compute-apps "--query-compute-apps=$APP_FIELDS" --format=csv,noheader,nounits
section topo topo -m
