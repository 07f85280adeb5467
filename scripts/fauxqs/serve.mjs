// Starts fauxqs (a local SQS/SNS server) bound to 127.0.0.1 only: fauxqs's own CLI listens
// on every interface. Port from FAUXQS_PORT (default 4566). Started by
// scripts/services.d/40-fauxqs.sh; stops on SIGTERM/SIGINT.
import { buildApp } from "fauxqs";

const port = parseInt(process.env.FAUXQS_PORT ?? "4566", 10);
const app = buildApp({ logger: process.env.FAUXQS_LOGGER === "true" });
await app.listen({ port, host: "127.0.0.1" });
console.log(`fauxqs listening on http://127.0.0.1:${port}`);
for (const sig of ["SIGTERM", "SIGINT"]) {
	process.on(sig, () => {
		app.close().then(() => process.exit(0));
	});
}
