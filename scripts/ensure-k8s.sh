#!/usr/bin/env bash
# Makes sure the programs of the local Kubernetes cluster (the tests' cluster and `scripts/k8s-up.sh`)
# are installed, idempotently; a second run takes a second. Nothing prebuilt is downloaded:
#
#   - etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl, containerd
#     (with its runc shim and `ctr`) and the LeaderWorkerSet controller are built once from their Go
#     modules (toolchain/<name>/go.mod pins each) into a cache outside the repository, keyed by
#     version, under a temporary name and then moved, as scripts/bootstrap.sh builds the Pulumi CLI;
#   - runc, the CNI plugins, umoci (OCI image layouts), debootstrap and a C compiler come from Debian;
#   - the pod sandbox ("pause") image is Kubernetes' own pause.c from the same release, compiled here;
#   - the base of the emulator's image is Debian's python3, installed with debootstrap.
#
# .venv/kubernetes/ then points at all of it (bin/, pause/, lws/, debian-python3/): the cluster code
# (toolchain/local_cluster) finds it there. Running the cluster needs root (cgroups, mounts).
#
# Environment: SGLANG_STACKS_CACHE (default ~/.cache/sglang-stacks) holds the builds.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/scripts/_apt.sh"
KUBERNETES_VERSION=1.37.2
ETCD_VERSION=3.7.3
CONTAINERD_VERSION=2.2.0
LWS_VERSION=0.7.0
# The emulator image's base: this Debian release's minimal system and python3.
DEBIAN_SUITE=bookworm
CACHE=${SGLANG_STACKS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sglang-stacks}
LINKS="$ROOT/.venv/kubernetes"
PARTIALS=()
# A step that fails leaves no half-built folder behind.
trap 'rm -rf "${PARTIALS[@]}"' EXIT

say() { printf 'ensure-k8s: %s\n' "$*" >&2; }

# cached DIR STEP ARGS...: unless DIR is there, runs `STEP PARTIAL ARGS...` to fill PARTIAL, a new
# folder beside DIR, and then renames PARTIAL to DIR (a concurrent run that finished first wins).
cached() {
    local dir=$1 step=$2 partial
    shift 2
    [[ -d "$dir" ]] && return
    mkdir -p "$CACHE"
    partial=$(mktemp -d "$dir.partial.XXXXXX")
    PARTIALS+=("$partial")
    "$step" "$partial" "$@"
    chmod 755 "$partial"
    mv -T "$partial" "$dir" 2>/dev/null || rm -rf "$partial"
}

ensure_debian_packages() {
    local missing=()
    command -v runc >/dev/null || missing+=(runc)
    [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] \
        || missing+=(containernetworking-plugins)
    command -v umoci >/dev/null || missing+=(umoci)
    command -v debootstrap >/dev/null || missing+=(debootstrap)
    command -v gcc >/dev/null || missing+=(gcc)
    compgen -G "/usr/lib/*-linux-gnu/libc.a" >/dev/null || missing+=(libc6-dev)
    command -v openssl >/dev/null || missing+=(openssl)
    command -v nsenter >/dev/null || missing+=(util-linux)
    if ((${#missing[@]})); then
        say "installing ${missing[*]} from Debian"
        apt_install "the local cluster's Debian packages" "${missing[@]}"
    fi
}

# go_build PARTIAL MODULE LDFLAGS PROGRAM PACKAGE...: builds the packages in one `go build` (one
# package cache) from toolchain/MODULE into PARTIAL/bin. PROGRAM names the binary of a single
# package whose path does not (etcd's is `.../server/v3`); empty, each is named after its package.
go_build() {
    local partial=$1 module=$2 ldflags=$3 program=$4 started=$SECONDS
    shift 4
    say "building $* from the Go module pinned in toolchain/$module (once; the README says how long)"
    (cd "$ROOT/toolchain/$module" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -buildvcs=false \
        -ldflags "-s -w $ldflags" -o "$partial/bin/$program" "$@")
    echo "$((SECONDS - started))" >"$partial/build-seconds"
}

module_dir() { (cd "$ROOT/toolchain/$1" && go list -m -f '{{.Dir}}' "$2"); }

build_kubernetes() {
    local partial=$1 ldflags="" package
    # What the release's own build stamps (hack/lib/version.sh): `kubectl version`, the node's kubeletVersion.
    for package in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
        ldflags+=" -X $package.gitVersion=v$KUBERNETES_VERSION -X $package.gitTreeState=clean"
        ldflags+=" -X $package.gitMajor=${KUBERNETES_VERSION%%.*}"
        ldflags+=" -X $package.gitMinor=$(cut -d. -f2 <<<"$KUBERNETES_VERSION")"
    done
    go_build "$partial" kubernetes "$ldflags" "" \
        k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
}

build_etcd() { go_build "$1" etcd "" etcd go.etcd.io/etcd/server/v3; }

build_containerd() {
    go_build "$1" containerd "-X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION" "" \
        github.com/containerd/containerd/v2/cmd/containerd \
        github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
        github.com/containerd/containerd/v2/cmd/ctr
}

# The controller, and its CRD and webhooks as the release ships them (the webhooks with the release's
# own kustomize patches applied); the cluster points the webhooks at the controller's address.
build_lws() {
    local partial=$1 module
    go_build "$partial" lws "-X sigs.k8s.io/lws/pkg/version.GitVersion=v$LWS_VERSION" lws-controller \
        sigs.k8s.io/lws/cmd
    module=$(module_dir lws sigs.k8s.io/lws)
    cat "$module"/config/crd/bases/*.yaml >"$partial/crd.yaml"
    "$CACHE/kubernetes-v$KUBERNETES_VERSION/bin/kubectl" kustomize "$module/config/webhook" >"$partial/webhooks.yaml"
}

# The sandbox ("pause") image from the release's build/pause: a static binary that sleeps.
build_pause() {
    local partial=$1 source=$2 tag=$3
    say "building the pause image $tag from Kubernetes' pause.c"
    gcc -Os -Wall -Werror -static -DVERSION="v$tag" -o "$partial/pause" "$source/linux/pause.c"
    umoci init --layout "$partial/layout"
    umoci new --image "$partial/layout:$tag"
    umoci insert --image "$partial/layout:$tag" "$partial/pause" /pause
    umoci config --image "$partial/layout:$tag" --config.entrypoint /pause --config.user 65535:65535
    tar -C "$partial/layout" -cf "$partial/image.tar" .
    echo "$tag" >"$partial/tag"
    rm -rf "$partial/layout" "$partial/pause"
}

# An OCI image layout (tag `base`) of Debian's minimal system with python3, to which
# toolchain/local_cluster/images.py adds the project's code.
build_debian_python() {
    local partial=$1 mirror
    mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' \
        | awk -v suite="$DEBIAN_SUITE" '$2 == suite {print $1; exit}')
    say "installing Debian $DEBIAN_SUITE's python3 into an image base with debootstrap (once)"
    umoci init --layout "$partial/layout"
    umoci new --image "$partial/layout:base"
    umoci unpack --image "$partial/layout:base" "$partial/bundle"
    debootstrap --variant=minbase --include=python3 "$DEBIAN_SUITE" "$partial/bundle/rootfs" \
        "${mirror:-http://deb.debian.org/debian/}" >"$partial/debootstrap.log"
    rm -rf "$partial/bundle/rootfs/var/cache/apt/archives/"*.deb "$partial/bundle/rootfs/var/lib/apt/lists/"*
    umoci repack --image "$partial/layout:base" "$partial/bundle"
    umoci gc --layout "$partial/layout"
    rm -rf "$partial/bundle"
}

link() {
    local pause_dir=$1
    # The venv may not be made yet (scripts/test.sh starts this build beside the bootstrap):
    # the links go into its folder, which the bootstrap's `python -m venv` keeps.
    mkdir -p "$(dirname "$LINKS")"
    rm -rf "$LINKS.new"
    mkdir -p "$LINKS.new/bin"
    ln -s "$CACHE/kubernetes-v$KUBERNETES_VERSION/bin/"* "$CACHE/etcd-v$ETCD_VERSION/bin/"* \
        "$CACHE/containerd-v$CONTAINERD_VERSION/bin/"* "$CACHE/lws-v$LWS_VERSION/bin/"* "$LINKS.new/bin/"
    ln -s "$CACHE/lws-v$LWS_VERSION" "$LINKS.new/lws"
    ln -s "$pause_dir" "$LINKS.new/pause"
    ln -s "$CACHE/debian-python3-$DEBIAN_SUITE/layout" "$LINKS.new/debian-python3"
    rm -rf "$LINKS"
    mv "$LINKS.new" "$LINKS"
}

main() {
    local pause_source pause_tag
    ensure_debian_packages
    cached "$CACHE/kubernetes-v$KUBERNETES_VERSION" build_kubernetes
    cached "$CACHE/etcd-v$ETCD_VERSION" build_etcd
    cached "$CACHE/containerd-v$CONTAINERD_VERSION" build_containerd
    cached "$CACHE/lws-v$LWS_VERSION" build_lws
    pause_source="$(module_dir kubernetes k8s.io/kubernetes)/build/pause"
    pause_tag=$(sed -n 's/^TAG ?= *//p' "$pause_source/Makefile")
    cached "$CACHE/pause-$pause_tag" build_pause "$pause_source" "$pause_tag"
    cached "$CACHE/debian-python3-$DEBIAN_SUITE" build_debian_python
    link "$CACHE/pause-$pause_tag"
}

main "$@"
