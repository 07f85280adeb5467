# DynamoDB Local (AWS's emulator, a Java program) on 127.0.0.1:8000 for store/dynamostore.
#
# AWS ships DynamoDB Local inside the npm package amplify-dynamodb-simulator; we fetch that
# one package with `npm pack` (npm registry only), unpack it once under
# $IDEM_SERVICES_DIR/dynamodb-local and run the jar with the machine's Java 17, in memory.
# Quick when the port is already open. DynamoDB Local has no bind-address option (its flags
# are -port, -inMemory, -sharedDb, -dbPath, -cors, -disableTelemetry…) and would listen on
# every interface: scripts/dynamodb/Loopback.java starts it with its connector bound to
# 127.0.0.1, run by Java's single-file source launcher (the JDK's, no build step). Telemetry is
# disabled. Tests read IDEM_DYNAMODB_ENDPOINT (default http://127.0.0.1:8000).
if ! port_open "${IDEM_DYNAMODB_PORT:-8000}"; then
	ddb_version=2.9.30
	ddb_dir="$IDEM_SERVICES_DIR/dynamodb-local"
	ddb_home="$ddb_dir/$ddb_version/package/emulator"
	if [ ! -f "$ddb_home/DynamoDBLocal.jar" ]; then
		echo "services: fetching DynamoDB Local (npm amplify-dynamodb-simulator@$ddb_version)" >&2
		command -v java >/dev/null || { echo "services: DynamoDB Local needs java (Debian: openjdk-17-jre-headless)" >&2; exit 1; }
		command -v npm >/dev/null || { echo "services: DynamoDB Local is fetched with npm (Debian: npm)" >&2; exit 1; }
		rm -rf "$ddb_dir/$ddb_version.tmp"
		mkdir -p "$ddb_dir/$ddb_version.tmp"
		(cd "$ddb_dir/$ddb_version.tmp" && npm pack --silent "amplify-dynamodb-simulator@$ddb_version" >/dev/null &&
			tar xzf amplify-dynamodb-simulator-*.tgz package/emulator && rm -f amplify-dynamodb-simulator-*.tgz)
		[ -f "$ddb_dir/$ddb_version.tmp/package/emulator/DynamoDBLocal.jar" ] ||
			{ echo "services: DynamoDBLocal.jar not found in the npm package" >&2; exit 1; }
		rm -rf "${ddb_dir:?}/$ddb_version"
		mv "$ddb_dir/$ddb_version.tmp" "$ddb_dir/$ddb_version"
	fi
	echo "services: starting DynamoDB Local" >&2
	# Started detached: the subshell execs into setsid/java, every stream redirected, so no
	# shell is left waiting on it with the caller's stdout (a CI runner reading the output to
	# its end would hang). Its working directory is the emulator's, where it writes metadata.
	command -v javac >/dev/null || { echo "services: DynamoDB Local's loopback launcher needs a JDK (Debian: openjdk-17-jdk-headless)" >&2; exit 1; }
	(cd "$ddb_home" && exec setsid nohup java -Xmx512m -Djava.library.path=./DynamoDBLocal_lib \
		-cp "DynamoDBLocal.jar:DynamoDBLocal_lib/*" "$root/scripts/dynamodb/Loopback.java" \
		-inMemory -sharedDb -disableTelemetry -port "${IDEM_DYNAMODB_PORT:-8000}") \
		>"$IDEM_SERVICES_DIR/dynamodb-local.log" 2>&1 </dev/null &
	echo $! >"$IDEM_SERVICES_DIR/dynamodb-local.pid"
	wait_port "${IDEM_DYNAMODB_PORT:-8000}" 60 "DynamoDB Local"
fi
