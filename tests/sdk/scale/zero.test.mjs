// The official SDK against a serverless deployment whose pool is at zero
// (set up by scale_test.go): submit gets 429 deployment_not_ready with
// Retry-After while the provisioner brings a worker up, retries, and the
// job runs to succeeded. Its id goes to COMFYGATE_JOB_FILE, for
// reads.test.mjs to read once the pool is at zero again.
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";

import { Comfy } from "@comfyorg/sdk";

test("a deployment at zero: the SDK's retry runs the job once a worker is up", async () => {
  const client = new Comfy({ apiKey: process.env.COMFY_API_KEY });
  const wf = client.workflows.fromJson({
    1: { class_type: "SlowNode", inputs: { steps: 2, step_ms: 50 } },
    2: { class_type: "TextOutput", inputs: { text: "from zero" } },
  });
  const started = Date.now();
  const job = await client.run(wf, { timeoutMs: 60_000 });
  assert.equal(job.status, "succeeded");
  const waited = Date.now() - started;
  assert.ok(waited >= 2_000, `the job ran after ${waited} ms: no cold start was waited for`);
  writeFileSync(process.env.COMFYGATE_JOB_FILE, job.id);
});
