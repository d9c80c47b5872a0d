// @saintno/comfyui-sdk, unmodified, against comfygate's ComfyUI front
// (NATIVE_URL, possibly under a path prefix; the API key as a bearer
// token, which the SDK sends on HTTP and on its WebSocket).
import { test, after } from "node:test";
import assert from "node:assert/strict";

import { ComfyApi, CallWrapper, PromptBuilder } from "@saintno/comfyui-sdk";

import { BASE, KEY, assertInverted, assertSequence, inputPNG, invertPrompt, previewPrompt, slowPrompt, until } from "./common.mjs";

const api = new ComfyApi(BASE, undefined, { credentials: { type: "bearer_token", token: KEY } });
// Every message the socket delivers, by type (the SDK re-dispatches each).
const seen = [];
const connected = new Promise((resolve) => api.on("status", resolve));
api.on("all", (ev) => seen.push(ev.detail));
api.init();
await api.waitForReady();
await connected;
after(() => api.destroy());

const messages = (type, promptId) => seen.filter((m) => m.type === type && m.data.prompt_id === promptId);

function invertBuilder(image) {
  return new PromptBuilder(invertPrompt("placeholder.png", "saintno"), ["image"], ["result"])
    .setInputNode("image", "1.inputs.image")
    .setOutputNode("result", "3")
    .input("image", image);
}

test("the SDK's start-up calls answer", async () => {
  const stats = await api.getSystemStats();
  assert.equal(typeof stats.system.os, "string");
  const defs = await api.getNodeDefs("ImageInvert");
  assert.deepEqual(defs.ImageInvert.output, ["IMAGE"]);
  assert.equal(await api.getNodeDefs("NoSuchNode"), null, "an unknown class is {}");
  assert.deepEqual(await api.getEmbeddings(), []);
  assert.deepEqual(await api.getExtensions(), []);
  assert.equal((await api.pollStatus(2000)).exec_info.queue_remaining >= 0, true);
});

test("upload, queue, progress and executed over the socket, download through /view", async () => {
  const up = await api.uploadImage(inputPNG(), "saintno_input.png", { override: true });
  assert.ok(up, "uploadImage failed");
  assert.equal(up.info.filename, "saintno_input.png");
  assert.equal(up.info.type, "input");

  let failure;
  const result = await new CallWrapper(api, invertBuilder(up.info.filename))
    .onFailed((err) => (failure = err))
    .run();
  assert.ok(result, `the call failed: ${failure}`);
  const images = result.result.images;
  assert.equal(images.length, 1);
  assert.equal(images[0].type, "output");

  const history = await api.getHistory(images[0].subfolder); // outputs live under <prompt_id>/
  assert.equal(history.status.status_str, "success");
  const promptId = history.prompt[1];
  await until(() => messages("execution_success", promptId).length === 1, 10_000, "execution_success");
  assert.ok(messages("progress", promptId).length > 0, "progress messages");
  const executed = messages("executed", promptId);
  assert.equal(executed.length, 1, "one executed message for the one output node");
  assert.equal(executed[0].data.node, "3");
  assert.deepEqual(executed[0].data.output.images, images);
  assert.equal(messages("execution_start", promptId).length, 1);
  const order = seen.filter((m) => m.data.prompt_id === promptId).map((m) => m.type);
  assert.ok(order.indexOf("executed") < order.indexOf("execution_success"), order.join(","));
  const last = seen.filter((m) => m.type === "executing" && m.data.prompt_id === promptId).at(-1);
  assert.equal(last.data.node, null, "executing {node: null} ends the prompt");
  assertSequence(seen.filter((m) => m.data?.prompt_id === promptId), ["1", "2", "3"]);
  assert.deepEqual(history.prompt[4], ["3"], "outputs_to_execute");

  const blob = await api.getImage(images[0]);
  assertInverted(Buffer.from(await blob.arrayBuffer()));
});

test("a preview is a temp image, a saved one an output", async () => {
  const builder = new PromptBuilder(previewPrompt("saintno_preview"), [], ["preview", "saved"])
    .setOutputNode("preview", "2")
    .setOutputNode("saved", "3");
  let failure;
  const result = await new CallWrapper(api, builder).onFailed((err) => (failure = err)).run();
  assert.ok(result, `the call failed: ${failure}`);
  assert.equal(result.preview.images[0].type, "temp");
  assert.equal(result.saved.images[0].type, "output");
  const promptId = result._promptId ?? (await api.getHistory(result.saved.images[0].subfolder)).prompt[1];
  await until(() => messages("execution_success", promptId).length === 1, 10_000, "execution_success");
  assertSequence(seen.filter((m) => m.data?.prompt_id === promptId), ["1", "2", "3"]);
  const history = await api.getHistory(promptId);
  assert.equal(history.outputs["2"].images[0].type, "temp");
  assert.deepEqual(history.prompt[4], ["2", "3"]);
  const blob = await api.getImage(history.outputs["2"].images[0]);
  assert.ok((await blob.arrayBuffer()).byteLength > 0);
});

test("an invalid prompt fails as the SDK's EnqueueFailedError with ComfyUI's node_errors", async () => {
  const failures = []; // the SDK reports its EnqueueFailedError, then a generic Error
  const result = await new CallWrapper(api, invertBuilder("not_uploaded.png"))
    .onFailed((err) => failures.push(err))
    .run();
  assert.equal(result, false);
  const failure = failures.find((err) => err.name === "EnqueueFailedError");
  assert.ok(failure, failures.map(String).join("; "));
  const body = failure.cause;
  assert.equal(body.error.type, "prompt_outputs_failed_validation");
  assert.equal(body.node_errors["1"].class_type, "LoadImage");
  assert.deepEqual(body.node_errors["1"].dependent_outputs, ["3"]);
  assert.equal(body.node_errors["1"].errors[0].type, "custom_validation_failed");
  assert.equal(body.node_errors["1"].errors[0].extra_info.input_name, "image");
});

test("interrupt ends a running prompt", async () => {
  const slow = new PromptBuilder(slowPrompt(), [], ["result"]).setOutputNode("result", "99");
  let failure;
  let started;
  const startedP = new Promise((resolve) => (started = resolve));
  const call = new CallWrapper(api, slow)
    .onStart(started)
    .onFailed((err) => (failure = err))
    .run();
  const promptId = await startedP; // the first progress message of the prompt
  await api.interrupt();
  assert.equal(await call, false);
  assert.equal(failure?.name, "ExecutionInterruptedError", String(failure));
  await until(async () => (await api.getHistory(promptId))?.status?.status_str === "error", 10_000, "the history entry");
  const interrupted = messages("execution_interrupted", promptId);
  assert.equal(interrupted.length, 1);
  const running = messages("executing", promptId).filter((m) => m.data.node !== null).at(-1).data.node;
  assert.equal(interrupted[0].data.node_id, running, "execution_interrupted names the node that ran");
  assert.ok(interrupted[0].data.executed.length >= 1 || running === "1", JSON.stringify(interrupted[0].data));
  const entry = await api.getHistory(promptId);
  const recorded = entry.status.messages.find(([type]) => type === "execution_interrupted")[1];
  assert.equal(recorded.node_id, running);
  const queue = await api.getQueue();
  assert.ok(![...queue.queue_running, ...queue.queue_pending].some((item) => item[1] === promptId));
});
