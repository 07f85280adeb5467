# kinesalite: a local Kinesis server (in memory) for consumer/kinesis (npm package kinesalite
# 3.3.3, every package pinned by scripts/kinesalite/package-lock.json). Listens on
# 127.0.0.1:4567 only (scripts/kinesalite/serve.js). Tests find it through
# IDEM_KINESIS_ENDPOINT (default http://127.0.0.1:4567).
if ! port_open 4567; then
	echo "services: starting kinesalite (Kinesis) on 127.0.0.1:4567" >&2
	kinesalite_dir="$root/scripts/kinesalite"
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		echo "services: kinesalite needs node and npm; installing the Debian packages" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
	fi
	if [ ! -f "$kinesalite_dir/node_modules/kinesalite/index.js" ]; then
		(cd "$kinesalite_dir" && npm ci --no-audit --no-fund --loglevel=error) >&2
	fi
	KINESALITE_PORT=4567 setsid nohup node "$kinesalite_dir/serve.js" \
		>"$IDEM_SERVICES_DIR/kinesalite.log" 2>&1 </dev/null &
	echo $! >"$IDEM_SERVICES_DIR/kinesalite.pid"
	wait_port 4567 30 kinesalite
fi
