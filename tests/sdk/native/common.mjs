// What the ComfyUI-client tests share: the gateway they talk to (set by
// native_test.go), the test image, the workflows and the pixel check.
import assert from "node:assert/strict";

import { decode, encodeRGB } from "../png.mjs";

/** Base URL of the ComfyUI front (may end in a path prefix), and account A's API key. */
export const BASE = process.env.NATIVE_URL;
export const KEY = process.env.NATIVE_KEY;
if (!BASE || !KEY) throw new Error("NATIVE_URL and NATIVE_KEY must be set (tests/sdk/native_test.go sets them)");

export const SIZE = 64;
const gradient = (x, y) => [(x * 3) % 256, (y * 5) % 256, (x * 7 + y * 13) % 256];
export const inputPNG = () => encodeRGB(SIZE, SIZE, gradient);

// What ComfyUI writes for an inverted 8-bit value: float32 maths, then a
// truncating conversion on save.
function comfyInvert(v) {
  const x = Math.fround(v / 255);
  return Math.floor(Math.fround(255 * Math.fround(1 - x)));
}

/** assertInverted checks a downloaded PNG pixel by pixel against the inverted input. */
export function assertInverted(bytes) {
  const png = decode(bytes);
  assert.equal(png.width, SIZE);
  assert.equal(png.height, SIZE);
  for (let y = 0; y < SIZE; y++) {
    for (let x = 0; x < SIZE; x++) {
      const want = gradient(x, y).map(comfyInvert);
      const i = (y * SIZE + x) * png.channels;
      assert.deepEqual([png.data[i], png.data[i + 1], png.data[i + 2]], want, `pixel ${x},${y}`);
    }
  }
}

/** invertPrompt is LoadImage → ImageInvert → SaveImage in API format. */
export function invertPrompt(image, prefix) {
  return {
    1: { class_type: "LoadImage", inputs: { image } },
    2: { class_type: "ImageInvert", inputs: { image: ["1", 0] } },
    3: { class_type: "SaveImage", inputs: { filename_prefix: prefix, images: ["2", 0] } },
  };
}

/** slowPrompt runs for seconds (50 blurs of a 1024² image, about 0.2 s of CPU each) so that it can be interrupted. */
export function slowPrompt() {
  const p = { 1: { class_type: "EmptyImage", inputs: { width: 1024, height: 1024, batch_size: 1, color: 1234567 } } };
  let prev = "1";
  for (let i = 10; i < 60; i++) {
    p[i] = { class_type: "ImageBlur", inputs: { image: [prev, 0], blur_radius: 31, sigma: 3 } };
    prev = String(i);
  }
  p[99] = { class_type: "SaveImage", inputs: { filename_prefix: "slow", images: [prev, 0] } };
  return p;
}

/** until polls cond every 50 ms for up to ms. */
export async function until(cond, ms, what) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * assertSequence checks one prompt's messages (in arrival order) as a
 * client that draws per-node progress reads them: execution_start once,
 * executing for each node of nodes in order and once, then executing null
 * once and last; progress values strictly rising.
 */
export function assertSequence(messages, nodes) {
  const types = messages.map((m) => m.type);
  assert.equal(types.filter((t) => t === "execution_start").length, 1, types.join(","));
  const executing = messages.filter((m) => m.type === "executing");
  assert.deepEqual(executing.map((m) => m.data.node), [...nodes, null], types.join(","));
  assert.equal(messages.at(-1).type, "executing", "executing null comes last: " + types.join(","));
  const values = messages.filter((m) => m.type === "progress").map((m) => m.data.value);
  for (let i = 1; i < values.length; i++) assert.ok(values[i] > values[i - 1], `progress ${values.join(",")}`);
}

/** previewPrompt is EmptyImage → PreviewImage and SaveImage in API format. */
export function previewPrompt(prefix) {
  return {
    1: { class_type: "EmptyImage", inputs: { width: 8, height: 8, batch_size: 1, color: 255 } },
    2: { class_type: "PreviewImage", inputs: { images: ["1", 0] } },
    3: { class_type: "SaveImage", inputs: { filename_prefix: prefix, images: ["1", 0] } },
  };
}
