// The official SDK against a serverless deployment of a real gateway
// started from caddyfile-examples/serverless.Caddyfile (COMFY_BASE_URL is
// http://127.0.0.1:<port>/deployment/<id>, COMFY_API_KEY the owner's key;
// set by deployment_test.go): upload an asset, run LoadImage → ImageInvert
// → SaveImage on it, stream the events and download the output. Every URL
// the gateway hands out keeps the /deployment/<id> prefix exactly once.
import { test } from "node:test";
import assert from "node:assert/strict";

import { Comfy } from "@comfyorg/sdk";
import { ComfyLow } from "@comfyorg/sdk/low";

import { decode, encodeRGB } from "../png.mjs";

const baseUrl = process.env.COMFY_BASE_URL;
const SIZE = 64;
const gradient = (x, y) => [x * 3, y * 3, (x + y) % 256];

function comfyInvert(v) {
  const x = Math.fround(v / 255);
  return Math.floor(Math.fround(255 * Math.fround(1 - x)));
}

// checkURL asserts that u is on the gateway's origin, under the deployment
// prefix once and then /api/v2/.
function checkURL(what, u) {
  const base = new URL(baseUrl);
  const url = new URL(u, base.origin);
  assert.equal(url.origin, base.origin, `${what}: ${u}`);
  assert.ok(url.pathname.startsWith(`${base.pathname}/api/v2/`), `${what} loses the prefix: ${u}`);
  assert.equal(url.pathname.split(base.pathname).length, 2, `${what} duplicates the prefix: ${u}`);
}

test("a deployment's SDK flow: upload, run, stream, download", async () => {
  assert.match(baseUrl, /\/deployment\/[a-z0-9-]+$/, "COMFY_BASE_URL must name a deployment");
  const client = new Comfy({ apiKey: process.env.COMFY_API_KEY });
  const low = new ComfyLow(baseUrl, process.env.COMFY_API_KEY);

  const input = client.assets.fromBytes(encodeRGB(SIZE, SIZE, gradient), { filename: "dep_input.png", contentType: "image/png" });
  const assetId = await input.commit();
  const meta = await low.getAsset(assetId);
  checkURL("asset url", meta.url);

  const wf = client.workflows.fromJson({
    1: { class_type: "LoadImage", inputs: { image: "" } },
    2: { class_type: "ImageInvert", inputs: { image: ["1", 0] } },
    3: { class_type: "SaveImage", inputs: { filename_prefix: "dep", images: ["2", 0] } },
  });
  wf.setInput("1", "image", input);
  const job = await client.submit(wf);
  for (const [name, u] of Object.entries(job.model.urls)) checkURL(`job urls.${name}`, u);

  const events = [];
  for await (const e of job.events()) events.push(e);
  const last = events[events.length - 1];
  assert.equal(last.kind, "statusChange");
  assert.equal(last.status, "succeeded");
  assert.ok(events.some((e) => e.kind === "outputReady"), `events: ${events.map((e) => e.kind)}`);

  await job.refresh();
  assert.equal(job.status, "succeeded", JSON.stringify(job.model.error));
  for (const [name, u] of Object.entries(job.model.urls)) checkURL(`refreshed urls.${name}`, u);
  for (const o of job.model.outputs) checkURL("output url", o.url);
  assert.ok(job.model.logs && job.model.logs.text.includes("got prompt"), "the deployment's GET carries the run log");

  const outputs = job.getOutputs("3");
  assert.equal(outputs.length, 1);
  const png = decode(await outputs[0].toBytes());
  assert.equal(png.width, SIZE);
  for (let y = 0; y < SIZE; y += 5) {
    for (let x = 0; x < SIZE; x += 3) {
      const want = gradient(x, y).map(comfyInvert);
      const i = (y * SIZE + x) * png.channels;
      assert.deepEqual([png.data[i], png.data[i + 1], png.data[i + 2]], want, `pixel ${x},${y}`);
    }
  }

  const response = await fetch(`${baseUrl}/api/v2/jobs`, { headers: { Authorization: `Bearer ${process.env.COMFY_API_KEY}` } });
  assert.equal(response.status, 200);
  const items = (await response.json()).jobs;
  assert.ok(items.some((j) => j.id === job.id), "the deployment lists its job");
  for (const j of items) for (const [name, u] of Object.entries(j.urls)) checkURL(`list urls.${name}`, u);
});
