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
  // The SDK retries a 429 on its own: what it was answered is recorded
  // through the fetch it is given.
  const submits = [];
  const recording = async (url, init) => {
    const response = await fetch(url, init);
    if ((init?.method ?? "GET") === "POST" && new URL(String(url)).pathname.endsWith("/jobs")) {
      const code = response.status === 429 ? (await response.clone().json()).error?.code : "";
      submits.push(`${response.status} ${code}`.trim());
      // The Go side starts the provisioner once the SDK was refused.
      if (response.status === 429) writeFileSync(process.env.COMFYGATE_REFUSED_FILE, code);
    }
    return response;
  };
  const client = new Comfy({ apiKey: process.env.COMFY_API_KEY, fetch: recording });
  const wf = client.workflows.fromJson({
    1: { class_type: "SlowNode", inputs: { steps: 2, step_ms: 50 } },
    2: { class_type: "TextOutput", inputs: { text: "from zero" } },
  });
  const job = await client.run(wf, { timeoutMs: 60_000 });
  assert.equal(job.status, "succeeded");
  // A cold start was waited for: refused as not ready, then accepted.
  assert.ok(submits.length >= 2 && submits[0] === "429 deployment_not_ready" && submits.at(-1) === "201",
    `the submits were answered ${submits.join(", ")}: want 429 deployment_not_ready, then 201`);
  writeFileSync(process.env.COMFYGATE_JOB_FILE, job.id);
});
