# Lists a folder for its tree digest: `absent`, or `present <total bytes>` and then one
# `<sha256>  ./<path>` line per file (symbolic links followed), sorted by path byte by byte.
#   FOLDER  the folder (absolute: the caller's HostPath expands ~/)
set -o pipefail
if [ ! -d "$FOLDER" ]; then
    echo absent
    exit 0
fi
cd "$FOLDER" || exit 3
size=$(LC_ALL=C find -L . -type f -printf '%s\n' | awk '{s += $1} END {printf "%.0f", s}') || exit 4
echo "present $size"
LC_ALL=C find -L . -type f -print0 | LC_ALL=C sort -z | LC_ALL=C xargs -0 -r sha256sum -- || exit 5
