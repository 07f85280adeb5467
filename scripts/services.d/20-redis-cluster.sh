# A three-master Redis Cluster on 127.0.0.1:7001-7003 for store/redisstore, started from the
# machine's redis-server (Debian package redis-server; installed here if missing). No replicas:
# the tests need slot routing (MOVED/ASK, hash tags), not failover. Data lives under
# $IDEM_SERVICES_DIR/redis-cluster/<port> (no persistence: throwaway test data). The cluster
# is created with `redis-cli --cluster create` only when the nodes do not already form one;
# the part returns when CLUSTER INFO says cluster_state:ok. Quick when it is already up.
# Tests read IDEM_REDIS_CLUSTER_ADDRS (default 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003).
redis_cluster_ports=(7001 7002 7003)

redis_cluster_ok() {
	local p
	for p in "${redis_cluster_ports[@]}"; do
		redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
		# A node that is up but alone (its own cluster) is not ok for us.
		[ "$(redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | tr -d '\r' |
			sed -n 's/^cluster_known_nodes://p')" = "${#redis_cluster_ports[@]}" ] || return 1
	done
}

if ! redis_cluster_ok; then
	if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
		echo "services: installing redis-server (Debian) for the Redis Cluster" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
	fi
	rc_dir="$IDEM_SERVICES_DIR/redis-cluster"
	for p in "${redis_cluster_ports[@]}"; do
		mkdir -p "$rc_dir/$p"
		if ! port_open "$p"; then
			echo "services: starting Redis Cluster node 127.0.0.1:$p" >&2
			redis-server --bind 127.0.0.1 --port "$p" --cluster-enabled yes \
				--cluster-config-file nodes.conf --cluster-node-timeout 5000 \
				--save "" --appendonly no --dir "$rc_dir/$p" \
				--daemonize yes --pidfile "$rc_dir/$p/redis.pid" --logfile "$rc_dir/$p/redis.log"
		fi
	done
	for p in "${redis_cluster_ports[@]}"; do wait_port "$p" 15 "Redis Cluster node $p"; done
	# Create the cluster only when no node knows of any slot yet; nodes that restarted with
	# their nodes.conf rejoin on their own.
	if ! redis-cli -h 127.0.0.1 -p "${redis_cluster_ports[0]}" cluster info | grep -q '^cluster_slots_assigned:16384'; then
		rc_fresh=1
		for p in "${redis_cluster_ports[@]}"; do
			if ! redis-cli -h 127.0.0.1 -p "$p" cluster info | grep -q '^cluster_slots_assigned:0'; then
				rc_fresh=0
			fi
		done
		if [ "$rc_fresh" = 1 ]; then
			echo "services: creating the Redis Cluster" >&2
			rc_addrs=()
			for p in "${redis_cluster_ports[@]}"; do rc_addrs+=("127.0.0.1:$p"); done
			redis-cli --cluster create "${rc_addrs[@]}" --cluster-replicas 0 --cluster-yes >"$rc_dir/create.log" 2>&1 ||
				{ cat "$rc_dir/create.log" >&2; exit 1; }
		fi
	fi
	for ((i = 0; i < 300; i++)); do
		redis_cluster_ok && break
		sleep 0.1
	done
	redis_cluster_ok || {
		echo "services: the Redis Cluster on ${redis_cluster_ports[*]} is not ok; state in $rc_dir (delete it and kill the nodes to start over)" >&2
		exit 1
	}
fi
