// The official SDK against a real comfygate gateway (COMFY_BASE_URL, set by
// sdk_test.go): commit an asset from bytes, commit the same bytes again and
// get the same asset id, download whole and by range, delete.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";

import { Comfy } from "@comfyorg/sdk";
import { ComfyLow } from "@comfyorg/sdk/low";

const baseUrl = process.env.COMFY_BASE_URL;

test("asset commit, dedup, download and delete through @comfyorg/sdk", async () => {
  assert.ok(baseUrl, "COMFY_BASE_URL must name the gateway");
  const client = new Comfy();
  const low = new ComfyLow(baseUrl);
  const bytes = new Uint8Array(randomBytes(200_000));

  const first = client.assets.fromBytes(bytes, { filename: "sdk_input.png", contentType: "image/png" });
  const id = await first.commit();
  assert.match(id, /^[0-9a-f-]{36}$/);
  assert.equal(first.createdNew, true, "the first commit uploads new bytes");

  const again = client.assets.fromBytes(bytes, { filename: "sdk_input.png", contentType: "image/png" });
  assert.equal(await again.commit(), id, "the same bytes and name commit to the same asset");

  const meta = await low.getAsset(id);
  assert.equal(meta.hash, await first.hash());
  assert.equal(meta.size_bytes, bytes.length);
  assert.equal(meta.content_type, "image/png");

  const whole = new Uint8Array(await (await low.getAssetContent(id)).arrayBuffer());
  assert.deepEqual(whole, bytes);

  const response = await low.getAssetContent(id, { range: [1000, 1999] });
  assert.equal(response.status, 206);
  const slice = new Uint8Array(await response.arrayBuffer());
  assert.deepEqual(slice, bytes.subarray(1000, 2000));

  await first.delete();
  await assert.rejects(() => low.getAsset(id), (err) => err.status === 404 || err.httpStatus === 404 || /not.?found/i.test(String(err.code ?? err.name)));
  assert.equal(await low.headAssetByHash(await again.hash()), false, "no record over the bytes remains");
});
