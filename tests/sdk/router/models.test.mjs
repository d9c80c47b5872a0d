// The official SDK's comfy.models.run against a real gateway's model_router
// (COMFY_ROUTER_BASE_URL and COMFY_API_KEY, set by router_test.go: the
// gateway's address and a JWT it accepts; model acme/image is a synchronous
// JSON partner peer that echoes the prompt).
import { test } from "node:test";
import assert from "node:assert/strict";

import { comfy, ComfyError, NotFound } from "@comfyorg/sdk";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

test("run returns the partner's native output and the call's request id", async () => {
  const { data, requestId } = await comfy.models.run("acme/image", { prompt: "a red fox", seed: 7 });
  assert.equal(data.prompt, "a red fox");
  assert.equal(data.seed, 7);
  assert.ok(Array.isArray(data.images) && data.images.length > 0, JSON.stringify(data));
  assert.match(requestId, UUID);
});

test("an unknown model is NotFound, with the bucket and the request id", async () => {
  await assert.rejects(comfy.models.run("acme/imagee", { prompt: "x" }), (err) => {
    assert.ok(err instanceof NotFound, String(err));
    assert.equal(err.code, "model_not_found");
    assert.equal(err.httpStatus, 404);
    assert.match(err.message, /acme\/image/); // the suggestion
    assert.match(err.requestId, UUID);
    return true;
  });
});

test("input the model's schema refuses is a 422 with the per-field detail", async () => {
  await assert.rejects(comfy.models.run("acme/image", { prompt: "" }), (err) => {
    assert.ok(err instanceof ComfyError, String(err));
    assert.equal(err.code, "invalid_input");
    assert.equal(err.httpStatus, 422);
    const detail = err.details?.detail;
    assert.ok(Array.isArray(detail) && detail.length > 0, JSON.stringify(err.details));
    assert.deepEqual(detail[0].loc, ["body", "prompt"]);
    assert.match(err.requestId, UUID);
    return true;
  });
});

test("a repeat with the same Idempotency-Key gets the recorded answer", async () => {
  const idempotencyKey = `sdk-replay-${Date.now()}`;
  const first = await comfy.models.run("acme/image", { prompt: "a blue jay" }, { idempotencyKey });
  const again = await comfy.models.run("acme/image", { prompt: "a blue jay" }, { idempotencyKey });
  assert.deepEqual(again.data, first.data);
  // router_test.go checks that the partner saw one submission for the two.
});
