#!/usr/bin/env bash
# Builds the binaries `make test-k8s` runs: etcd, kube-apiserver and kubectl,
# from source through the Go module proxy (no prebuilt downloads), and caches
# them OUTSIDE the clone, keyed by version, so a fresh clone finds them warm.
#
#   hack/k8s-binaries.sh           build what is missing; print the assets dir
#                                  (usable as KUBEBUILDER_ASSETS) on stdout
#
# Environment:
#   ITOGATE_K8S_CACHE   cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/itogate)
#   K8S_VERSION         Kubernetes release (default 1.37.2)
#   ETCD_VERSION        etcd release (default 3.7.3)
#
# Idempotent and safe to interrupt: each binary is built into a temporary
# directory on the cache's file system, checked (`--version`), and then
# renamed into place, so a cached path is either absent or complete. A lock
# serializes concurrent runs (a developer and CI on one machine).
#
# Why a throwaway module: k8s.io/kubernetes requires its 31 staging modules
# (k8s.io/api, k8s.io/apiserver, ...) at v0.0.0 and replaces them with
# ./staging paths, so `go install k8s.io/kubernetes/cmd/...@v1.x` refuses.
# A module that requires it and replaces each v0.0.0 staging module with the
# published v0.<minor>.<patch> builds the same code. The version ldflags stop
# the server from reporting v0.0.0 (clients gate features on it).
# A cold build takes 10-25 minutes on 2 cores and ~3 GB of Go build cache.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.7.3}"
CACHE="${ITOGATE_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/itogate}"

k8s_dir="$CACHE/k8s-v$K8S_VERSION"
etcd_dir="$CACHE/etcd-v$ETCD_VERSION"
assets="$CACHE/assets-k8s-v$K8S_VERSION-etcd-v$ETCD_VERSION"

log() { echo "k8s-binaries: $*" >&2; }

have_all() {
  [ -x "$k8s_dir/kube-apiserver" ] && [ -x "$k8s_dir/kubectl" ] &&
    [ -x "$etcd_dir/etcd" ] && [ -L "$assets/kube-apiserver" ] &&
    [ -L "$assets/kubectl" ] && [ -L "$assets/etcd" ]
}

if have_all; then
  echo "$assets"
  exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
log "waiting for the build lock ($CACHE/.build.lock)"
flock 9

work="$(mktemp -d "$CACHE/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOWORK=off

# mod_dir MODULE VERSION: the module's directory in the module cache.
mod_gomod() {
  go mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p'
}

# throwaway_module DIR MODULE VERSION STAGING_VERSION: writes a module in DIR
# that requires MODULE@VERSION and replaces each module MODULE's go.mod
# requires at v0.0.0 (its staging modules) with STAGING_VERSION.
throwaway_module() {
  local dir="$1" mod="$2" version="$3" staging="$4" gomod
  mkdir -p "$dir"
  gomod="$(mod_gomod "$mod" "$version")"
  [ -n "$gomod" ] || { log "cannot download $mod@$version"; exit 1; }
  {
    echo "module itogate.invalid/k8sbinaries"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
    echo
    echo "require $mod $version"
    awk '
      /^require \(/ { inreq = 1; next }
      inreq && /^\)/ { inreq = 0; next }
      inreq && $2 == "v0.0.0" { print $1 }
      /^require [^(]/ && $3 == "v0.0.0" { print $2 }
    ' "$gomod" | sort -u | while read -r m; do
      echo "replace $m => $m $staging"
    done
  } >"$dir/go.mod"
}

# build DIR OUT PKG LDFLAGS: builds PKG inside module DIR into OUT.
build() {
  local dir="$1" out="$2" pkg="$3" ldflags="$4"
  log "building $pkg (nice it: this is slow)"
  (cd "$dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out" "$pkg")
}

# install SRC DESTDIR: an atomic rename into the cache.
install_bin() {
  mkdir -p "$2"
  mv -f "$1" "$2/$(basename "$1")"
}

if [ ! -x "$k8s_dir/kube-apiserver" ] || [ ! -x "$k8s_dir/kubectl" ]; then
  minor="${K8S_VERSION#*.}"; minor="${minor%%.*}"
  major="${K8S_VERSION%%.*}"
  mdir="$work/kubernetes"
  throwaway_module "$mdir" k8s.io/kubernetes "v$K8S_VERSION" "v0.${K8S_VERSION#*.}"
  log "$(grep -c '^replace' "$mdir/go.mod") staging modules replaced at v0.${K8S_VERSION#*.}"
  cat >"$mdir/tools.go" <<'GO'
//go:build tools

package k8sbinaries

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  (cd "$mdir" && go mod tidy)
  v="k8s.io/component-base/version"
  ld="-X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=$major -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
  ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=$major -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  for bin in kube-apiserver kubectl; do
    [ -x "$k8s_dir/$bin" ] && continue
    build "$mdir" "$work/$bin" "k8s.io/kubernetes/cmd/$bin" "$ld"
    # Capture, then match: `| grep -q` would stop reading early, the binary
    # would die of SIGPIPE and pipefail would call a good binary bad.
    if [ "$bin" = kube-apiserver ]; then
      got="$("$work/$bin" --version 2>&1 || true)"
    else
      got="$("$work/$bin" version --client 2>&1 || true)"
    fi
    case "$got" in
      *"v$K8S_VERSION"*) ;;
      *) log "$bin reports: $got"; exit 1 ;;
    esac
    install_bin "$work/$bin" "$k8s_dir"
  done
fi

if [ ! -x "$etcd_dir/etcd" ]; then
  mdir="$work/etcd-module"
  throwaway_module "$mdir" go.etcd.io/etcd/server/v3 "v$ETCD_VERSION" "v$ETCD_VERSION"
  cat >"$mdir/tools.go" <<'GO'
//go:build tools

package k8sbinaries

import _ "go.etcd.io/etcd/server/v3"
GO
  (cd "$mdir" && go mod tidy)
  build "$mdir" "$work/etcd" go.etcd.io/etcd/server/v3 ""
  got="$("$work/etcd" --version 2>&1 || true)"
  case "$got" in
    *"etcd Version: $ETCD_VERSION"*) ;;
    *) log "etcd reports: $got"; exit 1 ;;
  esac
  install_bin "$work/etcd" "$etcd_dir"
fi

# One directory with all three, the layout envtest (KUBEBUILDER_ASSETS) wants.
mkdir -p "$assets"
ln -sfn "$k8s_dir/kube-apiserver" "$assets/kube-apiserver"
ln -sfn "$k8s_dir/kubectl" "$assets/kubectl"
ln -sfn "$etcd_dir/etcd" "$assets/etcd"
log "ready in $assets"
echo "$assets"
