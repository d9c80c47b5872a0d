// The official SDK against a serverless deployment whose pool is back at
// zero (scale_test.go waited for it): the job zero.test.mjs ran
// (COMFYGATE_JOB_ID) is read from storage, its result, its outputs (bytes,
// download URL, asset record), the job list and its event stream, every
// request answered 2xx. The SDK retries a 429 on its own, so every
// response it gets is recorded through the fetch it is given.
import { test } from "node:test";
import assert from "node:assert/strict";

import { Comfy } from "@comfyorg/sdk";

test("a deployment at zero serves a finished job from storage", async () => {
  const seen = [];
  const recording = async (url, init) => {
    const response = await fetch(url, init);
    seen.push(`${response.status} ${init?.method ?? "GET"} ${new URL(String(url)).pathname}`);
    return response;
  };
  const client = new Comfy({ apiKey: process.env.COMFY_API_KEY, fetch: recording });

  const job = await client.jobs.get(process.env.COMFYGATE_JOB_ID);
  await job.result();
  assert.equal(job.status, "succeeded");
  const outputs = job.getOutputs("2");
  assert.equal(outputs.length, 1, JSON.stringify(job.model.outputs));
  assert.equal(new TextDecoder().decode(await outputs[0].toBytes()), "from zero");
  const { url } = await outputs[0].getDownloadUrl();
  assert.ok(url, "no download URL");
  const asset = await client.assets.get(outputs[0].id);
  assert.equal(asset.id, outputs[0].id);

  const events = [];
  for await (const e of job.events()) events.push(e);
  assert.deepEqual(events.map((e) => e.kind), ["outputReady", "statusChange"]);
  assert.equal(events[1].status, "succeeded");

  const list = await recording(`${process.env.COMFY_BASE_URL}/api/v2/jobs`, {
    headers: { Authorization: `Bearer ${process.env.COMFY_API_KEY}` },
  });
  assert.ok((await list.json()).jobs.some((j) => j.id === job.id), "the job is not listed");

  assert.ok(seen.length >= 6, `only ${seen.length} requests recorded: ${seen}`);
  const refused = seen.filter((s) => !s.startsWith("2"));
  assert.deepEqual(refused, [], `answers at zero: ${seen.join(", ")}`);
});
