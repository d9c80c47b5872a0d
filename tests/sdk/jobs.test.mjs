// The official SDK runs jobs on a real gateway's built-in executor
// (COMFY_BASE_URL, set by sdk_test.go): LoadImage → ImageInvert → SaveImage
// by file name and by asset handle, live events, the job's workflow, and
// cancellation of a queued and of a running job.
import { test } from "node:test";
import assert from "node:assert/strict";

import { Comfy } from "@comfyorg/sdk";

import { decode, encodeRGB } from "./png.mjs";

const SIZE = 512;
const INPUT_NAME = "sdk_e2e_input.png";
const gradient = (x, y) => [x % 256, y % 256, (x * 7 + y * 13) % 256];

// What ComfyUI writes for an inverted 8-bit channel value: the maths runs
// in float32 (v/255, 1-x, 255*y) and SaveImage truncates.
function comfyInvert(v) {
  const x = Math.fround(v / 255);
  const inv = Math.fround(1 - x);
  return Math.floor(Math.fround(255 * inv));
}

function invertWorkflow(image) {
  return {
    1: { class_type: "LoadImage", inputs: { image } },
    2: { class_type: "ImageInvert", inputs: { image: ["1", 0] } },
    3: { class_type: "SaveImage", inputs: { filename_prefix: "sdk_e2e", images: ["2", 0] } },
  };
}

async function checkInverted(job) {
  assert.equal(job.status, "succeeded", JSON.stringify(job.error));
  const outputs = job.getOutputs("3");
  assert.equal(outputs.length, 1);
  assert.equal(outputs[0].contentType, "image/png");
  assert.equal(outputs[0].jobId, job.id);
  const png = decode(await outputs[0].toBytes());
  assert.equal(png.width, SIZE);
  assert.equal(png.height, SIZE);
  assert.ok(png.text.prompt, "SaveImage writes the prompt text chunk");
  for (let y = 0; y < SIZE; y += 7) {
    for (let x = 0; x < SIZE; x += 5) {
      const want = gradient(x, y).map(comfyInvert);
      const i = (y * SIZE + x) * png.channels;
      assert.deepEqual([png.data[i], png.data[i + 1], png.data[i + 2]], want, `pixel ${x},${y}`);
    }
  }
}

const client = new Comfy();
const input = client.assets.fromBytes(encodeRGB(SIZE, SIZE, gradient), {
  filename: INPUT_NAME,
  contentType: "image/png",
});

test("invert by file name", async () => {
  await input.commit();
  const wf = client.workflows.fromJson(invertWorkflow(INPUT_NAME));
  const job = await client.run(wf);
  await checkInverted(job);
  const { workflow, format } = await job.getWorkflow();
  assert.equal(format, "api");
  assert.deepEqual(workflow, JSON.parse(JSON.stringify(invertWorkflow(INPUT_NAME))));
});

test("invert by asset handle", async () => {
  const wf = client.workflows.fromJson(invertWorkflow(""));
  wf.setInput("1", "image", input);
  const job = await client.run(wf);
  await checkInverted(job);
});

test("events: snapshot, outputs before the terminal status, stream ends", async () => {
  const job = await client.submit(client.workflows.fromJson(invertWorkflow(INPUT_NAME)));
  const events = [];
  for await (const e of job.events()) events.push(e);
  // The snapshot on connect is a status event; for a job that already ended
  // it is preceded by the outputs, so they still arrive before the terminal
  // status.
  const firstStatus = events.findIndex((e) => e.kind === "statusChange");
  assert.ok(firstStatus >= 0, "the stream carries a status snapshot");
  assert.ok(
    events.slice(0, firstStatus).every((e) => e.kind === "outputReady"),
    `only outputs may precede the first status: ${events.map((e) => e.kind)}`,
  );
  const last = events[events.length - 1];
  assert.equal(last.kind, "statusChange");
  assert.equal(last.status, "succeeded");
  const outputs = events.filter((e) => e.kind === "outputReady");
  assert.ok(outputs.length >= 1, "at least one output before the terminal status");
  assert.equal(outputs[0].output.nodeId, "3");
  await job.refresh();
  assert.equal(job.status, "succeeded");
});

// A workflow that keeps a worker busy for a while: big images, heavy blurs,
// and cancellation is honoured between nodes.
function slowWorkflow() {
  const wf = { 1: { class_type: "EmptyImage", inputs: { width: 2048, height: 2048, batch_size: 1, color: 0x808080 } } };
  let prev = "1";
  for (let i = 2; i <= 20; i++) {
    wf[i] = { class_type: "ImageBlur", inputs: { image: [prev, 0], blur_radius: 31, sigma: 3 } };
    prev = String(i);
  }
  wf[99] = { class_type: "SaveImage", inputs: { filename_prefix: "slow", images: [prev, 0] } };
  return client.workflows.fromJson(wf);
}

async function until(job, predicate, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    await job.refresh();
    if (predicate(job.status)) return;
    if (Date.now() > deadline) throw new Error(`job ${job.id} stuck in ${job.status}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test("cancel a queued job and a running job", async () => {
  // The self-hosted example runs two jobs at a time: fill both slots, so the
  // third waits in the queue.
  const running = [await client.submit(slowWorkflow()), await client.submit(slowWorkflow())];
  const queued = await client.submit(slowWorkflow());
  for (const job of running) await until(job, (s) => s === "running");
  await queued.refresh();
  assert.equal(queued.status, "queued");

  await queued.cancel();
  assert.equal(queued.status, "canceled", "a queued job is canceled at once");

  await running[0].cancel();
  assert.ok(["canceling", "canceled"].includes(running[0].status), running[0].status);
  await running[0].wait(60_000);
  assert.equal(running[0].status, "canceled");

  await running[1].cancel();
  await running[1].wait(60_000);
  assert.equal(running[1].status, "canceled");
});
