# The services this kind of machine runs before a session: start any that has stopped.
# (Commands from the machine's documentation; each is a no-op when the service is up.)
if ! port_open 5432; then
	echo "services: starting PostgreSQL" >&2
	pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
	wait_port 5432 30 PostgreSQL
fi
if ! port_open 3306; then
	echo "services: starting MariaDB" >&2
	start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
	wait_port 3306 30 MariaDB
fi
if ! port_open 6379; then
	echo "services: starting Redis" >&2
	redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
		--dir /var/lib/redis --logfile /var/log/redis/ci.log
	wait_port 6379 15 Redis
fi
if ! port_open 5672; then
	echo "services: starting RabbitMQ" >&2
	rabbitmq-server -detached
	wait_port 5672 90 RabbitMQ
fi
if ! port_open 4222; then
	echo "services: starting NATS" >&2
	start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
		-a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
	wait_port 4222 15 NATS
fi
