// @stable-canvas/comfyui-client, unmodified, against comfygate's ComfyUI
// front at the site root. Node 20 has no global WebSocket, so the `ws`
// package is passed as the library documents; the API key travels as
// ?token= through the library's LoginAuthPlugin (on HTTP and WebSocket).
import { test, after } from "node:test";
import assert from "node:assert/strict";

import WebSocket from "ws";
import { Client, Workflow, plugins, HttpError, WorkflowInterruptedError } from "@stable-canvas/comfyui-client";

import { BASE, KEY, assertInverted, assertSequence, inputPNG, invertPrompt, previewPrompt, slowPrompt, until } from "./common.mjs";

const url = new URL(BASE);
const client = new Client({ api_host: url.host, WebSocket });
client.use(new plugins.LoginAuthPlugin({ token: KEY }));
const seen = [];
client.on("message", (ev) => {
  if (typeof ev.data === "string") seen.push(JSON.parse(ev.data));
});
await client.connect();
after(() => client.close());

test("the client's introspection calls answer", async () => {
  const defs = await client.getNodeDefs();
  assert.ok(defs.LoadImage && defs.ImageInvert && defs.SaveImage);
  assert.equal(defs.SaveImage.output_node, true);
  const stats = await client.getSystemStats();
  assert.ok(Array.isArray(stats.devices));
  const { Running, Pending } = await client.getQueue();
  assert.ok(Array.isArray(Running) && Array.isArray(Pending));
  assert.ok(Array.isArray((await client.getHistory()).History));
});

async function upload(name) {
  // The library has no upload helper; its fetchApi carries the token.
  const form = new FormData();
  form.append("image", new Blob([inputPNG()], { type: "image/png" }), name);
  form.append("overwrite", "true");
  const res = await client.fetchApi("/upload/image", { method: "POST", body: form });
  return res.json();
}

test("upload, queue, progress and executed over the socket, download through /view", async () => {
  const info = await upload("stable_canvas_input.png");
  assert.deepEqual(info, { name: "stable_canvas_input.png", subfolder: "", type: "input" });

  const wf = new Workflow();
  const { LoadImage, ImageInvert, SaveImage } = wf.classes;
  const [image] = LoadImage({ image: info.name });
  const [inverted] = ImageInvert({ image });
  SaveImage({ images: inverted, filename_prefix: "stable_canvas" });
  const progress = [];
  const invoked = wf.instance(client, { progress: (p) => progress.push(p) });
  await invoked.enqueue();
  const result = await invoked.wait();

  const promptId = invoked.task_id;
  assert.ok(promptId);
  assert.ok(progress.length > 0, "progress messages reached the progress hook");
  assert.ok(progress.every((p) => p.prompt_id === promptId));
  const executed = seen.filter((m) => m.type === "executed" && m.data.prompt_id === promptId);
  assert.equal(executed.length, 1);
  assert.equal(result.images.length, 1);
  assert.equal(result.images[0].type, "url");

  const view = new URL(result.images[0].data);
  assert.equal(view.pathname, "/view");
  const res = await client.fetchApi(view.pathname + view.search);
  assertInverted(Buffer.from(await res.arrayBuffer()));

  const outputs = await client.getPromptOutputs(promptId);
  assert.deepEqual(outputs["3"].images, executed[0].data.output.images);
  await until(() => seen.some((m) => m.type === "executing" && m.data.node === null && m.data.prompt_id === promptId), 10_000, "executing null");
  assertSequence(seen.filter((m) => m.data?.prompt_id === promptId), ["1", "2", "3"]);
});

test("a preview is a temp image over the socket and in the history", async () => {
  const invoked = new Workflow().instance(client);
  invoked.workflow.prompt = previewPrompt("stable_canvas_preview");
  await invoked.enqueue();
  const result = await invoked.wait();
  const promptId = invoked.task_id;
  assert.equal(result.images.length, 2);
  await until(() => seen.some((m) => m.type === "executing" && m.data.node === null && m.data.prompt_id === promptId), 10_000, "executing null");
  const executed = seen.filter((m) => m.type === "executed" && m.data.prompt_id === promptId);
  const types = Object.fromEntries(executed.map((m) => [m.data.node, m.data.output.images[0].type]));
  assert.deepEqual(types, { 2: "temp", 3: "output" });
  assertSequence(seen.filter((m) => m.data?.prompt_id === promptId), ["1", "2", "3"]);
  const outputs = await client.getPromptOutputs(promptId);
  assert.equal(outputs["2"].images[0].type, "temp");
});

test("an invalid prompt fails as the client's HttpError with ComfyUI's 400 body", async () => {
  await assert.rejects(client.enqueue(invertPrompt("not_uploaded.png", "x")), (err) => {
    assert.ok(err instanceof HttpError, String(err));
    assert.equal(err.status, 400);
    assert.equal(err.json.error.type, "prompt_outputs_failed_validation");
    assert.equal(err.json.node_errors["1"].errors[0].type, "custom_validation_failed");
    return true;
  });
  await assert.rejects(client.enqueue({ 1: { class_type: "NoSuchNode", inputs: {} } }), (err) => {
    assert.ok(err instanceof HttpError);
    assert.equal(err.json.error.type, "missing_node_type");
    return true;
  });
});

test("interrupt ends a running prompt", async () => {
  const wf = new Workflow();
  const invoked = wf.instance(client);
  invoked.workflow.prompt = slowPrompt();
  await invoked.enqueue();
  const done = invoked.wait();
  // Running: the prompt's first progress message arrived.
  await new Promise((resolve) => client.on("progress", (p) => p.prompt_id === invoked.task_id && resolve()));
  await invoked.interrupt();
  await assert.rejects(done, WorkflowInterruptedError);
  const status = await client.getPromptStatus(invoked.task_id);
  assert.equal(status.done, true);
});
