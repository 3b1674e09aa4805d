#!/usr/bin/env bash
# Installs the Debian packages rdmx needs to build and test. Idempotent: it runs
# apt-get only when something is missing, so `make` on a ready machine stays fast.
set -euo pipefail

pkgs=(
	build-essential cmake pkg-config   # toolchain
	libyaml-dev                        # config file
	libsodium-dev                      # HMAC-SHA256 handshake, random rkeys
	libcmocka-dev                      # unit and conformance tests
	clang libclang-rt-14-dev           # libFuzzer and sanitizer runtimes
	iproute2                           # network-namespace tests
	valgrind                           # leak check of a server's shutdown
	liblua5.4-dev                      # lambda demo: sandboxed Lua 5.4
	libseccomp-dev                     # lambda demo: the child's syscall filter
	libmicrohttpd-dev                  # --metrics: Prometheus endpoint
	redis-tools                        # redis-cli against rdmx kv --resp-port
	libcurl4-openssl-dev libjson-c-dev # registry: etcd's HTTP/JSON gateway
	etcd-server                        # registry tests start their own etcd
	libibverbs-dev librdmacm-dev       # the verbs transport
	rdma-core ibverbs-providers        # its providers (rxe, siw) at run time
	pandoc man-db                      # man pages: Markdown rendered to roff
	jq                                 # tests: the Grafana dashboard's queries
	debhelper fakeroot lintian         # make deb: librdmx0, librdmx-dev, rdmx-tools
)

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
