# The GPU probe: the GPU query, the compute apps and the topology, one marked section each, in one
# round trip. Each section ends with its exit code, so a failing step still lets the others show.
# The three queries run side by side (each nvidia-smi call takes a good part of a second) and
# print in order.
#   NVIDIA_SMI  the command as argv words, one per line (the emulator host passes its stand-in)
#   GPU_FIELDS  the --query-gpu fields;  APP_FIELDS  the --query-compute-apps fields
readarray -t smi <<<"$NVIDIA_SMI"
folder=$(mktemp -d)
trap 'rm -rf "$folder"' EXIT

section() {
    local name=$1
    shift
    {
        echo "@@sglang-stacks begin $name"
        "${smi[@]}" "$@" 2>&1
        echo "@@sglang-stacks end $name $?"
    } >"$folder/$name" </dev/null
}

section query-gpu "--query-gpu=$GPU_FIELDS" --format=csv,noheader,nounits &
section compute-apps "--query-compute-apps=$APP_FIELDS" --format=csv,noheader,nounits &
section topo topo -m &
wait
cat "$folder/query-gpu" "$folder/compute-apps" "$folder/topo"
