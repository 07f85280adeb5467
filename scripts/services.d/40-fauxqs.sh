# fauxqs: a local SQS/SNS server for consumer/sqs (npm package fauxqs 1.9.2, every package
# pinned by scripts/fauxqs/package-lock.json; needs Node >= 20). Listens on 127.0.0.1:4566 only
# (scripts/fauxqs/serve.mjs). Tests find it through IDEM_SQS_ENDPOINT
# (default http://127.0.0.1:4566).
if ! port_open 4566; then
	echo "services: starting fauxqs (SQS/SNS) on 127.0.0.1:4566" >&2
	fauxqs_dir="$root/scripts/fauxqs"
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		echo "services: fauxqs needs node and npm; installing the Debian packages" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
	fi
	if [ ! -f "$fauxqs_dir/node_modules/fauxqs/dist/app.js" ]; then
		(cd "$fauxqs_dir" && npm ci --no-audit --no-fund --loglevel=error) >&2
	fi
	FAUXQS_PORT=4566 setsid nohup node "$fauxqs_dir/serve.mjs" \
		>"$IDEM_SERVICES_DIR/fauxqs.log" 2>&1 </dev/null &
	echo $! >"$IDEM_SERVICES_DIR/fauxqs.pid"
	wait_port 4566 30 fauxqs
fi
