// Starts kinesalite (a local Kinesis server, in memory) bound to 127.0.0.1 only: kinesalite's
// own CLI listens on every interface. Port from KINESALITE_PORT (default 4567). Streams become
// ACTIVE, and reshards finish, after a few milliseconds instead of kinesalite's default half
// second, so tests that create streams and split shards run quickly. Started by
// scripts/services.d/45-kinesalite.sh; stops on SIGTERM/SIGINT.
const kinesalite = require("kinesalite");

const port = parseInt(process.env.KINESALITE_PORT || "4567", 10);
const server = kinesalite({ createStreamMs: 20, deleteStreamMs: 20, updateStreamMs: 20, shardLimit: 1000 });
server.listen(port, "127.0.0.1", () => {
	console.log(`kinesalite listening on http://127.0.0.1:${port}`);
});
for (const sig of ["SIGTERM", "SIGINT"]) {
	process.on(sig, () => server.close(() => process.exit(0)));
}
// kinesalite throws from a request's error handler when a client aborts a request (a Go
// client whose context ended); that is the client's business, not a reason to stop serving.
process.on("uncaughtException", (err) => {
	if (err && (err.code === "ECONNRESET" || err.message === "aborted")) {
		return;
	}
	console.error(err);
	process.exit(1);
});
