#!/bin/bash
# Stage 2 of the rdmx test guest, in the host's userspace: make the RDMA
# devices, then run the command. Devices, each on its own netdev:
#   rxe0 on sr0 (dummy)            10.99.0.1   RDMX_RXE_ADDR
#   siw0 on sr1 (dummy), if built  10.99.1.1   RDMX_SIW_ADDR
#   rxe1 on va, rxe2 on vb: a veth pair, 10.99.2.1 and 10.99.2.2, in one
#   namespace (rxe of 6.1 answers only in the initial one), with
#   accept_local and no rp_filter: frames carry local source addresses.
run=$1 work=$2 kver=$3
exec >"$run/out" 2>&1
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
ulimit -l unlimited
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
ip link set lo up
netdev() { # name addr
	ip link add "$1" type dummy && ip link set "$1" mtu 9000 up &&
		ip addr add "$2/24" dev "$1"
}
netdev sr0 10.99.0.1
rdma link add rxe0 type rxe netdev sr0 || echo "[vm] rxe0: rdma link add failed"
if [ -d /sys/module/siw ]; then
	netdev sr1 10.99.1.1
	rdma link add siw0 type siw netdev sr1 && export RDMX_SIW_ADDR=10.99.1.1
fi
ip link add va type veth peer name vb && ip link set va mtu 9000 up &&
	ip link set vb mtu 9000 up && ip addr add 10.99.2.1/24 dev va &&
	ip addr add 10.99.2.2/24 dev vb
for f in /proc/sys/net/ipv4/conf/*/accept_local; do echo 1 >"$f"; done
for f in /proc/sys/net/ipv4/conf/*/rp_filter; do echo 0 >"$f"; done
rdma link add rxe1 type rxe netdev va && rdma link add rxe2 type rxe netdev vb
chmod 666 /dev/infiniband/* 2>/dev/null
# Ports become ACTIVE and GIDs appear a little after: wait, by time.
for _ in $(seq 100); do
	read -r s </sys/class/infiniband/rxe0/ports/1/state 2>/dev/null
	[[ $s == *ACTIVE* ]] && break
	sleep 0.1
done
export RDMX_VM=1 RDMX_RXE_ADDR=10.99.0.1
[ -f "$run/env" ] && . "$run/env"
cd "$work" || exit 125
eval "$(cat "$run/cmd")"
echo $? >"$run/rc"
